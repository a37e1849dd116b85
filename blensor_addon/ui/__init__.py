"""Blender UI: properties, panels, operators, registered in one place."""
from __future__ import annotations

import bpy

from ..scene.extract import EDIT_HANDLERS, note_geometry_edits
from . import ops, panel, props

CLASSES = props.CLASSES + panel.CLASSES + ops.CLASSES


@bpy.app.handlers.persistent
def _release_backends(*_args) -> None:
    """Before a file is loaded: free the ray caster kept between single scans."""
    from ..raycast import release_shared
    release_shared()


def _set_time_models(value=None) -> None:
    """Store ``time_model`` on every editable camera that has none stored: ``value``, or
    the current (default) value if None. Linked and non-editable cameras are left as they
    are; one that refuses the change (a library override) is skipped."""
    for cam in bpy.data.cameras:
        p = getattr(cam, "blensor", None)
        if p is None or cam.library is not None or not getattr(cam, "is_editable", True):
            continue
        try:
            if not p.is_property_set("time_model"):
                p.time_model = p.time_model if value is None else value
        except (AttributeError, TypeError, RuntimeError):
            pass


@bpy.app.handlers.persistent
def _legacy_time_model(*_args) -> None:
    """After a .blend file is loaded: a camera stored without ``time_model`` (a v0.1 file,
    which had only the frozen-frame model, or a file saved without the add-on) scans with
    ``time_model = "frame"``, so old files give the bytes they gave; cameras made since
    store the setting explicitly (:func:`_store_time_model`). The startup file (File >
    New, factory settings: no file path) is not an old file: its cameras keep the
    default, continuous."""
    if bpy.data.filepath:
        _set_time_models("frame")


@bpy.app.handlers.persistent
def _store_time_model(*_args) -> None:
    """Before a file is saved: store every camera's ``time_model`` explicitly (a camera
    left at the default, continuous, must not read as a v0.1 camera when loaded)."""
    _set_time_models()


_HANDLERS = (("load_pre", _release_backends), ("load_post", _legacy_time_model), ("save_pre", _store_time_model),
             *((kind, bpy.app.handlers.persistent(note_geometry_edits)) for kind in EDIT_HANDLERS))


def register() -> None:
    """Register every class, then attach the property groups and the file handlers."""
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    props.register_properties()
    for kind, fn in _HANDLERS:
        getattr(bpy.app.handlers, kind).append(fn)
    # enabled with a file already open: treat it as if it had just been loaded
    try:
        _legacy_time_model()
    except AttributeError:  # bpy.data is restricted while Blender starts up: do it once it can
        bpy.app.timers.register(_legacy_time_model, first_interval=0.0)


def unregister() -> None:
    """Undo :func:`register` in reverse order; free the shared ray caster."""
    for kind, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, kind)
        if fn in handlers:
            handlers.remove(fn)
    _release_backends()
    props.unregister_properties()
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
