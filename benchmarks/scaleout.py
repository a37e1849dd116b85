"""Scale-out of a range scan on a local Dask cluster (docs/performance.md, "Scale-out"):
``blensor scan --workers N`` end to end against one process, and the ``--workers 1`` overhead
against the command before scale-out was added.

Usage: ``.venv/bin/python benchmarks/scaleout.py [--seconds 20] [--rounds 3] [--formats npz]
[--workers 1,2,3] [--base 638f19d] [--no-today] [--before REV] [--after REV] [--work DIR] [--keep]``,
or
``.venv/bin/python benchmarks/scaleout.py --packet-order --seconds 4``

Each run is the command line a user types, as a subprocess, its wall time measured from the
start of the process to its exit (Python's and Blender's start, the .blend's load, the
cluster's start and stop included)::

    python -m blensor_addon.cli scan scenes/drive.blend --time 0-SECONDS --formats F
           --out WORK/<run>/ --quiet [--workers N]

on ``scenes/drive.blend`` (built by ``scenes/build_drive.py`` when missing, as
``benchmarks/odometry.py`` does; its camera ``Lidar``: HDL-32E, 10 Hz, 72,000 rays a
revolution, 10 packets a second of scene time).

Rows:

- ``today``: the same command of the commit before scale-out (``--base``, default 638f19d),
  checked out by ``git worktree add --detach`` into a temporary folder with its own native
  library built there by its own ``native_patch/build.py``; it runs with this checkout's
  ``.venv`` Python (the same bpy, numpy and compiler), the worktree as working directory and
  ``PYTHONPATH`` (ahead of this checkout's editable install: checked before the first run by
  printing ``blensor_addon.__file__``). The worktree is removed at the end.
- ``--workers 1`` (no Dask imported), ``--workers 2``, ``--workers 3`` of this checkout.
- ``--before REV``: the same ``--workers`` rows of commit REV too (a worktree made as the
  ``today`` row's), interleaved with this checkout's: the cluster's CPU before and after a
  change in one run. ``--after REV``: this checkout's rows from a worktree of REV instead
  (a working tree that others edit meanwhile).

The cluster's CPU cost is printed as the least user+sys CPU seconds of each N-worker row over
the rounds divided by the least of the ``--workers 1`` row of the same code (target of
docs/performance.md's table: <= 1.10): CPU seconds are what other tenants of the shared machine change least.

The runs are interleaved (today, 1, 2, 3, today, 1, ...) for ``--rounds`` rounds and the
best wall time of each row is kept, so a load that comes and goes hits every row alike.
User+sys CPU seconds of each run are the ``resource.getrusage(RUSAGE_CHILDREN)`` deltas
around it, every descendant included: this process makes itself a child subreaper
(Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so Dask's worker processes and the fork server,
orphaned when the command exits, are reaped here and counted (the wait for them is not in
the wall time). On a 2-core machine the speedup of 2 workers is capped by the cores: the
CPU seconds show what the workers cost in total, "cores busy" is CPU / wall, and the line
"bound" gives the speedup the cores allow: ``--workers 1``'s wall time over the N workers'
CPU seconds / cores (and over ``--workers 1``'s own CPU seconds / cores: a cluster that
added no work at all; at most the cores).

``--packet-order`` (with ``--seconds 4``: 40 sweeps) measures one cost of the cluster in one
process instead: the CPU a packet of one Scanner (one native thread) costs when the packets
come in order against every 2nd or 3rd packet, as a worker of a 2- or 3-worker cluster gets
them (the camera: the scene's camera, ``Lidar`` in the drive scene).

Checks printed: the output folders of every ``--workers`` run (every round) are hashed file by
file (sha256) and must be byte-identical; the ``today`` folder is compared too (informative:
the commit before may differ). The CPU model, core count and the load average before and
after are printed. Nothing here asserts a time. Targets: 2 workers >= 1.6x one on
the 2-core machine, 3 workers no slower than 2, ``--workers 1`` within 2 % of today.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raycast import cpu_model  # (benchmarks/ is the script's folder, first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
BLENSOR_PY = ROOT / ".venv" / "bin" / "python"
DRIVE = ROOT / "scenes" / "drive.blend"
BASE = "638f19d"  # the commit before scale-out ("today")
PR_SET_CHILD_SUBREAPER = 36
REAP_WAIT_S = 30.0


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def ensure_scene(blend: Path) -> None:
    """Build ``scenes/drive.blend`` with ``scenes/build_drive.py`` when missing."""
    if blend.is_file():
        return
    cmd = [str(BLENSOR_PY), str(ROOT / "scenes" / "build_drive.py"), str(blend)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(limit_s: float = REAP_WAIT_S) -> int:
    """Wait for the descendants left running after a command exited (reparented here by
    :func:`become_subreaper`); returns how many were still running after ``limit_s``."""
    end = time.monotonic() + limit_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid:
            continue
        if time.monotonic() > end:
            return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == os.getpid())
        time.sleep(0.05)


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


class Roles:
    """User+sys CPU seconds of a running command's process tree by role, polled with psutil
    every ``interval`` s (the last value seen of each process: a process's last
    ``interval`` is missing): ``client`` (the command's process; a local cluster's
    scheduler runs in it), ``workers`` (processes that loaded Blender: more than 250 MB
    resident) and ``dask`` (the fork server and the nannies). An estimate beside the exact
    total of :func:`cpu_seconds`."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import threading
        self.pid, self.interval = pid, interval
        self.seen: dict[int, tuple[float, int]] = {}  # pid -> (cpu s, max rss)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import psutil
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        procs = {self.pid: root}
        while not self._stop.is_set():
            try:
                for child in root.children(recursive=True):
                    procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
            for pid, proc in list(procs.items()):
                try:
                    with proc.oneshot():
                        t, rss = proc.cpu_times(), proc.memory_info().rss
                    cpu = t.user + t.system
                    self.seen[pid] = (cpu, max(rss, self.seen.get(pid, (0.0, 0))[1]))
                except psutil.Error:
                    procs.pop(pid, None)
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        out = {"client": 0.0, "workers": 0.0, "dask": 0.0}
        for pid, (cpu, rss) in self.seen.items():
            role = "client" if pid == self.pid else "workers" if rss > 250 << 20 else "dask"
            out[role] += cpu
        return out


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def tree_hashes(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``folder``."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[str(p.relative_to(folder))] = h.hexdigest()
    return out


def worktree_env(rev, path, env):
    """A worktree of ``rev`` at ``path`` (:func:`make_today`) and the environment whose
    Python imports the add-on from it; SystemExit if another copy would be imported."""
    tree = make_today(rev, path)
    tenv = dict(env, PYTHONPATH=str(tree))
    probe = [str(BLENSOR_PY), "-c", "import blensor_addon; print(blensor_addon.__file__)"]
    where = subprocess.run(probe, cwd=tree, env=tenv, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"scaleout: the {rev} rows would import {where}, not the worktree {tree}")
    return tree, tenv


def make_today(base: str, where: Path) -> Path:
    """A worktree of ``base`` at ``where`` with its own native library; returns it."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(where), base],
                   check=True)
    subprocess.run([str(BLENSOR_PY), str(where / "native_patch" / "build.py")], cwd=where, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return where


def remove_today(where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


class Run:
    """One row: its command line, working directory and environment."""

    def __init__(self, name: str, cwd: Path, env: dict, workers: int | None, tag: str = "") -> None:
        self.name, self.cwd, self.env, self.workers = name, cwd, env, workers
        self.tag = tag  # "": this checkout; else the commit of --before
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.hashes: list[dict] = []
        self.roles: list[dict[str, float]] = []

    def command(self, blend: Path, out: Path, seconds: float, formats: str) -> list[str]:
        return [str(BLENSOR_PY), "-m", "blensor_addon.cli", "scan", str(blend), "--time", f"0-{seconds:g}",
                "--formats", formats, "--out", str(out), "--quiet",
                *(["--workers", str(self.workers)] if self.workers is not None else [])]

    def once(self, blend: Path, out: Path, seconds: float, formats: str) -> None:
        shutil.rmtree(out, ignore_errors=True)
        cmd = self.command(blend, out, seconds, formats)
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        roles = Roles(proc.pid)
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        res = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
        self.roles.append(roles.stop())
        left = reap_orphans()
        cpu = cpu_seconds() - cpu0
        if res.returncode != 0:
            raise SystemExit(f"scaleout: {self.name} failed (exit {res.returncode}): {' '.join(cmd)}\n"
                             f"{res.stderr.strip()}")
        if left:
            print(f"scaleout: {self.name}: {left} processes still running {REAP_WAIT_S:g} s after the "
                  "command exited (their CPU time is not counted)", flush=True)
        self.walls.append(wall)
        self.cpus.append(cpu)
        self.hashes.append(tree_hashes(out))
        shutil.rmtree(out, ignore_errors=True)

    @property
    def best(self) -> float:
        return min(self.walls)

    @property
    def best_cpu(self) -> float:
        return self.cpus[self.walls.index(self.best)]


#: run by ``--packet-order`` in .venv's Python (bpy): one Scanner, one native thread, scans the
#: packets of the interval in order, then as a worker of 2 and of 3 sees them
PACKET_ORDER = r"""
import os, sys, tempfile, time
import bpy
import blensor_addon
from blensor_addon.jobs.range_scan import RangeScanJob, RangeScanSpec
from blensor_addon.scene.scanner import Scanner
blend, seconds = sys.argv[1], float(sys.argv[2])
blensor_addon.register()
bpy.ops.wm.open_mainfile(filepath=blend)
cam = bpy.context.scene.camera
packets = RangeScanJob(RangeScanSpec(cam, None, tempfile.mkdtemp(), time=(0.0, seconds))).plan.packets
orders = [("in order", packets), ("every 2nd (a worker of 2)", packets[0::2] + packets[1::2]),
          ("every 3rd (a worker of 3)", packets[0::3] + packets[1::3] + packets[2::3]),
          ("in order again", packets)]
for name, order in orders:
    sc = Scanner(cam, threads=1, packet_hashes=True)
    sc.scan(packets[0])  # its BVHs built: not timed
    c0 = time.process_time()
    for p in order:
        sc.scan(p)
    print(f"packet-order: {name}: {(time.process_time() - c0) / len(order) * 1000:.1f} ms CPU a packet "
          f"({len(order)} packets, 1 thread)", flush=True)
    sc.close()
blensor_addon.unregister()
os._exit(0)
"""


def packet_order(blend: Path, seconds: float) -> int:
    """Per-packet CPU of one Scanner (one thread) scanning the packets of ``[0, seconds]`` in
    order against every 2nd / 3rd packet (what a worker of a 2- or 3-worker cluster gets)."""
    res = subprocess.run([str(BLENSOR_PY), "-c", PACKET_ORDER, str(blend), f"{seconds:g}"], cwd=ROOT,
                         capture_output=True, text=True)
    for line in res.stdout.splitlines():
        if line.startswith("packet-order:"):
            print(line)
    if res.returncode != 0:
        print(res.stderr.strip()[-2000:], file=sys.stderr)
    return res.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="scene seconds scanned (--time 0-S)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best of)")
    ap.add_argument("--formats", default="npz", help="--formats of the scans")
    ap.add_argument("--workers", default="1,2,3", help="comma-separated --workers rows (1 first)")
    ap.add_argument("--base", default=BASE, help="commit of the 'today' row (before scale-out)")
    ap.add_argument("--no-today", action="store_true", help="leave out the 'today' row")
    ap.add_argument("--before", default=None, help="also the --workers rows of this commit (a worktree)")
    ap.add_argument("--after", default=None, help="this checkout's rows from a worktree of this commit")
    ap.add_argument("--blend", default=str(DRIVE), help="the scene (the drive scene built when missing)")
    ap.add_argument("--work", default=None, help="folder for the outputs (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and the worktree")
    ap.add_argument("--packet-order", action="store_true",
                    help="only the per-packet CPU of one scanner in order vs every 2nd/3rd packet")
    args = ap.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    if not workers or any(w < 1 for w in workers) or args.rounds < 1 or args.seconds <= 0:
        ap.error("--workers must list integers >= 1, --rounds >= 1, --seconds > 0")
    blend = Path(args.blend).resolve()
    if blend == DRIVE:
        ensure_scene(blend)
    if args.packet_order:
        return packet_order(blend, args.seconds)
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="blensor-scaleout-"))
    work.mkdir(parents=True, exist_ok=True)
    reaper = become_subreaper()
    load_before = load_average()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BLENSOR_NATIVE_LIB")}
    runs = []
    today = before = after = None
    try:
        if not args.no_today:
            today, tenv = worktree_env(args.base, work / "worktree-today", env)
            runs.append(Run(f"today ({args.base}), one process", today, tenv, None))
        for rev, name in ((args.before, "before"), (args.after, "after")):
            if not rev:
                continue
            tree, tenv = worktree_env(rev, work / f"worktree-{name}", env)
            before, after = (tree, after) if name == "before" else (before, tree)
            runs += [Run(f"{rev} --workers {w}", tree, tenv, w, tag=rev if name == "before" else "")
                     for w in workers]
        if not args.after:
            runs += [Run(f"--workers {w}", ROOT, env, w) for w in workers]
        for r in range(args.rounds):
            for run in runs:
                run.once(blend, work / "out", args.seconds, args.formats)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{run.name} {run.walls[-1]:.2f} s"
                                                               for run in runs), flush=True)
    finally:
        for tree in (today, before, after):
            if tree is not None and not args.keep:
                remove_today(tree)
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical cores; load average before {load_before}, "
          f"after {load_average()}")
    sweeps = int(round(args.seconds * 10))
    print(f"scene: {blend.name}, --time 0-{args.seconds:g} ({sweeps} sweep{'s' * (sweeps != 1)} at 10 Hz), "
          f"--formats {args.formats}; best of {args.rounds} interleaved rounds; wall = the command's process "
          "end to end; CPU = user+sys of it and every descendant"
          + ("" if reaper else " (no subreaper: Dask's worker processes may be missing)"))
    one = next((run for run in runs if run.workers == 1 and not run.tag), None)
    print()
    print("| run | wall s, best | wall s, every round | user+sys CPU s | cores busy | ratio | target |")
    print("|---|---|---|---|---|---|---|")
    prev = None
    for run in runs:
        rounds = " / ".join(f"{w:.2f}" for w in run.walls)
        ratio = target = "-"
        if run.workers is None and one is not None:
            over = one.best / run.best
            ratio = f"--workers 1 / today = {over:.3f} ({(over - 1) * 100:+.1f} %)"
            target = "<= 2 % slower"
        elif run.workers is not None and run.workers > 1 and one is not None:
            ratio = f"speedup vs 1 worker {one.best / run.best:.2f}x"
            target = ">= 1.6x" if run.workers == 2 else "-"
            if prev is not None and prev.workers is not None and prev.workers > 1:
                ratio += f"; vs {prev.workers} workers {prev.best / run.best:.2f}x"
                target = f"no slower than {prev.workers} workers"
        print(f"| {run.name} | {run.best:.2f} | {rounds} | {run.best_cpu:.1f} "
              f"| {run.best_cpu / run.best:.2f} | {ratio} | {target} |")
        prev = run
    print()
    print("CPU of the cluster: least user+sys CPU s of each row over the rounds (every round's in brackets) "
          "against --workers 1 of the same code; target <= 1.10")
    for tag in dict.fromkeys(run.tag for run in runs if run.workers is not None):
        group = [run for run in runs if run.workers is not None and run.tag == tag]
        base = next((run for run in group if run.workers == 1), None)
        for run in group:
            ratio = f" = {min(run.cpus) / min(base.cpus):.3f}x of 1 worker" if base is not None else ""
            print(f"  {tag or 'this checkout'}, --workers {run.workers}: {min(run.cpus):.1f} CPU s{ratio} "
                  f"({' / '.join(f'{c:.1f}' for c in run.cpus)})")
            least = run.roles[run.cpus.index(min(run.cpus))]
            print("    by role in that round (psutil, polled): "
                  + ", ".join(f"{role} {cpu:.1f} s" for role, cpu in least.items()))
    cores = os.cpu_count() or 1
    if one is not None and any(run.workers and run.workers > 1 for run in runs):
        print()
        print(f"bound on {cores} cores: N workers take at least their CPU seconds / {cores}, so the speedup "
              f"over --workers 1 is at most " + ", ".join(
                  f"{one.best / max(run.best_cpu / cores, 1e-9):.2f}x ({run.workers} workers)"
                  for run in runs if run.workers and run.workers > 1)
              + f"; with no cost added by the cluster {min(cores, one.best / (one.best_cpu / cores)):.2f}x")
    print()
    same = True
    for tag in dict.fromkeys(run.tag for run in runs if run.workers is not None):  # each code's rows
        dask_runs = [run for run in runs if run.workers is not None and run.tag == tag]
        ref = dask_runs[0].hashes[0]
        names = ", ".join(str(run.workers) for run in dask_runs)
        if all(h == ref for run in dask_runs for h in run.hashes):
            print(f"bytes: {tag or 'this checkout'}, --workers {names}, every round: identical "
                  f"({len(ref)} files, sha256 of each)")
            continue
        same = False
        for run in dask_runs:
            for i, h in enumerate(run.hashes):
                diff = sorted(k for k in set(h) | set(ref) if h.get(k) != ref.get(k))
                if diff:
                    print(f"bytes: {run.name} round {i + 1} DIFFERS from --workers {dask_runs[0].workers} "
                          f"round 1 in {len(diff)} files: {', '.join(diff[:5])}")
    if args.before:
        b, t = (next(run.hashes[0] for run in runs if run.workers is not None and run.tag == tag)
                for tag in (args.before, ""))
        diff = sorted(k for k in set(b) | set(t) if b.get(k) != t.get(k))
        print(f"bytes: {args.before} vs {args.after or 'this checkout'}: "
              + ("identical" if not diff else f"{len(diff)} of {len(t)} files differ (changes between them)"))
    dask_runs = [run for run in runs if run.workers is not None and not run.tag]
    ref = dask_runs[0].hashes[0] if dask_runs else {}
    if today is not None and runs[0].hashes:
        t = runs[0].hashes[0]
        diff = sorted(k for k in set(t) | set(ref) if t.get(k) != ref.get(k))
        what = "identical" if not diff else f"{len(diff)} of {len(t)} files differ ({', '.join(diff[:3])})"
        print(f"bytes: today vs --workers {dask_runs[0].workers if dask_runs else '?'}: {what}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
