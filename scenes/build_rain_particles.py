"""Rain as geometry (issue 22, section 4, "particles as geometry"): a Blender particle
system instancing small spheres ("drops") in a box in front of a sensor, with a wall
behind them. BlenSor scans what the depsgraph evaluates, so particle instances (and
Geometry Nodes instances, ``scenes/gn_scatter.py``) are real geometry: a scan returns points
on the drops, labelled with the drop object's id (``object_id``), the emitter's
(``instancer_id``) and the particle's index + 1 (``instance_id``). Snow or dust: the same
with flakes or grains as the instanced object.

This is the alternative to ``weather = rain`` (:mod:`blensor_addon.core.sensors.weather`),
which draws drops statistically per beam: here every drop has a place, a size and a
material, is the same for every sensor that looks, and moves with the scene's frames
(give the particle system physics and a lifetime for falling rain).

Use: ``python scenes/build_rain_particles.py [OUT.blend]`` (pip ``bpy``; default
``scenes/rain_particles.blend``), or from a script or test ``build(bpy)`` on the current
(empty) file, which returns the sensor camera. Scan it with
``.venv/bin/blensor scan scenes/rain_particles.blend --out out --formats npz``.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the box the drops fill (world m, the sensor at the origin looking along +Y)
BOX_CENTER = (0.0, 5.0, 1.5)
BOX_SIZE = (4.0, 4.0, 3.0)
#: drop radius (m): exaggerated from rain's 0.5-3 mm so that a 0.2 deg scan meets them
DROP_RADIUS = 0.03
DROP_COUNT = 400
SEED = 7


def _uv_sphere(bpy, name, radius, segments=12, rings=6):
    verts = [(0.0, 0.0, -radius)]
    for r in range(1, rings):
        th = math.pi * r / rings - math.pi / 2
        for s in range(segments):
            a = 2 * math.pi * s / segments
            verts.append((radius * math.cos(th) * math.cos(a), radius * math.cos(th) * math.sin(a),
                          radius * math.sin(th)))
    verts.append((0.0, 0.0, radius))
    top = len(verts) - 1
    faces = [(0, 1 + (s + 1) % segments, 1 + s) for s in range(segments)]
    for r in range(rings - 2):
        for s in range(segments):
            a = 1 + r * segments + s
            b = 1 + r * segments + (s + 1) % segments
            faces.append((a, b, b + segments, a + segments))
    last = 1 + (rings - 2) * segments
    faces += [(last + s, last + (s + 1) % segments, top) for s in range(segments)]
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata(verts, [], faces)
    mesh.update()
    return mesh


def build(bpy):
    """Add the rain scene to the current file: the drop prototype ``Drop`` (hidden), the
    emitter ``RainCloud`` (:data:`DROP_COUNT` vertices drawn uniformly in the box
    :data:`BOX_CENTER`, :data:`BOX_SIZE` with seed :data:`SEED`, a particle on each, no
    physics: they stay where emitted), the wall ``Backdrop``
    12 m ahead and the sensor camera ``Sensor`` at the origin looking along +Y (a generic
    16-laser LiDAR over -30..30 deg azimuth when the add-on is registered). Returns the
    camera object."""
    scene = bpy.context.scene
    scene.frame_start = scene.frame_end = scene.frame_current = 1
    water = bpy.data.materials.new("Water")
    water.diffuse_color = (0.6, 0.7, 0.9, 1.0)
    drop = bpy.data.objects.new("Drop", _uv_sphere(bpy, "Drop", DROP_RADIUS))
    drop.data.materials.append(water)
    scene.collection.objects.link(drop)
    drop.location = (0.0, -50.0, -50.0)  # the prototype itself out of the way
    drop.hide_render = drop.hide_viewport = True
    drop["blensor_label"] = "outlier"

    # the emitter is a cloud of vertices (no faces: nothing of it to hit), one particle on
    # each; BlenSor scans an instancer's own mesh even with show_instancer_for_render off
    rng = __import__("numpy").random.default_rng(SEED)
    pts = rng.uniform(-0.5, 0.5, (DROP_COUNT, 3)) * BOX_SIZE + BOX_CENTER
    mesh = bpy.data.meshes.new("RainCloud")
    mesh.from_pydata([tuple(map(float, p)) for p in pts], [], [])
    mesh.update()
    box = bpy.data.objects.new("RainCloud", mesh)
    scene.collection.objects.link(box)
    box.show_instancer_for_render = False
    box.show_instancer_for_viewport = False
    mod = box.modifiers.new("Rain", "PARTICLE_SYSTEM")
    ps = mod.particle_system.settings
    mod.particle_system.seed = SEED
    ps.count = DROP_COUNT
    ps.frame_start = ps.frame_end = 1
    ps.lifetime = 1000
    ps.emit_from = "VERT"
    ps.use_emit_random = False
    ps.physics_type = "NO"
    ps.render_type = "OBJECT"
    ps.instance_object = drop
    ps.particle_size = 1.0
    ps.size_random = 0.0

    wall = bpy.data.meshes.new("Backdrop")
    wall.from_pydata([(-10, 12, -2), (10, 12, -2), (10, 12, 6), (-10, 12, 6)], [], [(0, 1, 2, 3)])
    wall.update()
    wob = bpy.data.objects.new("Backdrop", wall)
    scene.collection.objects.link(wob)
    wob["blensor_label"] = "building"

    cam = bpy.data.objects.new("Sensor", bpy.data.cameras.new("Sensor"))
    scene.collection.objects.link(cam)
    # camera -Z looks along world +Y, camera +Y is world up (+Z)
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    cam.location = (0.0, 0.0, 1.5)
    scene.camera = cam
    if hasattr(cam.data, "blensor"):
        s = cam.data.blensor
        s.preset = "generic"
        s.elevations = ", ".join(f"{e:g}" for e in range(-15, 17, 2))
        s.start_angle, s.end_angle, s.angle_resolution = -30.0, 30.0, 0.2
        s.max_range = 50.0
        s.formats = {"npz"}
    bpy.context.view_layer.update()
    return cam


def main(out: Path) -> None:
    """Build the scene in an empty file (the add-on registered when importable, so the
    camera carries its sensor settings) and save it, compressed, to ``out``."""
    import bpy
    bpy.ops.wm.read_factory_settings(use_empty=True)
    registered = False
    try:
        import blensor_addon
        blensor_addon.register()
        registered = True
    except ImportError:
        pass
    build(bpy)
    out.parent.mkdir(parents=True, exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=str(out), compress=True)
    if registered:  # bpy 4.2/4.5 crash or hang at exit while add-on classes are registered
        import blensor_addon
        blensor_addon.unregister()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "scenes" / "rain_particles.blend")
