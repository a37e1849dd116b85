"""Blender UI: properties, panels, operators, registered in one place."""
from __future__ import annotations

import bpy

from . import ops, panel, props

CLASSES = props.CLASSES + panel.CLASSES + ops.CLASSES


@bpy.app.handlers.persistent
def _release_backends(*_args) -> None:
    """Before a file is loaded: free the ray caster kept between single scans."""
    from ..raycast import release_shared
    release_shared()


def register() -> None:
    """Register every class, then attach the property groups and the load handler."""
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    props.register_properties()
    bpy.app.handlers.load_pre.append(_release_backends)


def unregister() -> None:
    """Undo :func:`register` in reverse order; free the shared ray caster."""
    if _release_backends in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.remove(_release_backends)
    _release_backends()
    props.unregister_properties()
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
