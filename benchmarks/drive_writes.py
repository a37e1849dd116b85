"""The write side of a range scan of the drive: what writing npz, pcd, kitti and rosbag2
costs per HDL-32E sweep, apart from the scan.

Usage: ``.venv/bin/python benchmarks/drive_writes.py [--sweeps K] [--rounds R]
[--tree PATH ...] [--scan-ms MS] [--length N] [--out-dir DIR] [--blend FILE]``

Once per invocation, ``K`` sweeps (default 20) of ``scenes/drive.blend`` (its camera
``Lidar``, an HDL-32E, continuous time, from 5 s into the drive; built by
``scenes/build_drive.py`` into a temporary folder when missing) are scanned by the range
scan's own job, and their results, the run's writer settings and its manifest fields
are kept in a pickle. Then, in ``R`` interleaved rounds, each checkout of ``--tree``
(default: this one; give an older checkout's worktree first to compare) replays them in
a fresh process through the range scan's :class:`~blensor_addon.jobs.pipeline.Pipeline`
(the real writers, writer thread, output folder, trajectory and manifest, files on this
machine's disk) with a scanner that returns the kept results: ``--scan-ms 0`` (default)
hands each result over at once (the write side alone: its ceiling in sweeps/s), ``MS``
spends that many ms of Python work per sweep on the main thread first (a scan holding
the GIL, so the table shows what the writer thread takes from it). ``--length N`` writes
N sweeps, the K kept ones over and over, renumbered (a long run's manifest);
``--out-dir /dev/shm`` writes to memory (no disk: syncs cost nothing there).

Per checkout: sweeps/s and CPU-s per sweep of the whole process (every thread), the
main thread's wait for the writer per sweep (blocked handing a packet over, and in
``finish`` for the last ones), fsync calls per sweep, manifest writes and
the bytes they wrote (summed over the run), the CPU of one rewrite of the final manifest
(``json.dumps`` and, where the checkout has it, ``ManifestText``). Minimum over the
rounds, and per round the ratio of each checkout's wall time to the first's; whether
every run wrote the same files, byte for byte. Last, this checkout's npz of one sweep
with its members deflated on the pool and on one thread, interleaved. Prints the CPU
model and the load average before and after (the machine is shared). Nothing here
asserts a time.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import raycast  # benchmarks/raycast.py (this script's folder is first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("npz", "pcd", "kitti", "rosbag2")
START_S = 5.0  # s into the drive (the car is moving)


def cpu_model() -> str:
    """The CPU's model name (benchmarks/raycast.py's) and the cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{raycast.cpu_model()}, {cores} cores"


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def prepare(blend: Path | None, sweeps: int, cache: Path) -> None:
    """Scan ``sweeps`` sweeps of the drive with the range scan's job and pickle what the
    replay needs into ``cache``."""
    import bpy

    import blensor_addon
    from blensor_addon.jobs import range_scan
    if blend is None or not blend.is_file():
        blend = Path(tempfile.mkdtemp(prefix="drive_writes_")) / "drive.blend"
        print(f"building {blend} (scenes/build_drive.py)", flush=True)
        subprocess.run([sys.executable, str(ROOT / "scenes" / "build_drive.py"), str(blend)], check=True)
    blensor_addon.register()
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    cam = bpy.data.objects["Lidar"]
    kept: dict = {"results": []}
    build = range_scan.RangeScanJob._build_pipeline

    def capture(job, reuse):
        p = build(job, reuse)
        kept.update(run=p.writers[0].run, options={w.name: w.options for w in p.writers},
                    static=p.manifest.static, packet_time=p.plan.packet_time)
        scan = p.scanner.scan

        def recording(packet):
            result, record = scan(packet)
            kept["results"].append((packet, result.whole, record))
            return result, record
        p.scanner.scan = recording
        kept["objects"] = lambda: job.scanner.extractor.table.table
        return p
    range_scan.RangeScanJob._build_pipeline = capture
    period = 0.1
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        range_scan.scan_range(cam, None, Path(tmp) / "run", ("npz",), backend="native",
                              time=(START_S, START_S + (sweeps - 0.5) * period))
        print(f"scanned {len(kept['results'])} sweeps in {time.perf_counter() - t0:.1f} s", flush=True)
    range_scan.RangeScanJob._build_pipeline = build
    kept["objects"] = list(kept["objects"]())
    with open(cache, "wb") as f:
        pickle.dump(kept, f, protocol=pickle.HIGHEST_PROTOCOL)
    blensor_addon.unregister()


