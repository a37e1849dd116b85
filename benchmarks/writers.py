"""What each file format costs: one HDL-64E S2 revolution of the demo crossing, written
by every writer of the registry, in real Blender.

Usage: ``.venv/bin/python benchmarks/writers.py [--repeat R] [--only npz]``

``--only npz``: only table 0. Otherwise four tables:

0. npz compression: the single scan of table 1 encoded as npz stored (``npz.compress=
   false``, as ``numpy.savez``) and deflated (the default; levels 1, the writer's, and
   6, ``numpy.savez_compressed``'s): seconds, seconds per 10^6 points, bytes.

1. One single scan (a full HDL-64E S2 revolution, warm) and every point-cloud writer
   writing it in one run as the CLI drives them (each writer opened, the frame encoded
   by every writer, the frame appended, every writer closed; LAS and LAZ encode each
   cloud once), repeated: seconds of each writer within that run (its open, encoding and
   close), cost per million points, ratio to the scan, bytes; the whole run against the
   scan of the same repeat. The per-frame files are encoded, not written; the
   multi-frame files (evd, rosbag2) are written to a RAM folder (``/dev/shm``). This is
   the measure of the target "every format together at most 2x the scan". One untimed
   run comes first (each process pays it once: the writers' imports and the generation
   of rosbags' message serializers). Image-only
   formats (exr, npy, pfm, dmap) are measured alone on a 176 x 144 ToF frame.
2. A range scan as the CLI runs it: frames 1-24 of the crossing (10 Hz at 24 fps, 150 deg
   a frame), the scan of every frame (evaluate + extract + cast + noise, through the
   range-scan Scanner) against every point-cloud writer encoding those frames (open and
   close of multi-frame files spread over the run): each writer alone, and all of them in
   one run as the CLI drives them (frame by frame, every writer; LAS and LAZ then encode
   each cloud once). Encoding and the multi-frame files only: the per-frame files are
   not written to disk here.
3. The range-scan runner (:func:`~blensor_addon.jobs.range_scan.scan_range`) writing
   frames 1-24 to disk, npz only and every point-cloud format: the scan on the main
   thread, each frame's writing (encoding, fsync, rename) on the writer thread meanwhile.

Nothing here asserts a time.
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
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=("npz",), help="only table 0 (npz compression)")
    args = ap.parse_args(argv)
    import bpy

    import blensor_addon
    from blensor_addon.io.formats import WRITERS, RunInfo
    blensor_addon.register()
    bpy.ops.wm.open_mainfile(filepath=str(ROOT / "scenes" / "crossing.blend"))
    cam = bpy.data.objects["Velodyne"]
    r = blensor_addon.scan(cam, frame=12)
    npz_table(r, args.repeat)
    if args.only == "npz":
        blensor_addon.unregister()
        return 0
    tof = blensor_addon.scan(cam, frame=12, sensor_type="tof")
    # each repeat: the scan (warm), then every point-cloud writer in one run on its result,
    # as the CLI drives them (LAS and LAZ encode each cloud once); multi-frame files in a
    # RAM folder, so their file writes cost a memory copy as the per-frame writers' bytes
    # do (the disk: table 3). The ratio is taken per repeat (this VM's speed drifts).
    ram = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    run = RunInfo(camera=cam.name, sensor_type=r.sensor_type, sensor=r.sensor, frames=[12])
    scan_t, per, size, together = [], {}, {}, []
    for k in range(args.repeat + 1):  # the first run is untimed: imports, rosbags' serializers
        if k == 1:
            scan_t, per, together = [], {}, []
        t0 = time.perf_counter()
        r = blensor_addon.scan(cam, frame=12)
        scan_t.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory(dir=ram) as tmp:
            t_run = time.perf_counter()
            ws = {}
            for name, W in WRITERS.items():
                if not W.needs.image:
                    t0 = time.perf_counter()
                    (Path(tmp) / name).mkdir()
                    ws[name] = W(Path(tmp) / name, None, run)
                    per[name] = per.get(name, []) + [time.perf_counter() - t0]
            for name, w in ws.items():
                t0 = time.perf_counter()
                size[name] = sum(len(b) for _, b in w.frame_files(r))
                per[name][-1] += time.perf_counter() - t0
            for stage in ("append", "close"):
                for name, w in ws.items():
                    t0 = time.perf_counter()
                    w.append(r) if stage == "append" else w.close("complete")
                    per[name][-1] += time.perf_counter() - t0
            together.append(time.perf_counter() - t_run)
            for name in ws:
                size[name] += sum(f.stat().st_size for f in (Path(tmp) / name).rglob("*") if f.is_file())
    rows = [(name, False, len(r), statistics.median(per[name]), size[name]) for name in per]
    # image formats, on a ToF frame, each alone
    with tempfile.TemporaryDirectory(dir=ram) as tmp:
        for name, W in WRITERS.items():
            if not W.needs.image:
                continue
            times = []
            for k in range(args.repeat):
                folder = Path(tmp) / f"{name}{k}"
                folder.mkdir()
                w = W(folder, None, RunInfo(camera=cam.name, sensor_type=tof.sensor_type, sensor=tof.sensor,
                                            frames=[12]))
                t0 = time.perf_counter()
                files = w.frame_files(tof)
                w.append(tof)
                w.close("complete")
                times.append(time.perf_counter() - t0)
            rows.append((name, True, len(tof), statistics.median(times), sum(len(b) for _, b in files)))
    scan = statistics.median(scan_t)
    allw = statistics.median(together)
    ratios = [w / s for w, s in zip(together, scan_t)]
    print(f"writers, one frame of the crossing (frame 12), Blender {bpy.app.version_string}, median of {args.repeat}")
    print(f"  scan itself (HDL-64E S2 revolution, warm): {scan:.3f} s, {len(r):,} points")
    print("  every point-cloud writer in one run (open, encode the frame, close; multi-frame files in "
          f"{ram or 'a temporary folder'}):")
    print(f"  {'format':12s} {'points':>9s} {'seconds':>8s} {'s per 1M pts':>13s} {'x scan':>7s} {'bytes':>12s}")
    for name, img, n, t, nbytes in rows:
        print(f"  {name:12s} {n:9,d} {t:8.3f} {t / max(n, 1) * 1e6:13.3f} {t / scan:7.2f} {nbytes:12,d}"
              + ("  (ToF frame, alone)" if img else ""))
    print(f"  every point-cloud format together, one run: {allw:.3f} s; median ratio to the scan of its repeat "
          f"{statistics.median(ratios):.2f} x (repeats: {', '.join(f'{x:.2f}' for x in ratios)})")

    # 2. a range scan: per-frame scans, then every point-cloud writer over the same frames;
    # the whole measurement is repeated and each number is the median (this VM's speed
    # moves between runs)
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    frames = list(range(1, 25))
    info = dict(camera=cam.name, sensor_type="rotating")
    scans, per, together = [], {}, []
    for _ in range(args.repeat):
        sc = Scanner(cam, backend="native", packet_hashes=True)  # as the range-scan runner makes it
        sc.scan(Packet("frame", frames[0]))  # warm-up: every mesh BVH built, as after the first frame
        t0 = time.perf_counter()
        results = [sc.scan(Packet("frame", f))[0] for f in frames]
        scans.append(time.perf_counter() - t0)
        sc.close()
        run = RunInfo(sensor=results[0].sensor, frames=frames, **info)
        for name, W in WRITERS.items():
            if W.needs.image:
                continue
            with tempfile.TemporaryDirectory() as tmp:  # each measure starts with no files of the last
                t0 = time.perf_counter()
                w = W(Path(tmp), None, run)
                for x in results:
                    w.frame_files(x)
                    w.append(x)
                w.close("complete")
                per.setdefault(name, []).append(time.perf_counter() - t0)
        # every writer in one run, as the CLI drives them: each frame's files from every
        # writer, then the frame appended to the multi-frame files (LAS and LAZ share the
        # frame's encoded clouds here, as they do in a run)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            t0 = time.perf_counter()
            ws = []
            for name, W in WRITERS.items():
                if not W.needs.image:
                    (folder / name).mkdir()
                    ws.append(W(folder / name, None, run))
            for x in results:
                for w in ws:
                    w.frame_files(x)
                for w in ws:
                    w.append(x)
            for w in ws:
                w.close("complete")
            together.append(time.perf_counter() - t0)
    points = sum(len(x) for x in results)
    scan_total = statistics.median(scans)
    per = {k: statistics.median(v) for k, v in per.items()}
    allw = statistics.median(together)
    print(f"range scan, frames 1-24 (10 Hz, 24 fps: 150 deg a frame), {points:,} points, median of {args.repeat}")
    print(f"  scan of every frame: {scan_total:.3f} s ({scan_total / len(frames) * 1e3:.1f} ms a frame)")
    for name, t in per.items():
        print(f"  {name:12s} {t:8.3f} s  {t / points * 1e6:6.3f} s per 1M pts  {t / scan_total:5.2f} x the scan")
    print(f"  sum of the rows above: {sum(per.values()):.3f} s = {sum(per.values()) / scan_total:.2f} x the scan")
    print(f"  every point-cloud format together, one run: {allw:.3f} s = {allw / scan_total:.2f} x the scan")

    # 3. the range-scan runner as the CLI drives it, files on this machine's disk: scans on
    # the main thread, every frame's writing on the writer thread (WriterThread) meanwhile
    from blensor_addon.jobs.range_scan import scan_range
    cloud_formats = tuple(n for n, W in WRITERS.items() if not W.needs.image)
    runs = {}
    for label, fmts in (("npz only", ("npz",)), ("every point-cloud format", cloud_formats)):
        ts = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                scan_range(cam, frames, Path(tmp) / "run", fmts, backend="native")
                ts.append(time.perf_counter() - t0)
        runs[label] = statistics.median(ts)
    print(f"range-scan runner, frames 1-24 to disk (scan + writer thread + fsync), median of {args.repeat}")
    for label, t in runs.items():
        print(f"  {label:26s} {t:7.3f} s  {t / scan_total:5.2f} x the scan of every frame")
    blensor_addon.unregister()
    return 0


def npz_table(r, repeat: int) -> None:
    """Table 0: the npz of the scan ``r`` stored and deflated (see the module docstring)."""
    from blensor_addon.io.formats import npz
    from blensor_addon.io.formats.npz import npz_bytes
    level = npz.COMPRESS_LEVEL
    cases = (("stored (npz.compress=false)", False, level),
             (f"deflated, level {level} (default)", True, level),
             ("deflated, level 6 (numpy.savez_compressed)", True, 6))
    print(f"npz of one HDL-64E S2 revolution (frame 12), {len(r):,} points, median of {repeat}")
    print(f"  {'encoding':44s} {'seconds':>8s} {'s per 1M pts':>13s} {'bytes':>12s}")
    try:
        for label, compress, lvl in cases:
            npz.COMPRESS_LEVEL = lvl
            ts = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                data = npz_bytes(r, compress)
                ts.append(time.perf_counter() - t0)
            t = statistics.median(ts)
            print(f"  {label:44s} {t:8.3f} {t / len(r) * 1e6:13.3f} {len(data):12,d}")
    finally:
        npz.COMPRESS_LEVEL = level


if __name__ == "__main__":
    raise SystemExit(main())
