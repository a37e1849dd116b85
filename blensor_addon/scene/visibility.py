"""Scan what renders: evaluate the scene with its render visibility and levels.

Blender's Python API evaluates scenes only in viewport mode (``evaluated_depsgraph_get``);
a render-mode depsgraph exists only inside a render. The original BlenSor scanned what
renders (``shared/reference/blensor-original.md`` section 3.2), and so do we: while a
scan runs, every viewport-only switch is set to its render value, and every change is
undone afterwards, so the file is left exactly as it was:

- objects: ``hide_viewport`` := ``hide_render``; the view layer's eye (``hide_get``) off;
- collections: ``hide_viewport`` := ``hide_render``; the view layer's per-collection eye off
  (``exclude`` is left: it applies to renders too);
- modifiers: ``show_viewport`` := ``show_render``; Subdivision Surface and Multiresolution
  ``levels`` := ``render_levels``;
- curves, surfaces and text: ``resolution_u/v`` := ``render_resolution_u/v`` where set;
  metaballs: ``resolution`` := ``render_resolution``;
- particles: ``display_percentage`` := 100, ``child_percent`` := ``rendered_child_count``;
- Simplify: the viewport subdivision and child-particle limits := the render ones.

Not covered: a Geometry Nodes *Is Viewport* node still reads True (no Python access).
Every switch goes through :class:`VisibilitySwitch`, so restoring is one loop.
"""
from __future__ import annotations

import bpy

VISIBILITY_MODES = ("render", "viewport")


class VisibilitySwitch:
    """Sets attributes and remembers the old values (:meth:`restore` undoes them, in
    reverse order). Only values that differ are written, so an unchanged scene is not
    re-evaluated."""

    def __init__(self) -> None:
        self._undo: list = []

    def set(self, owner, attr: str, value) -> None:
        """``owner.attr = value``, remembered. Data that cannot be edited (linked from a
        library) is left as it is."""
        old = getattr(owner, attr)
        if old != value:
            try:
                setattr(owner, attr, value)
            except (AttributeError, RuntimeError, TypeError):
                return
            self._undo.append((owner, attr, old))

    def unhide(self, ob, view_layer) -> None:
        """Turn off the view layer's eye of ``ob``, remembered."""
        try:
            hidden = ob.hide_get(view_layer=view_layer)
        except RuntimeError:  # not in this view layer
            return
        if hidden:
            ob.hide_set(False, view_layer=view_layer)
            self._undo.append((ob, None, view_layer))

    def restore(self) -> None:
        """Undo every change (idempotent)."""
        while self._undo:
            owner, attr, old = self._undo.pop()
            try:
                if attr is None:
                    owner.hide_set(True, view_layer=old)
                else:
                    setattr(owner, attr, old)
            except ReferenceError:  # removed meanwhile
                pass


def _layer_collections(lc):
    yield lc
    for child in lc.children:
        yield from _layer_collections(child)


def apply_render_visibility(scene, view_layer) -> VisibilitySwitch:
    """Switch ``scene`` to its render visibility (see the module docstring); returns the
    :class:`VisibilitySwitch` whose ``restore()`` undoes it."""
    sw = VisibilitySwitch()
    for ob in bpy.data.objects:
        sw.set(ob, "hide_viewport", ob.hide_render)
        sw.unhide(ob, view_layer)
        for md in ob.modifiers:
            sw.set(md, "show_viewport", md.show_render)
            if md.type in ("SUBSURF", "MULTIRES"):
                sw.set(md, "levels", md.render_levels)
        for ps in getattr(ob, "particle_systems", ()):
            st = ps.settings
            sw.set(st, "display_percentage", 100)
            sw.set(st, "child_percent", st.rendered_child_count)
    for coll in bpy.data.collections:
        sw.set(coll, "hide_viewport", coll.hide_render)
    for lc in _layer_collections(view_layer.layer_collection):
        sw.set(lc, "hide_viewport", False)
    for cu in bpy.data.curves:
        for axis in ("u", "v"):
            r = getattr(cu, f"render_resolution_{axis}", 0)
            if r > 0:
                sw.set(cu, f"resolution_{axis}", r)
    for mb in bpy.data.metaballs:
        sw.set(mb, "resolution", mb.render_resolution)
    rd = scene.render
    if rd.use_simplify:
        sw.set(rd, "simplify_subdivision", rd.simplify_subdivision_render)
        sw.set(rd, "simplify_child_particles", rd.simplify_child_particles_render)
    return sw
