"""What each file format costs: one HDL-64E S2 revolution of the demo crossing, written
by every writer of the registry, in real Blender.

Usage: ``.venv/bin/python benchmarks/writers.py [--repeat R]``

Prints, per format, the seconds to encode one frame (the bytes a range scan commits)
and the cost per million points, against the scan itself (extract + cast + noise, warm)
and the sum of every writer. Image-only formats (exr, npy, pfm, dmap) are measured on a
176 x 144 ToF frame instead and listed apart. Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    import bpy

    import blensor_addon
    from blensor_addon.io.formats import WRITERS, RunInfo
    blensor_addon.register()
    bpy.ops.wm.open_mainfile(filepath=str(ROOT / "scenes" / "crossing.blend"))
    cam = bpy.data.objects["Velodyne"]
    blensor_addon.scan(cam, frame=12)
    scan_t = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        r = blensor_addon.scan(cam, frame=12)
        scan_t.append(time.perf_counter() - t0)
    tof = blensor_addon.scan(cam, frame=12, sensor_type="tof")
    scan = statistics.median(scan_t)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, W in WRITERS.items():
            result = tof if W.needs_image else r
            times = []
            for k in range(args.repeat):
                folder = Path(tmp) / f"{name}{k}"
                folder.mkdir()
                w = W(folder, None, RunInfo(camera=cam.name, sensor_type=result.sensor_type, sensor=result.sensor,
                                            frames=[12]))
                t0 = time.perf_counter()
                files = w.frame_files(result)
                w.append(result)
                w.close("complete")
                times.append(time.perf_counter() - t0)
            size = sum(len(b) for _, b in files)
            rows.append((name, W.needs_image, len(result), statistics.median(times), size))
    print(f"writers, one frame of the crossing (frame 12), Blender {bpy.app.version_string}, median of {args.repeat}")
    print(f"  scan itself (HDL-64E S2 revolution, warm): {scan:.3f} s, {len(r):,} points")
    print(f"  {'format':12s} {'points':>9s} {'seconds':>8s} {'s per 1M pts':>13s} {'x scan':>7s} {'bytes':>12s}")
    total = 0.0
    for name, img, n, t, size in rows:
        if not img:
            total += t
        print(f"  {name:12s} {n:9,d} {t:8.3f} {t / max(n, 1) * 1e6:13.3f} {t / scan:7.2f} {size:12,d}"
              + ("  (ToF frame)" if img else ""))
    print(f"  every point-cloud format together: {total:.3f} s = {total / scan:.2f} x the scan")
    blensor_addon.unregister()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
