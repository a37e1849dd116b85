"""Blender UI: properties, panels, operators, registered in one place."""
from __future__ import annotations

import bpy

from . import ops, panel, props

CLASSES = props.CLASSES + panel.CLASSES + ops.CLASSES


def register() -> None:
    """Register every class, then attach the property groups."""
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    props.register_properties()


def unregister() -> None:
    """Undo :func:`register` in reverse order."""
    props.unregister_properties()
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
