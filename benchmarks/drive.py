"""Target 3 of the two-core work: a range scan of the drive into npz, pcd, kitti and
rosbag2, as the CLI runs it, in sweeps per second.

Usage: ``.venv/bin/python benchmarks/drive.py [--start S] [--seconds T] [--rounds R]
[--tree PATH ...] [--blend FILE] [--profile] [--pose]``

``scenes/drive.blend`` (its camera ``Lidar``, an HDL-32E at 10 Hz, continuous time; built
by ``scenes/build_drive.py`` into a temporary folder when missing) is scanned from ``S``
s (default 5) for ``T`` s (default 3: 30 sweeps; 30 for the issue's 300 sweeps) by
``python -m blensor_addon.cli scan --time S-S+T --formats npz,pcd,kitti,rosbag2`` in a
fresh process, into a temporary folder on this machine's disk. In ``R`` interleaved
rounds (default 3), each checkout of ``--tree`` (default: this one; give an older
checkout first, e.g. a ``git archive`` of the commit before a change, to compare) runs
once per round; a checkout without ``build/native/`` uses this one's native library.

Per checkout: sweeps/s of the run as the CLI reports it (its summary line's seconds: the
scan and the writing, without the process start), the process's wall seconds and CPU
seconds (user + system, every thread), the minimum over the rounds, and per round the
ratio of each checkout's run time to the first's. Prints the CPU model and the load
average before and after (the machine is shared).

``--profile``: one more run of this checkout in this process under cProfile (the main
thread only: the scan side; the writer thread's npz deflate and fsync are not in it, see
py-spy for those), and the shares of its time (cumulative) of what the issue named: the
per-ray pose interpolation (``PoseSegment.rotate``/``turn``/``position``/``fraction``),
``pose_at`` (which samples the scene when its step is new), scene sampling
(``Timeline.snapshot``: ``frame_set`` and extraction), the kernel (``NativeBackend
.intersect``) and the main thread's waits for the writer (lock acquire).

``--pose``: the cast side's pose arithmetic of one sweep in this process (72,000 rays, an
HDL-32E's, with beam origins, turning 0.02 rad): the directions and the origins rotated
with their cosines and sines taken once per ray (``PoseSegment.turn``, as the cast does)
against taken for each set (as before), CPU ms (``time.process_time``), the minimum of
interleaved rounds, and their ratio.

Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import raycast  # benchmarks/raycast.py (this script's folder is first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
FORMATS = "npz,pcd,kitti,rosbag2"
SUMMARY = re.compile(r"(\d+) sweeps, (\d+) points, ([0-9.]+) s")


def cpu_model() -> str:
    """The CPU's model name (benchmarks/raycast.py's) and the cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{raycast.cpu_model()}, {cores} cores"


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def drive_blend(given: Path | None, tmp: Path) -> Path:
    """The drive scene: ``given``, else ``scenes/drive.blend``, else built into ``tmp``."""
    for path in (given, ROOT / "scenes" / "drive.blend"):
        if path is not None and path.is_file():
            return path
    out = tmp / "drive.blend"
    subprocess.run([sys.executable, str(ROOT / "scenes" / "build_drive.py"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def run_once(tree: Path, blend: Path, start: float, seconds: float, out: Path) -> dict:
    """One CLI run in a fresh process in checkout ``tree``: sweeps, points, the CLI's
    seconds, the process's wall and CPU seconds."""
    env = dict(os.environ)
    if not (tree / "build" / "native").is_dir():
        lib = sorted((ROOT / "build" / "native").glob("libblensor_rt*"))
        if lib:
            env["BLENSOR_NATIVE_LIB"] = str(lib[0])
    cmd = [sys.executable, "-m", "blensor_addon.cli", "scan", str(blend), "--time",
           f"{start:g}-{start + seconds:g}", "--formats", FORMATS, "--out", str(out),
           "--overwrite", "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = SUMMARY.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or m is None:
        raise SystemExit(f"{tree}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"sweeps": int(m.group(1)), "points": int(m.group(2)), "run": float(m.group(3)), "wall": wall,
            "cpu": cpu}


#: profile entries (file fragment, function) summed (cumulative) into each share
SHARES = {
    "pose interpolation": [("timeline.py", "rotate"), ("timeline.py", "position"),
                           ("timeline.py", "fraction"), ("timeline.py", "turn"),
                           ("context.py", "_rotate_bundled")],
    "pose_at (and the sampling it starts)": [("timeline.py", "pose_at")],
    "scene sampling (Timeline.snapshot)": [("timeline.py", "snapshot")],
    "kernel (NativeBackend.intersect)": [("native.py", "intersect")],
    "lock acquire (waits)": [("~", "<method 'acquire' of '_thread.lock' objects>")],
}


def profile(blend: Path, start: float, seconds: float, out: Path) -> None:
    """One run in this process under cProfile: the shares of :data:`SHARES`."""
    import cProfile
    import pstats

    from blensor_addon import cli
    prof = cProfile.Profile()
    prof.enable()
    cli.main(["scan", str(blend), "--time", f"{start:g}-{start + seconds:g}", "--formats", FORMATS,
              "--out", str(out), "--overwrite", "--quiet"])
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    print(f"\ncProfile of this checkout, {total:.2f} s of functions' own time in all:")
    for name, keys in SHARES.items():
        cum = sum(v[3] for (f, _, fn), v in stats.items() if any(f.endswith(k) and fn == n for k, n in keys))
        print(f"  {name:<40} {cum:7.3f} s  {100 * cum / total:5.1f} %")


def pose_table(rounds: int = 15, n: int = 72_000) -> None:
    """CPU ms of one sweep's rotations of directions and origins, with the turn shared
    and taken per set (see the module's ``--pose``)."""
    import math

    import numpy as np

    from blensor_addon.scene.timeline import PoseSegment
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q[:, 0] *= np.sign(np.linalg.det(q))
    a = 0.02
    p0, p1 = np.eye(4), np.eye(4)
    p0[:3, :3] = q
    p1[:3, :3] = q @ np.array([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0, 0, 1]])
    seg = PoseSegment(0.0, 0.1, p0, p1)
    s = np.sort(rng.random(n))
    d, o = rng.normal(size=(n, 3)), rng.normal(scale=0.05, size=(n, 3))

    def shared() -> None:
        turn = seg.turn(s)
        seg.rotate(s, d, turn=turn), seg.rotate(s, o, turn=turn)

    def per_set() -> None:
        seg.rotate(s, d), seg.rotate(s, o)

    best = {"shared": math.inf, "per set": math.inf}
    for _ in range(rounds):
        for name, fn in (("per set", per_set), ("shared", shared)):
            t0 = time.process_time()
            for _ in range(5):
                fn()
            best[name] = min(best[name], (time.process_time() - t0) / 5 * 1e3)
    print(f"\npose arithmetic of one sweep's cast ({n:,} rays, directions and origins), CPU ms, "
          f"minimum of {rounds} interleaved rounds: turn per set {best['per set']:.2f}, "
          f"shared {best['shared']:.2f} ({best['shared'] / best['per set']:.2f}x)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=float, default=5.0, help="s into the drive (default 5)")
    ap.add_argument("--seconds", type=float, default=3.0, help="s of drive scanned (default 3: 30 sweeps)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", action="append", type=Path, help="a checkout to run (repeatable)")
    ap.add_argument("--blend", type=Path)
    ap.add_argument("--profile", action="store_true", help="also one cProfile run of this checkout")
    ap.add_argument("--pose", action="store_true", help="only the cast's pose arithmetic (no scan)")
    args = ap.parse_args(argv)
    trees = [t.resolve() for t in args.tree or [ROOT]]
    print(f"CPU: {cpu_model()}; load average before: {load()}")
    if args.pose:
        pose_table()
        print(f"load average after: {load()}")
        return 0
    with tempfile.TemporaryDirectory(prefix="blensor-drive-") as tmp:
        blend = drive_blend(args.blend, Path(tmp))
        rows: dict[Path, list[dict]] = {t: [] for t in trees}
        for _ in range(args.rounds):
            for t in trees:  # interleaved: every checkout once per round
                rows[t].append(run_once(t, blend, args.start, args.seconds, Path(tmp) / "out"))
        first = rows[trees[0]]
        sw = first[0]["sweeps"]
        print(f"{blend.name}, {args.start:g}-{args.start + args.seconds:g} s: {sw} sweeps, "
              f"{first[0]['points']:,} points, formats {FORMATS}, "
              f"{args.rounds} interleaved rounds (minimum)")
        print(f"{'checkout':<36} {'sweeps/s':>9} {'run s':>7} {'wall s':>7} {'CPU s':>7} "
              f"{'CPU s/sweep':>11}  run / first's, per round")
        for t in trees:
            rs = rows[t]
            run = min(r["run"] for r in rs)
            ratios = " ".join(f"{r['run'] / f['run']:.2f}" for r, f in zip(rs, first))
            cpu = min(r["cpu"] for r in rs)
            print(f"{str(t)[-36:]:<36} {sw / run:>9.2f} {run:>7.2f} {min(r['wall'] for r in rs):>7.2f} "
                  f"{cpu:>7.2f} {cpu / sw:>11.3f}  {ratios}")
        if args.profile:
            profile(blend, args.start, args.seconds, Path(tmp) / "prof")
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
