"""Differences between the Blender versions BlenSor supports (4.2 LTS, 4.5 LTS, 5.0).

Every version-dependent name lives here, each with the versions it covers, so the rest
of the add-on reads the same on every Blender.
"""
from __future__ import annotations

import bpy

#: ``bpy.types.GeometrySet`` (evaluated geometry and instances as arrays): Blender 4.3+.
#: None on 4.2, where Geometry Nodes instances are read one by one from the depsgraph.
GeometrySet = getattr(bpy.types, "GeometrySet", None)
