"""End-to-end scan benchmark in real Blender (pip bpy): what a user waits for.

Usage: ``.venv/bin/python benchmarks/scan.py [--instances N] [--repeat R]``
or ``.venv/bin/python benchmarks/scan.py --unchanged [--triangles T] [--scatter N] [--rounds R]``

Rows (HDL-64E S2, one full revolution = 133,312 rays, native backend unless noted):

- ``crossing, cold``: ``blensor_addon.scan()`` of the demo scene right after the file is
  opened (extract + every mesh BVH built + cast + noise), median of ``--repeat`` opens.
- ``crossing, repeated scan()``: further calls on the unchanged scene (mesh BVHs reused
  by the ray caster kept between calls), median.
- ``GN scatter N x N``: a Geometry Nodes grid of N^2 instances of a 12-triangle box over
  500 x 500 m (default N = 1000: 10^6 instances), sensor 2 m above its centre: one scan,
  cold, median; with the peak resident memory of the process (``ru_maxrss``) after it.
  The ``per-instance loop`` row extracts the same scene without the array path (what
  Blender 4.2 does), once.

Compare with the BVHTree fallback by ``--backend bvhtree``.

``--unchanged`` (an unchanged scene costs nothing per scan) prints instead, for a static
grid mesh of T triangles (default 10^7, one object, 200 x 200 m, sensor 2 m above its
centre) and a Geometry Nodes scatter of N x N instances (default 913: 833,569), a warm
``blensor_addon.scan()`` (continuous time, the default HDL-64E S2 revolution) against the
raw kernel: the ``intersect`` calls that same scan made, recorded and replayed on the
backend with the scene's top level as the scan left it; then the same with a small box
driving through the scene (it changes at every scene sample: the rest is kept only as
far as its parts are). Scan and replay alternate in
``--rounds`` rounds (minimum of each, their ratio), with the CPU model and the load
average before and after. Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import resource
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_scatter():
    spec = importlib.util.spec_from_file_location("gn_scatter", ROOT / "scenes" / "gn_scatter.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_gn_scatter


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _raycast_module():
    spec = importlib.util.spec_from_file_location("bench_raycast", ROOT / "benchmarks" / "raycast.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _grid_mesh(bpy, triangles: int, size: float = 200.0):
    """A static object ``Grid``: a k x k grid of quads cut into 2 k^2 >= ``triangles``
    triangle faces over ``size`` x ``size`` m, gently waved (0.3 m) so the sensor sees
    slopes."""
    import numpy as np
    k = max(1, int(math.ceil(math.sqrt(triangles / 2))))
    x = np.linspace(-size / 2, size / 2, k + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    Z = 0.3 * np.sin(X / 7.0) * np.cos(Y / 5.0)
    verts = np.stack([X, Y, Z], -1).reshape(-1, 3).astype(np.float32)
    i = np.arange(k)
    a = (i[:, None] * (k + 1) + i[None, :]).ravel()
    b, c, d = a + 1, a + k + 1, a + k + 2
    tris = np.concatenate([np.stack([a, c, b], 1), np.stack([b, c, d], 1)]).astype(np.int32)
    me = bpy.data.meshes.new("Grid")
    me.vertices.add(verts.shape[0])
    me.vertices.foreach_set("co", verts.ravel())
    me.loops.add(tris.size)
    me.loops.foreach_set("vertex_index", tris.ravel())
    me.polygons.add(tris.shape[0])
    me.polygons.foreach_set("loop_start", np.arange(0, tris.size, 3, dtype=np.int32))
    me.update()
    ob = bpy.data.objects.new("Grid", me)
    bpy.context.scene.collection.objects.link(ob)
    return tris.shape[0]


def _lidar(bpy):
    """A camera ``Lidar`` 2 m above the origin, sensor +Y up (the default HDL-64E S2)."""
    cam = bpy.data.objects.new("Lidar", bpy.data.cameras.new("Lidar"))
    cam.location = (0.0, 0.0, 2.0)
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    bpy.context.scene.collection.objects.link(cam)
    return cam


def _moving_box(bpy):
    """A 1 m box ``Mover`` 10 m from the sensor, driving along x at 10 m/s (a driver of
    ``frame``): the scene changes at every scene sample, elsewhere than the big object."""
    me = bpy.data.meshes.new("Mover")
    h = 0.5
    me.from_pydata([(x * h, y * h, z * h) for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], [],
                   [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)])
    ob = bpy.data.objects.new("Mover", me)
    ob.location = (0.0, 10.0, 2.0)
    bpy.context.scene.collection.objects.link(ob)
    fc = ob.driver_add("location", 0)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = "10.0 * frame / 24"


def _warm_vs_kernel(blensor_addon, cam, rounds: int) -> tuple[float, float, int]:
    """(minimum s of a warm scan(), minimum s of the kernel on the same rays, points):
    scan() and the replay of its recorded ``intersect`` calls alternate in ``rounds``."""
    from blensor_addon import raycast
    backend = raycast.shared_backend("native")
    n_points = len(blensor_addon.scan(cam, backend="native"))  # cold: extracts and builds every BVH
    calls = []
    real = backend.intersect

    def record(*a, **kw):
        calls.append(([x.copy() if hasattr(x, "copy") else x for x in a],
                      {k: v.copy() if hasattr(v, "copy") else v for k, v in kw.items()}))
        return real(*a, **kw)

    backend.intersect = record
    try:
        blensor_addon.scan(cam, backend="native")
    finally:
        del backend.intersect

    def kernel():
        for a, kw in calls:
            real(*a, **kw)

    scans, kernels = [], []
    for _ in range(rounds):
        scans.append(_timed(lambda: blensor_addon.scan(cam, backend="native")))
        kernels.append(_timed(kernel))
    return min(scans), min(kernels), n_points


def unchanged(args) -> int:
    """The ``--unchanged`` table (see the module docstring)."""
    import bpy

    import blensor_addon
    from blensor_addon import raycast
    blensor_addon.register()
    load0 = os.getloadavg()
    rows = []
    bpy.ops.wm.read_factory_settings(use_empty=True)
    ntri = _grid_mesh(bpy, args.triangles)
    cam = _lidar(bpy)
    scan_s, kernel_s, pts = _warm_vs_kernel(blensor_addon, cam, args.rounds)
    rows.append((f"grid mesh, {ntri:,} triangles", scan_s, kernel_s, pts))
    _moving_box(bpy)
    scan_s, kernel_s, pts = _warm_vs_kernel(blensor_addon, cam, args.rounds)
    rows.append(("  same and a moving box", scan_s, kernel_s, pts))
    raycast.release_shared()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    n = args.scatter
    _load_scatter()(bpy, n=n, size=500.0, box_half=0.4, z=0.0)
    cam = _lidar(bpy)
    scan_s, kernel_s, pts = _warm_vs_kernel(blensor_addon, cam, args.rounds)
    rows.append((f"GN scatter {n} x {n} = {n * n:,} instances", scan_s, kernel_s, pts))
    _moving_box(bpy)
    scan_s, kernel_s, pts = _warm_vs_kernel(blensor_addon, cam, args.rounds)
    rows.append(("  same and a moving box", scan_s, kernel_s, pts))
    raycast.release_shared()
    load1 = os.getloadavg()
    print(f"unchanged scene, warm scan() vs kernel on its rays (HDL-64E S2 revolution, continuous time), "
          f"Blender {bpy.app.version_string}")
    print(f"CPU: {_raycast_module().cpu_model()}, {os.cpu_count()} cores; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after; minimum of {args.rounds} interleaved rounds")
    print(f"  {'scene':44s} {'scan s':>8s} {'kernel s':>9s} {'ratio':>7s}  points")
    for name, s, k, pts in rows:
        print(f"  {name:44s} {s:8.3f} {k:9.3f} {s / k:6.2f}x  {pts:,}")
    blensor_addon.unregister()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=1000, help="N: the scatter is N x N (default 1000)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="native")
    ap.add_argument("--unchanged", action="store_true",
                    help="warm scan() of unchanged scenes against the kernel on the same rays")
    ap.add_argument("--triangles", type=int, default=10_000_000, help="--unchanged: grid mesh triangles")
    ap.add_argument("--scatter", type=int, default=913, help="--unchanged: the scatter is N x N (913)")
    ap.add_argument("--rounds", type=int, default=5, help="--unchanged: interleaved rounds")
    args = ap.parse_args(argv)
    if args.unchanged:
        return unchanged(args)
    import bpy

    import blensor_addon
    from blensor_addon import raycast
    from blensor_addon.scene.extract import SceneExtractor
    blensor_addon.register()
    rows = []

    crossing = str(ROOT / "scenes" / "crossing.blend")
    cold, warm = [], []
    for _ in range(args.repeat):
        bpy.ops.wm.open_mainfile(filepath=crossing)
        cam = bpy.data.objects["Velodyne"]
        cam.data.blensor.end_angle = 360.0
        cold.append(_timed(lambda: blensor_addon.scan(cam, frame=12, backend=args.backend)))
        for _ in range(3):
            warm.append(_timed(lambda: blensor_addon.scan(cam, frame=12, backend=args.backend)))
    n_points = len(blensor_addon.scan(cam, frame=12, backend=args.backend))
    rows.append(("crossing, cold (file just opened)", statistics.median(cold), f"{n_points:,} points"))
    rows.append(("crossing, repeated scan()", statistics.median(warm), "mesh BVHs reused"))

    n = args.instances
    bpy.ops.wm.read_factory_settings(use_empty=True)
    _load_scatter()(bpy, n=n, size=500.0, box_half=0.4, z=0.0)
    data = bpy.data.cameras.new("Lidar")
    cam = bpy.data.objects.new("Lidar", data)
    cam.location = (0.0, 0.0, 2.0)
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    bpy.context.scene.collection.objects.link(cam)
    times = []
    for _ in range(max(1, args.repeat // 2)):
        raycast.release_shared()
        times.append(_timed(lambda: blensor_addon.scan(cam, backend=args.backend)))
    r = blensor_addon.scan(cam, backend=args.backend)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KiB -> GiB
    rows.append((f"GN scatter {n} x {n} = {n * n:,} instances, cold", statistics.median(times),
                 f"{len(r):,} points, peak RSS {rss:.2f} GiB"))
    SceneExtractor.vectorize = False
    raycast.release_shared()
    t = _timed(lambda: blensor_addon.scan(cam, backend=args.backend))
    SceneExtractor.vectorize = True
    rows.append(("  same, per-instance loop (Blender 4.2 path)", t, ""))

    print(f"end to end, HDL-64E S2 revolution (133,312 rays), backend {args.backend}, "
          f"Blender {bpy.app.version_string}")
    print(f"  {'case':52s} {'seconds':>8s}  note")
    for name, sec, note in rows:
        print(f"  {name:52s} {sec:8.3f}  {note}")
    blensor_addon.unregister()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