def replay(cache: Path, scan_ms: float, length: int = 0, out_dir: Path | None = None) -> dict:
    """One run of the kept sweeps through the pipeline into a temporary folder (in
    ``out_dir``; None: beside the checkout); returns the figures (see the module
    docstring). ``length``: sweeps to write, the kept ones over and over, renumbered
    (0: each kept one once)."""
    import dataclasses

    from blensor_addon.core.packets import Packet
    from blensor_addon.io import outdir
    from blensor_addon.io.formats import WRITERS, output_patterns
    from blensor_addon.jobs.pipeline import Pipeline, WholeResult
    from blensor_addon.jobs.run_files import ManifestWriter, TrajectoryWriter
    with open(cache, "rb") as f:
        kept = pickle.load(f)
    results = kept["results"]
    if length:
        first = results[0][0].index
        results = [(Packet(p.kind, first + k), dataclasses.replace(r, frame=first + k), rec)
                   for k, (p, r, rec) in enumerate(results[k % len(results)] for k in range(length))]

    class Plan:
        packets = [p for p, _, _ in results]

    class Replay:
        lookahead = 0
        waits = 0.0

        def __init__(self):
            self._by_index = {p.index: (r, rec) for p, r, rec in results}

        def expect(self, packets):
            pass

        def scan(self, packet):
            if scan_ms:
                end = time.thread_time() + scan_ms * 1e-3
                x = 0
                while time.thread_time() < end:  # Python work: holds the GIL as a scan's Python does
                    for i in range(2000):
                        x += i
            r, rec = self._by_index[packet.index]
            return WholeResult(r), rec

        def packet_hash(self, packet):
            return None

    counts = {"fsync": 0, "syncfs": 0, "manifest_writes": 0, "manifest_bytes": 0}
    real_fsync = os.fsync

    def fsync(fd):
        counts["fsync"] += 1
        return real_fsync(fd)
    os.fsync = fsync
    from blensor_addon.io import atomic
    if hasattr(atomic, "_syncfs"):
        real_syncfs = atomic._syncfs

        def syncfs(fd):
            counts["syncfs"] += 1
            return real_syncfs(fd)
        atomic._syncfs = syncfs
    real_write = outdir.OutputFolder.write_manifest

    def write_manifest(self, doc, done, final=False):
        path = real_write(self, doc, done, final)
        counts["manifest_writes"] += 1
        counts["manifest_bytes"] += path.stat().st_size
        return path
    outdir.OutputFolder.write_manifest = write_manifest
    from blensor_addon.jobs import pipeline
    blocked = [0.0]
    real_submit = pipeline.WriterThread.submit

    def submit(self, job):  # the main thread waits here while the writer is a packet behind
        t = time.perf_counter()
        real_submit(self, job)
        blocked[0] += time.perf_counter() - t
    pipeline.WriterThread.submit = submit
    objects = kept["objects"]
    where = out_dir or (ROOT.parent if os.access(ROOT.parent, os.W_OK) else None)
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        folder = outdir.OutputFolder(Path(tmp) / "run", manifest="manifest.json",
                                     patterns=output_patterns(list(FORMATS)), listed=outdir.range_run_files)
        folder.open()
        folder.check(overwrite=False, resume=False)
        folder.prepare()
        writers = [WRITERS[f](folder.path, kept["options"].get(f), kept["run"]) for f in FORMATS]
        manifest = ManifestWriter(folder, {**kept["static"], "formats": list(FORMATS)}, lambda: objects)
        pipe = Pipeline(Replay(), Plan(), folder, writers, TrajectoryWriter(folder.path, kept["packet_time"]),
                        manifest, {}, lambda: objects)
        cpu0, wall0, main0 = time.process_time(), time.perf_counter(), time.thread_time()
        manifest.start()
        while pipe.remaining:
            pipe.step()
        t = time.perf_counter()
        pipe.finish("complete")
        blocked[0] += time.perf_counter() - t  # the last packets written
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        main_cpu = time.thread_time() - main0
        files = sorted(p for p in folder.path.rglob("*") if p.is_file() and p.name != outdir.LOCK_NAME)
        size = sum(p.stat().st_size for p in files)
        digest = hashlib.sha256()
        for p in files:  # every file's name and bytes: the checkouts' outputs compared
            digest.update(p.relative_to(folder.path).as_posix().encode() + b"\0" + p.read_bytes())
        final = (folder.path / "manifest.json").stat().st_size
        rewrite = manifest_rewrite(json.loads((folder.path / "manifest.json").read_text()))
        folder.release()
    n = len(results)
    points = sum(len(r) for _, r, _ in results)
    return {"sweeps": n, "points": points, "wall": wall, "cpu": cpu, "main_cpu": main_cpu,
            "wait": blocked[0], "bytes": size, "final_manifest": final,
            "sha256": digest.hexdigest(), **rewrite, **counts}


def manifest_rewrite(doc: dict, repeat: int = 5) -> dict:
    """CPU-s of one rewrite of the manifest ``doc`` (its text; the least of ``repeat``):
    ``json.dumps`` of the whole doc, and :class:`~blensor_addon.io.outdir.ManifestText`
    with every entry added already (where the checkout has it)."""
    from blensor_addon.io import outdir
    dumps, text = [], []
    for _ in range(repeat):
        t = time.process_time()
        json.dumps(doc, indent=2, sort_keys=True)
        dumps.append(time.process_time() - t)
        if hasattr(outdir, "ManifestText"):
            mt = outdir.ManifestText()
            for e in doc["frames"]:
                mt.add(e)
            mt.encode(doc)  # (the object table's text kept from here)
            t = time.process_time()
            mt.encode(doc)
            text.append(time.process_time() - t)
    return {"rewrite_json": min(dumps), "rewrite_text": min(text) if text else None}


