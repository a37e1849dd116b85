"""Differences between the Blender versions BlenSor supports (4.2 LTS, 4.5 LTS, 5.0).

Every version-dependent name lives here, each with the versions it covers, so the rest
of the add-on reads the same on every Blender.
"""
from __future__ import annotations

import bpy

#: ``bpy.types.GeometrySet`` (evaluated geometry and instances as arrays): Blender 4.3+.
#: None on 4.2, where Geometry Nodes instances are read one by one from the depsgraph.
GeometrySet = getattr(bpy.types, "GeometrySet", None)


def stored_idprops(struct):
    """The ID-property group that holds the values of ``struct``'s add-on-defined
    properties as stored (``struct`` a PropertyGroup instance, e.g. ``Camera.blensor``),
    for reading a value stored under another type by an older version. Blender 5.0 keeps
    them apart from user custom properties (``bl_system_properties_get``); 4.2 and 4.5
    keep them in the struct's own ID properties. None if there is none."""
    get = getattr(struct, "bl_system_properties_get", None)
    if get is not None:
        return get()
    return struct


#: pip ``bpy`` 4.2 and 4.5 crash (SIGSEGV) or hang when the Python interpreter exits while
#: add-on classes are registered; bpy 5.0 and Blender's own executable do not. True where
#: the add-on unregisters itself before the interpreter exits (``ui.register`` arranges it).
UNREGISTER_AT_EXIT = not bpy.app.binary_path and bpy.app.version < (5, 0, 0)


def material_uses_nodes(mat) -> bool:
    """The material renders with its node tree. Blender 4.2 and 4.5 let ``use_nodes`` be
    off (then the viewport colour and metallic render); 5.0 always uses the node tree and
    deprecates ``Material.use_nodes`` (to be removed in 6.0)."""
    if bpy.app.version >= (5, 0, 0):
        return mat.node_tree is not None
    return bool(mat.use_nodes) and mat.node_tree is not None
