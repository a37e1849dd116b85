"""Blender UI: properties, panels, operators, registered in one place."""
from __future__ import annotations

import atexit

import bpy

from ..compat import UNREGISTER_AT_EXIT
from ..scene.extract import EDIT_HANDLERS, RELOAD_HANDLERS, forget_scene, note_geometry_edits, note_reload
from . import ops, panel, props


@bpy.app.handlers.persistent
def _release_backends(*_args) -> None:
    """Before a file is loaded: free the ray caster kept between single scans."""
    from ..raycast import release_shared
    release_shared()


@bpy.app.handlers.persistent
def _upgrade_settings(*_args) -> None:
    """After a .blend file is loaded: upgrade the BlenSor settings its cameras stored with
    an older version (:func:`.props.upgrade_settings`: a camera that never stored ``axes``
    keeps the BlenSor axes it scanned with, one without ``time_model`` (a v0.1 file) the
    frozen-frame model). The startup file (File > New, factory settings: no file path) is
    not an old file: its cameras keep the current defaults."""
    if bpy.data.filepath:
        props.upgrade_settings()


@bpy.app.handlers.persistent
def _stamp_settings(*_args) -> None:
    """Before a file is saved: stamp the cameras made since it was loaded with the
    current settings version (:func:`.props.stamp_settings`), so they keep the current
    defaults when it is loaded again."""
    props.stamp_settings()


_HANDLERS = (("load_pre", _release_backends), ("load_post", _upgrade_settings), ("save_pre", _stamp_settings),
             *((kind, bpy.app.handlers.persistent(note_geometry_edits)) for kind in EDIT_HANDLERS),
             *((kind, bpy.app.handlers.persistent(note_reload)) for kind in RELOAD_HANDLERS))


#: the classes registered by :func:`register` (made from the registries at that time)
_registered_classes: tuple = ()


def registered() -> bool:
    """Whether :func:`register` ran (and :func:`unregister` did not since)."""
    return bool(_registered_classes)


def register() -> None:
    """Register every class (the property groups made from the registries as they are
    now), then attach the property groups and the file handlers (idempotent)."""
    global _registered_classes
    if _registered_classes:
        return
    _registered_classes = props.build_classes() + panel.CLASSES + ops.CLASSES
    for cls in _registered_classes:
        bpy.utils.register_class(cls)
    props.register_properties()
    for kind, fn in _HANDLERS:
        getattr(bpy.app.handlers, kind).append(fn)
    if UNREGISTER_AT_EXIT:  # pip bpy 4.2/4.5 would crash at exit with the classes registered
        atexit.unregister(unregister)
        atexit.register(unregister)
    # enabled with a file already open: treat it as if it had just been loaded
    try:
        _upgrade_settings()
    except AttributeError:  # bpy.data is restricted while Blender starts up: do it once it can
        bpy.app.timers.register(_upgrade_settings, first_interval=0.0)


def unregister() -> None:
    """Undo :func:`register` in reverse order; free the shared ray caster (idempotent)."""
    global _registered_classes
    if not _registered_classes:
        return
    for kind, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, kind)
        if fn in handlers:
            handlers.remove(fn)
    _release_backends()
    forget_scene()  # nothing would notice a change now
    props.unregister_properties()
    for cls in reversed(_registered_classes):
        bpy.utils.unregister_class(cls)
    _registered_classes = ()
