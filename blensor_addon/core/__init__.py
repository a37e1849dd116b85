"""Sensor physics: scan patterns, noise, reflectivity, timing, results.

Plain numpy; nothing in this package imports ``bpy`` or ``mathutils``, so it runs and
is tested outside Blender.
"""
