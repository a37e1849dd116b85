"""Blender side: depsgraph to arrays, scanning a camera, point meshes (imports bpy)."""