def npz_table(cache: Path, rounds: int) -> None:
    """One sweep's npz (this checkout): members deflated on the pool and on the calling
    thread, interleaved; least wall and CPU seconds."""
    from blensor_addon.io.formats import npz
    with open(cache, "rb") as f:
        kept = pickle.load(f)
    r = kept["results"][0][1]
    arrays = npz.npz_members(r, kept["run"].start_ns)
    times: dict[str, list[tuple[float, float]]] = {"pool": [], "one thread": []}
    for _ in range(rounds):
        for label, pool in (("pool", npz.deflate_pool), ("one thread", None)):
            w, c = time.perf_counter(), time.process_time()
            data = npz.npz_bytes_of(arrays, True, pool=pool)
            times[label].append((time.perf_counter() - w, time.process_time() - c))
    print(f"npz of one sweep ({len(r):,} points, {len(data):,} bytes), this checkout, {rounds} interleaved "
          f"rounds, {npz.POOL_THREADS} pool threads; load average {load()}")
    for label, ts in times.items():
        print(f"  members deflated {label:10s}: wall {min(t[0] for t in ts) * 1e3:6.1f} ms, "
              f"CPU {min(t[1] for t in ts) * 1e3:6.1f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", action="append", type=Path,
                    help="a checkout of BlenSor to measure (repeatable; the first is the reference)")
    ap.add_argument("--scan-ms", type=float, default=0.0)
    ap.add_argument("--length", type=int, default=0,
                    help="sweeps to write: the prepared ones over and over, renumbered (default: each once)")
    ap.add_argument("--out-dir", type=Path, help="where the runs write (default: beside the checkout; "
                    "/dev/shm: no disk)")
    ap.add_argument("--blend", type=Path, default=ROOT / "scenes" / "drive.blend")
    ap.add_argument("--cache", type=Path, help="the pickle of prepared sweeps (made if missing)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(replay(args.cache, args.scan_ms, args.length, args.out_dir)))
        return 0
    trees = [t.resolve() for t in args.tree or [ROOT]]
    cache = args.cache or Path(tempfile.gettempdir()) / f"drive_writes_{args.sweeps}.pickle"
    print(f"CPU: {cpu_model()}; load average {load()}")
    if not cache.is_file():
        prepare(args.blend, args.sweeps, cache)
    rows: dict[Path, list[dict]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for t in trees:  # interleaved: every checkout once per round
            env = {**os.environ, "PYTHONPATH": str(t)}
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                                  "--cache", str(cache), "--scan-ms", str(args.scan_ms),
                                  "--length", str(args.length),
                                  *(["--out-dir", str(args.out_dir)] if args.out_dir else [])],
                                 env=env, check=True, capture_output=True, text=True, cwd=str(t)).stdout
            rows[t].append(json.loads(out.strip().splitlines()[-1]))
    first = rows[trees[0]][0]
    print(f"write side of the drive: {first['sweeps']} HDL-32E sweeps, {first['points']:,} points, into "
          f"{','.join(FORMATS)}; scan {args.scan_ms:g} ms of Python a sweep; "
          f"{args.rounds} interleaved rounds; load average now {load()}")
    print(f"  {'checkout':40s} {'sweeps/s':>8s} {'CPU-s/sweep':>11s} {'wait/sweep':>10s} "
          f"{'fsync/sweep':>11s} "
          f"{'syncfs':>6s} {'manifests':>9s} {'manifest bytes':>14s} {'final':>9s} {'ratio':>6s}")
    for t in trees:
        rs = rows[t]
        best = min(rs, key=lambda r: r["wall"])
        n = best["sweeps"]
        ratios = [r["wall"] / ref["wall"] for r, ref in zip(rs, rows[trees[0]])]
        print(f"  {str(t)[-40:]:40s} {n / best['wall']:8.2f} {min(r['cpu'] for r in rs) / n:11.3f} "
              f"{min(r['wait'] for r in rs) / n * 1e3:8.1f}ms {best['fsync'] / n:11.2f} {best['syncfs']:6d} "
              f"{best['manifest_writes']:9d} {best['manifest_bytes']:14,d} {best['final_manifest']:9,d} "
              f"{statistics.median(ratios):6.2f}")
        print(f"    rounds: wall {', '.join('%.2f' % r['wall'] for r in rs)} s; "
              f"CPU {', '.join('%.2f' % r['cpu'] for r in rs)} s; output {best['bytes']:,} bytes")
        rw = best["rewrite_text"]
        print(f"    one rewrite of the final manifest: json.dumps {best['rewrite_json'] * 1e3:.1f} ms CPU"
              + (f", ManifestText {rw * 1e3:.1f} ms CPU" if rw is not None else ""))
    same = len({r["sha256"] for t in trees for r in rows[t]}) == 1
    print(f"  every file of every run the same bytes (sha256 of names and contents): "
          f"{'yes' if same else 'NO'}")
    npz_table(cache, max(5, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
