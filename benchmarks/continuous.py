"""Continuous time vs frozen frames: what a sweep costs.

Usage: ``.venv/bin/python benchmarks/continuous.py [--sweeps N] [--drive]``

Scenes (built here in real Blender, pip bpy):

- ``terrain``: the 472,392-triangle terrain of ``benchmarks/raycast.py`` with its four
  box cars, each driving at 8-15 m/s (drivers of ``frame``: exact constant velocities),
  and an HDL-64E S2 (133,312 rays a revolution, 10 Hz) 2 m above the ground, driving at
  10 m/s. 24 fps, so a sweep spans 2.4 scene frames.
- ``crossing``: the demo scene in per-frame packets (``packets = frame``): what a frame
  costs in each time model.
- ``drive`` (``--drive``): ``scenes/drive.blend`` (built by ``scenes/build_drive.py``),
  its camera ``Lidar`` at its own settings, from 5 s into the drive.

For each, sweep after sweep (``Scanner.scan`` of sweep packets; the first, which builds every mesh
BVH, is not counted) with ``time_model = "frame"`` (the scene frozen for each scene frame:
the original's model, assembled into the same sweeps) and ``"continuous"`` (every ray at
its own time, sensor pose and car transforms interpolated per ray). The table gives the
median seconds per sweep and their ratio; the issue's budget is 1.5x. Nothing here asserts
a time.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _raycast_module():
    spec = importlib.util.spec_from_file_location("bench_raycast", ROOT / "benchmarks" / "raycast.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mesh(bpy, name, verts, tris):
    me = bpy.data.meshes.new(name)
    me.vertices.add(len(verts))
    me.vertices.foreach_set("co", np.asarray(verts, np.float32).ravel())
    n = len(tris)
    me.loops.add(3 * n)
    me.loops.foreach_set("vertex_index", np.asarray(tris, np.int32).ravel())
    me.polygons.add(n)
    me.polygons.foreach_set("loop_start", np.arange(0, 3 * n, 3, dtype=np.int32))
    me.update()
    ob = bpy.data.objects.new(name, me)
    bpy.context.scene.collection.objects.link(ob)
    return ob


def _drive(ob, index, expression):
    fc = ob.driver_add("location", index)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = expression


def build_terrain_scene(bpy):
    """The terrain, four moving cars and a moving HDL-64E S2; returns the camera."""
    rc = _raycast_module()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps, scene.frame_start, scene.frame_end = 24, 1, 240
    _mesh(bpy, "Terrain", *rc.terrain())
    speeds = [8.0, -12.0, 15.0, -10.0]
    for i, ((x, y, yaw), v) in enumerate(zip(rc.CARS, speeds)):
        z = float(rc.terrain_height(np.array([x]), np.array([y]))[0]) + 0.75
        car = _mesh(bpy, f"Car{i}", *rc.box((0.0, 0.0, 0.0)))
        car.location = (x, y, z)
        car.rotation_euler = (0.0, 0.0, yaw)
        _drive(car, 0, f"{x} + {v} * (frame - 1) / 24")
    cam_data = bpy.data.cameras.new("Lidar")
    cam = bpy.data.objects.new("Lidar", cam_data)
    scene.collection.objects.link(cam)
    scene.camera = cam
    o = rc.sensor_origin()
    cam.location = tuple(o)
    cam.rotation_euler = (np.pi / 2, 0.0, 0.0)  # sensor +Y = world up
    _drive(cam, 1, "10.0 * (frame - 1) / 24")  # 10 m/s along +Y (no terrain-following: a fixed height)
    s = cam_data.blensor
    s.preset = "hdl64e_s2"
    return cam


def _per_model(cam, packets: str, scan, warm, items) -> dict:
    """Median seconds of ``scan(scanner, k)`` over ``items`` for each time model (after
    ``scan(scanner, warm)``, which builds the mesh BVHs), with the packet hashes the
    range-scan runner takes: {model: (seconds, rays of a packet, points of a packet)}."""
    from blensor_addon.scene.scanner import Scanner
    out = {}
    for model in ("frame", "continuous"):
        sc = Scanner(cam, backend="native", overrides={"time_model": model, "packets": packets},
                     packet_hashes=True)
        times, r = [], None
        try:
            scan(sc, warm)
            for k in items:
                t0 = time.perf_counter()
                r = scan(sc, k)
                times.append(time.perf_counter() - t0)
        finally:
            sc.close()
        out[model] = (statistics.median(times), r.num_rays, len(r))
    return out


def bench(cam, sweeps: int, first: int) -> dict:
    """Sweep packets (``Scanner.scan(Packet("sweep", k))``): sweeps ``first + 1 ..`` timed."""
    from blensor_addon.core.packets import Packet
    return _per_model(cam, "sweep", lambda sc, k: sc.scan(Packet("sweep", k))[0], first,
                      range(first + 1, first + 1 + sweeps))


def bench_frames(cam, frames=range(2, 25)) -> dict:
    """Per-frame packets (``Scanner.scan(Packet("frame", f))``)."""
    from blensor_addon.core.packets import Packet
    return _per_model(cam, "frame", lambda sc, f: sc.scan(Packet("frame", f))[0], frames[0] - 1, frames)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=10, help="sweeps timed per model (default 10)")
    ap.add_argument("--drive", action="store_true", help="also the drive scene (scenes/drive.blend)")
    args = ap.parse_args(argv)
    import bpy

    import blensor_addon
    blensor_addon.register()
    rows = []
    cam = build_terrain_scene(bpy)
    rows.append(("terrain 472k + 4 moving cars, HDL-64E", bench(cam, args.sweeps, 1)))
    bpy.ops.wm.open_mainfile(filepath=str(ROOT / "scenes" / "crossing.blend"))
    rows.append(("crossing, per-frame packets (150 deg)", bench_frames(bpy.data.objects["Velodyne"])))
    if args.drive:
        path = ROOT / "scenes" / "drive.blend"
        if not path.is_file():
            print(f"{path} missing: python scenes/build_drive.py", file=sys.stderr)
            return 1
        bpy.ops.wm.open_mainfile(filepath=str(path))
        cam = bpy.data.objects["Lidar"]
        rows.append(("drive (scenes/drive.blend)", bench(cam, args.sweeps, 50)))
    print(f"{'scene':<40} {'rays/packet':>11} {'frozen s':>9} {'continuous s':>13} {'ratio':>6}")
    for name, res in rows:
        (tf, rays, _), (tc, _, _) = res["frame"], res["continuous"]
        print(f"{name:<40} {rays:>11,} {tf:>9.3f} {tc:>13.3f} {tc / tf:>5.2f}x")
    blensor_addon.unregister()
    return 0


if __name__ == "__main__":
    sys.exit(main())
