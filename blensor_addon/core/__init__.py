"""The add-on's model, in plain numpy: the settings schema (:mod:`.settings`), the sensors
(:mod:`.sensors`: patterns, noise, reflectivity, timing), the scan result and what
sensors and writers declare (:mod:`.result`, :mod:`.capabilities`, :mod:`.packets`),
axes, classes, materials and errors.

Nothing in this package imports ``bpy`` or ``mathutils``, so it runs and is tested
outside Blender.
"""
