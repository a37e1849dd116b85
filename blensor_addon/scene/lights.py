"""The scene's ambient light for the radiometric return model: its Sun lights and the
world's background, read into :class:`~blensor_addon.core.sensors.ambient.Lights`
(core/sensors/ambient.py; docs/physics.md, "Ambient light").

A Sun light shines along its local -Z axis (Blender manual, "Lights > Sun"), so the
direction toward it is its world matrix's +Z column; its ``energy`` is Blender's sun
strength, an irradiance in W/m^2. The world counts where its node tree's active World
Output takes a Background node with unlinked Color and Strength (strength x the colour's
mean, a uniform radiance; a Blender 4 world without nodes: its colour); any other world
(a sky texture, an HDRI, a mix) counts as 0 and says so in the notes. Point, spot and
area lights, instanced lights and lights hidden from render (with ``render``) are not read
(noted where present).
"""
from __future__ import annotations

import numpy as np

from ..core.sensors.ambient import Lights


def _mean_rgb(value) -> float:
    return float(np.mean([float(c) for c in tuple(value)[:3]]))


def world_radiance(world) -> tuple[float, str]:
    """(W/m^2/sr, note): the uniform background radiance of ``world`` (a
    ``bpy.types.World`` or None) and why it is 0 where it is ("" otherwise)."""
    if world is None:
        return 0.0, ""
    import bpy
    if bpy.app.version < (5, 0, 0) and not world.use_nodes:  # (Blender 5 always uses the nodes)
        return _mean_rgb(world.color), ""  # the world colour is the background, strength 1
    tree = world.node_tree
    if tree is None:
        return 0.0, f"world '{world.name}' has no node tree: no sky light"
    out = next((n for n in tree.nodes if n.bl_idname == "ShaderNodeOutputWorld" and n.is_active_output), None)
    link = out.inputs["Surface"].links[0] if out is not None and out.inputs["Surface"].is_linked else None
    bg = link.from_node if link is not None else None
    if bg is None:
        return 0.0, ""
    inputs = bg.inputs
    if bg.bl_idname != "ShaderNodeBackground" or inputs["Color"].is_linked or inputs["Strength"].is_linked:
        return 0.0, f"world '{world.name}' is not a constant Background: its light is not read (0)"
    return float(bg.inputs["Strength"].default_value) * _mean_rgb(bg.inputs["Color"].default_value), ""


def read_lights(depsgraph, render: bool = True) -> Lights:
    """The evaluated scene's :class:`Lights` (module docstring): every Sun light among
    ``depsgraph.objects`` (with ``render``: not hidden from render) and the scene's world."""
    dirs, power, notes = [], [], []
    others = 0
    for ob in depsgraph.objects:
        if ob.type != "LIGHT" or (render and ob.original.hide_render):
            continue
        light = ob.data
        if light.type != "SUN":
            others += 1
            continue
        z = np.array(ob.matrix_world, dtype=np.float64)[:3, 2]
        norm = float(np.linalg.norm(z))
        if not norm > 0.0:
            continue
        dirs.append(z / norm)
        power.append(float(light.energy) * _mean_rgb(light.color))
    if others:
        notes.append(f"{others} point, spot or area light(s) not read as ambient light")
    sky, note = world_radiance(depsgraph.scene.world)
    if note:
        notes.append(note)
    return Lights(np.array(dirs, dtype=np.float64).reshape(-1, 3), np.array(power, dtype=np.float64),
                  float(sky), tuple(notes))


__all__ = ["read_lights", "world_radiance"]
