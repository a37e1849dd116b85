"""What a rig saves: several sensors scanned in one pass over time
against the same sensors scanned by separate runs of the same frames, in real Blender.

Usage: ``.venv/bin/python benchmarks/rig.py [--frames 1-24] [--repeat 3] [--no-cli]``

Rows (the demo's rig variant, ``scenes/crossing_rig.blend``: the roof HDL-64E S2 and two
side VLP-16s, npz files; every run writes to a fresh folder):

1. in one process: three :func:`~blensor_addon.jobs.range_scan.scan_range` runs one
   after the other against one :func:`~blensor_addon.jobs.rig_scan.scan_rig` of the three
   cameras (median of ``--repeat``; the first, untimed, run warms the process);
2. the same with a Geometry Nodes scatter of 300 x 300 boxes added around the crossing
   (90,000 instances: a scene whose evaluation and extraction cost more), where sharing
   one evaluation per time matters more;
3. on the command line (unless ``--no-cli``): three ``blensor scan --camera X``
   processes against one ``blensor scan --camera A,B,C`` (wall time, Blender's start and
   the .blend's load included: what a user running the sensors one by one pays).

Each row gives the scene evaluations (``frame_change_post`` calls: ``frame_set`` of a
frame or subframe), seconds, and the rig's cost as a share of the separate runs'. Every
rig run's files are also compared with the separate runs' (the same bytes). Nothing here
asserts a time.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAMERAS = ("Velodyne", "VLP16_Left", "VLP16_Right")


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*.npz"))
    return bool(names) and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def in_process(bpy, frames: range, repeat: int, tmp: Path) -> tuple:
    """(evaluations separate, evaluations rig, seconds separate, seconds rig, same bytes)."""
    from blensor_addon.jobs.range_scan import scan_range
    from blensor_addon.jobs.rig_scan import scan_rig
    scene = bpy.context.scene
    cams = [scene.objects[n] for n in CAMERAS]
    count = [0]

    def counted(*_):
        count[0] += 1
    bpy.app.handlers.frame_change_post.append(counted)
    try:
        def separate(out):
            for c in cams:
                scan_range(c, frames, out / c.name, ("npz",))

        def rig(out):
            scan_rig(cams, frames, out, ("npz",))
        times = {"separate": [], "rig": []}
        evals = {}
        for k in range(repeat + 1):
            for name, fn in (("separate", separate), ("rig", rig)):
                out = tmp / f"{name}{k}"
                count[0] = 0
                t = time.perf_counter()
                fn(out)
                dt = time.perf_counter() - t
                if k:
                    times[name].append(dt)
                evals[name] = count[0]
        same = _same_files(tmp / "separate0", tmp / "rig0")
        for k in range(repeat + 1):
            for name in times:
                shutil.rmtree(tmp / f"{name}{k}", ignore_errors=True)
    finally:
        bpy.app.handlers.frame_change_post.remove(counted)
    return (evals["separate"], evals["rig"], statistics.median(times["separate"]),
            statistics.median(times["rig"]), same)


def on_cli(frames: range, tmp: Path) -> tuple:
    """(seconds of three processes, seconds of one rig process, same bytes)."""
    exe = str(Path(sys.executable).parent / "blensor")
    blend = str(ROOT / "scenes" / "crossing_rig.blend")
    spec = f"{frames.start}-{frames.stop - 1}"
    t = time.perf_counter()
    for c in CAMERAS:
        subprocess.run([exe, "scan", blend, "--camera", c, "--frames", spec,
                        "--out", str(tmp / "cli_sep" / c), "--quiet"], check=True)
    sep = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([exe, "scan", blend, "--camera", ",".join(CAMERAS), "--frames", spec, "--out",
                    str(tmp / "cli_rig"), "--quiet"], check=True)
    rig = time.perf_counter() - t
    return sep, rig, _same_files(tmp / "cli_sep", tmp / "cli_rig")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", default="1-24")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cli", action="store_true")
    args = ap.parse_args(argv)
    a, b = (int(v) for v in args.frames.split("-"))
    frames = range(a, b + 1)
    import bpy

    import blensor_addon
    blensor_addon.register()
    bpy.ops.wm.open_mainfile(filepath=str(ROOT / "scenes" / "crossing_rig.blend"))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows.append(("crossing, 3 LiDARs, in one process", *in_process(bpy, frames, args.repeat, tmp)))
        sys.path.insert(0, str(ROOT / "scenes"))  # the benchmark's own helper, not the add-on
        from gn_scatter import make_gn_scatter
        make_gn_scatter(bpy, 300, 120.0, z=-0.05)
        rows.append(("+ 90,000 GN instances, in one process", *in_process(bpy, frames, args.repeat, tmp)))
        if not args.no_cli:
            sep, rig, same = on_cli(frames, tmp)
            rows.append(("crossing, 3 LiDARs, 3 processes vs 1", "", "", sep, rig, same))
    blensor_addon.unregister()
    print(f"frames {args.frames} at 24 fps, sensors {', '.join(CAMERAS)}; median of {args.repeat}")
    print(f"{'case':<40} {'evals sep':>9} {'evals rig':>9} {'sep s':>7} {'rig s':>7} {'rig/sep':>7} "
          "same bytes")
    for name, es, er, ts, tr, same in rows:
        print(f"{name:<40} {es!s:>9} {er!s:>9} {ts:7.2f} {tr:7.2f} {tr / ts:7.2f} {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
