"""End-to-end scan benchmark in real Blender (pip bpy): what a user waits for.

Usage: ``.venv/bin/python benchmarks/scan.py [--instances N] [--repeat R]``

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

Compare with the BVHTree fallback by ``--backend bvhtree``. Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import resource
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=1000, help="N: the scatter is N x N (default 1000)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="native")
    args = ap.parse_args(argv)
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
