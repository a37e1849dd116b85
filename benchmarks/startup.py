"""Process start to the first packet written, and peak memory per 10^6 rays.

Usage: ``.venv/bin/python benchmarks/startup.py [--rounds 5] [--only start|imports|memory]
[--rays 1e6,4e6] [--profile N] [--before DIR]``

``start``: the README's quick start (``blensor scan scenes/street.blend --out OUT --formats
npz,pcd,kitti,rosbag2 --overwrite``, every frame of the scene planned) as a whole process,
from the moment this script starts it to the moment its first packet file is renamed into
the output folder, where the process is ended (``os._exit``: the first packet is the
target, not the run). The command runs in-process in a small driver (``python -c``) that
calls ``blensor_addon.cli.main`` and, through an import hook that wraps functions once
their modules are loaded (nothing imported ahead of the command), time-stamps its parts
with ``time.time()`` (this script's clock too): the interpreter up, ``blensor_addon.cli``
imported, the options checked (``cli._open_blend`` entered: the writers' registry, numpy
and the sensors imported), ``import bpy`` done (``ui.register`` entered), the add-on
registered, the .blend open, then the first packet: scene extraction
(``SceneExtractor._extract``), BVH builds (``NativeBackend.set_geometry``), the casts
(``NativeBackend.intersect``) and the rest of the first scan (``Scanner.scan``), the
job's set-up before it (of which ``Scanner.check_transforms`` of every planned frame), and
the first file renamed
(``os.replace``) into the output folder (its path printed). Besides it, in the same
interleaved rounds: ``python -c pass`` (the interpreter alone) and ``python -c "import
bpy"`` (Blender's own start, which nothing here can shorten). Printed: each part's least
wall time and least CPU time (the process's, every thread: what the other tenants of a
shared machine change least) over the rounds, the median of the whole, and the peak RSS at
the first packet. ``--before DIR``: a source tree of the add-on (``git archive`` of an
earlier commit, or a copy with a change reverted) timed in the same rounds, alternating
with this checkout (or the tree given by ``--this DIR``), with the ratios this / before. The
children's bytecode is cached in a temporary folder (PYTHONPYCACHEPREFIX, filled by one
untimed run first), as an installed add-on's is; ``--compile`` keeps the shell's
PYTHONDONTWRITEBYTECODE instead. ``--profile N``: instead, cProfile of one such run from
the driver's start to the first packet (top N entries by own and by cumulative time).

``imports``: one run of the same command under ``python -X importtime`` (its overhead
makes it a separate run), the import time by owner: Blender (``bpy`` and the modules of
its scripts folders), ours (``blensor_addon``), numpy, other packages, the standard
library (each module's own time, so the parts add up to the whole).

``memory``: for each ray count N (default 10^6 and 4x10^6), a fresh process opens
``scenes/street.blend`` and scans its camera once as shipped (the warm-up: extraction,
BVHs, libraries), then one HDL-64E S2 revolution with ``angle_resolution`` = 64 x 360 / N
deg (N rays, every field). Twice per N: once for the peak RSS (``VmHWM`` reset through
``/proc/self/clear_refs`` before the scan; the growth over the RSS before it) and the CPU
seconds, once under ``tracemalloc`` (numpy reports its allocations to it: the peak of
Python and numpy memory during the scan, and what the result holds). Printed per 10^6
rays; the target is <= 200 MB.

The CPU model (as benchmarks/raycast.py reads it) and the load average before and after
are printed with the figures: the machine is shared, compare within one run. Nothing here
asserts a time: tests never time anything.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from raycast import cpu_model  # benchmarks/raycast.py (this script's folder is first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
STREET = ROOT / "scenes" / "street.blend"
QUICK_START = ["scan", str(STREET), "--formats", "npz,pcd,kitti,rosbag2", "--overwrite"]

#: the driver of one timed quick start: argv[1] the JSON file of its stamps, argv[2] the
#: output folder, argv[3:] the command's arguments; T0 (environment) the parent's time.time()
DRIVER = r'''
import time
t_up, c_up = time.time(), time.process_time()
import importlib.abc, importlib.machinery, json, os, resource, sys, threading
out_json, out_dir, argv = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3:]
T0 = float(os.environ["STARTUP_T0"])
stamps = {"interpreter up": t_up - T0}
cpus = {"interpreter up": c_up}  # process CPU seconds (every thread) at each stamp
parts, parts_cpu, calls = {}, {}, {}
lock = threading.Lock()

def add(name, dt, dc):
    with lock:
        parts[name] = parts.get(name, 0.0) + dt
        parts_cpu[name] = parts_cpu.get(name, 0.0) + dc

def stamp(name):
    stamps.setdefault(name, time.time() - T0)
    cpus.setdefault(name, time.process_time())

def timed(name, fn, first_only=False):
    """``fn`` timed: its time added to parts[name] until the first scan has ended, its calls
    counted; ``first_only``: the first call's start and end stamped."""
    def wrapper(*a, **k):
        t, c = time.time(), time.process_time()
        if first_only:
            stamp(name + " (start)")
        with lock:
            calls[name] = calls.get(name, 0) + 1
        try:
            return fn(*a, **k)
        finally:
            if "scans (end)" not in stamps:
                add(name, time.time() - t, time.process_time() - c)
            if first_only:
                stamp(name + " (end)")
    return wrapper

PROFILE = os.environ.get("STARTUP_PROFILE")
if PROFILE:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()

def finish(path):
    now = time.time()
    if PROFILE:
        prof.disable()
        prof.dump_stats(PROFILE)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    stamps["first packet file"] = now - T0
    cpus["first packet file"] = time.process_time()
    with open(out_json, "w") as f:
        json.dump({"stamps": stamps, "cpus": cpus, "parts": parts, "parts_cpu": parts_cpu, "calls": calls,
                   "cpu_s": ru.ru_utime + ru.ru_stime,
                   "peak_rss_mb": ru.ru_maxrss / 1024, "file": os.path.relpath(path, out_dir),
                   "addon": os.path.dirname(sys.modules["blensor_addon"].__file__),
                   "modules": sorted(sys.modules)}, f)
    os._exit(0)

_replace = os.replace
def replace(src, dst, *a, **k):
    r = _replace(src, dst, *a, **k)
    p = os.path.realpath(os.fspath(dst))
    if p.startswith(out_dir + os.sep) and os.path.basename(p) != "manifest.json":
        finish(p)
    return r
os.replace = replace

def between(first, then, fn):
    """``fn`` stamping ``first`` before it runs and ``then`` after."""
    def wrapped(*a, **k):
        stamp(first)
        r = fn(*a, **k)
        stamp(then)
        return r
    return wrapped

def patch(name, module):
    if name == "blensor_addon.cli":
        stamp("blensor_addon.cli imported")
        module._open_blend = between("options checked", ".blend open", module._open_blend)
    elif name == "blensor_addon.ui":
        module.register = between("import bpy done", "add-on registered", module.register)
    elif name == "blensor_addon.scene.extract":
        module.SceneExtractor._extract = timed("extraction", module.SceneExtractor._extract)
    elif name == "blensor_addon.scene.scanner":
        sc = module.Scanner
        sc.check_transforms = timed("transform check", sc.check_transforms)
        sc.scan = timed("scans", sc.scan, first_only=True)
    elif name == "blensor_addon.raycast.native":
        nb = module.NativeBackend
        nb.set_geometry = timed("BVH build", nb.set_geometry)
        nb.intersect = timed("casts", nb.intersect)

class Hook(importlib.abc.MetaPathFinder):
    names = ("blensor_addon.cli", "blensor_addon.ui", "blensor_addon.scene.extract",
             "blensor_addon.scene.scanner", "blensor_addon.raycast.native")
    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            patch(name, module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
from blensor_addon.cli import main
rc = main(argv)
print("no packet file was written, exit", rc, file=sys.stderr)
os._exit(3)
'''


#: the children's bytecode cache, outside the add-on folder (PYTHONPYCACHEPREFIX): a user's
#: installed add-on has its .pyc files; a run with PYTHONDONTWRITEBYTECODE set compiles
#: every module again (bpy sets ``sys.dont_write_bytecode`` too). Set by main().
PYCACHE: dict[str, str] = {}
#: the add-on's source tree timed as "this" (None: this checkout; ``--this DIR``)
THIS: Path | None = None


def child_env(tree: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a timed child: this one's, bytecode cached in :data:`PYCACHE`;
    ``tree``: the add-on imported from that source tree instead (first on PYTHONPATH, this
    checkout's native library)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env["BLENSOR_NATIVE_LIB"] = str(ROOT / "build" / "native" / "libblensor_rt.so")
    return {**env, **PYCACHE, **extra}


def load() -> str:
    """The 1-, 5- and 15-minute load averages as text."""
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def _run(cmd: list[str], env: dict | None = None) -> float:
    """Wall seconds of ``cmd`` (stdout and stderr dropped; a failure raises)."""
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env or child_env())
    return time.time() - t0


def first_packet(tmp: Path, k: int, tree: Path | None = None) -> dict:
    """One timed quick start to its first packet file (see the module docstring), of the
    add-on in source tree ``tree`` (None: this checkout)."""
    out, stamps = tmp / f"out{k}-{os.getpid()}-{time.monotonic_ns()}", tmp / f"stamps{k}.json"
    env = child_env(tree, STARTUP_T0=repr(time.time()))
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(stamps), str(out), *QUICK_START,
                           "--out", str(out)],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600,
                          cwd=tmp)  # (not this checkout: ``-c`` puts the working folder first on sys.path)
    if proc.returncode != 0 or not stamps.exists():
        raise SystemExit(f"the quick start's driver failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(stamps.read_text())


def phases(run: dict, cpu: bool = False) -> dict[str, float]:
    """The parts of one run in seconds (``cpu``: the process's CPU seconds, every thread,
    instead of wall time): the stamps' differences; the job's set-up (of which the
    transform check of every planned frame), the first scan (of which the extraction, BVH
    builds and casts) and the first scan's end to the first file."""
    s, p = (run["cpus"], run["parts_cpu"]) if cpu else (run["stamps"], run["parts"])
    order = ["interpreter up", "blensor_addon.cli imported", "options checked", "import bpy done",
             "add-on registered", ".blend open", "scans (start)", "scans (end)", "first packet file"]
    names = {"options checked": "options checked (writers, numpy, sensors imported)",
             "import bpy done": "import bpy", "scans (start)": "job set up",
             "scans (end)": "first scan", "first packet file": "first scan's end to the first file"}
    out, last = {}, 0.0
    for name in order:
        out[names.get(name, name)] = s[name] - last
        last = s[name]
        if name == "scans (start)":
            out["  of which the transform check (every planned frame)"] = p.get("transform check", 0.0)
        if name == "scans (end)":
            for part in ("extraction", "BVH build", "casts"):
                out["  of which " + part] = p.get(part, 0.0)
    out["total (process start to first packet file)"] = s["first packet file"]
    return out


def run_start(rounds: int, before: Path | None) -> None:
    print(f"\n== process start to the first packet file: {' '.join(['blensor', *QUICK_START])} "
          f"--out OUT ({rounds} rounds, interleaved; least wall and least CPU seconds of each part)")
    trees = {"this": THIS} if before is None else {"before": before, "this": THIS}
    rows: dict[str, dict[tuple[str, str], list[float]]] = {}
    totals: dict[str, list[float]] = {t: [] for t in trees}
    rss: dict[str, list[float]] = {t: [] for t in trees}
    files = set()

    def add(name: str, label: str, kind: str, value: float) -> None:
        rows.setdefault(name, {}).setdefault((label, kind), []).append(value)

    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        tmp = Path(d)
        for k in range(rounds):
            for label, tree in trees.items():
                add("python -c pass", label, "wall", _run([sys.executable, "-c", "pass"]))
                add('python -c "import bpy" (Blender\'s own start)', label, "wall",
                    _run([sys.executable, "-c", "import bpy"]))
                run = first_packet(tmp, k, tree)
                for kind in ("wall", "cpu"):
                    for name, v in phases(run, kind == "cpu").items():
                        add(name, label, kind, v)
                totals[label].append(run["stamps"]["first packet file"])
                rss[label].append(run["peak_rss_mb"])
                files.add(f"{run['file']} after {run['calls'].get('scans', 0)} scans begun")
    width = max(len(n) for n in rows)
    head = "".join(f" {t[:6] + ' wall':>12} {'CPU':>6}" for t in trees)
    print(f"{'part (s)':<{width}}{head}" + ("   this/before: wall  CPU" if before is not None else ""))
    for name, by in rows.items():
        def least(label: str, kind: str) -> float | None:
            v = by.get((label, kind))
            return None if not v else min(v)
        line = ""
        for t in trees:
            w, c = least(t, "wall"), least(t, "cpu")
            line += f" {w:12.3f}" + (f" {c:6.3f}" if c is not None else f" {'':6}")
        if before is not None:
            for kind in ("wall", "cpu"):
                a, b = least("this", kind), least("before", kind)
                line += f"  {a / b:5.2f}" if a is not None and b else f"  {'':5}"
        print(f"{name:<{width}}{line}")
    for t in trees:
        print(f"{t}: process start to first packet file median {statistics.median(totals[t]):.3f} s; "
              f"peak RSS min {min(rss[t]):.0f} MB, median {statistics.median(rss[t]):.0f} MB")
    print(f"first file: {', '.join(sorted(files))}")


def owner(name: str, site: str) -> str:
    """Who a module belongs to, for the import-time table."""
    top = name.split(".")[0]
    if top == "blensor_addon":
        return "ours (blensor_addon)"
    if top == "numpy":
        return "numpy"
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top.startswith("_") and \
            top.lstrip("_") in sys.stdlib_module_names:
        return "standard library"
    if top in ("bpy", "_bpy", "mathutils", "bmesh", "gpu", "aud", "idprop", "imbuf", "bl_math", "blf",
               "freestyle", "cycles", "manta", "addon_utils") or top.startswith(("bl_", "bpy_", "_bpy",
                                                                                    "io_", "nodeitems")):
        return "Blender (bpy and its scripts)"
    import importlib.util
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "Blender (bpy and its scripts)"
    where = spec.origin or next(iter(spec.submodule_search_locations or []), "")  # (a namespace package)
    if not where.startswith(site):
        return "standard library"
    return "other packages (site-packages)"


def run_imports() -> None:
    print("\n== import time by owner (one run under python -X importtime, to the first packet)")
    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        out, stamps = Path(d) / "out", Path(d) / "stamps.json"
        env = child_env(STARTUP_T0=repr(time.time()))
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", DRIVER, str(stamps), str(out),
                               *QUICK_START, "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=600)
    site = sysconfig.get_paths()["purelib"]
    by: dict[str, float] = {}
    tops: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if not m:
            continue
        self_us, name = int(m.group(1)), m.group(4)
        who = owner(name, site)
        by[who] = by.get(who, 0.0) + self_us / 1e6
        if who == "other packages (site-packages)":
            top = name.split(".")[0]
            tops[top] = tops.get(top, 0.0) + self_us / 1e6
    for who, s in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"{who:<34} {s:6.3f} s")
    print(f"{'all imports':<34} {sum(by.values()):6.3f} s")
    print("other packages: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in
                                         sorted(tops.items(), key=lambda kv: -kv[1]) if v >= 0.002))


MEMORY = r'''
import json, os, resource, sys, time
import bpy
import blensor_addon
blensor_addon.register()
scene = blensor_addon.open_blend(sys.argv[1])
cam = scene.camera
blensor_addon.scan(cam, frame=1)  # warm-up: extraction, BVHs, libraries
n, traced = float(sys.argv[2]), sys.argv[3] == "1"
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
if traced:
    import tracemalloc
    tracemalloc.start()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS (VmHWM) from here
before = status("VmRSS")
c0 = time.process_time()
r = blensor_addon.scan(cam, frame=1, sensor_type="rotating", preset="hdl64e_s2",
                       angle_resolution=64 * 360 / n)
cpu = time.process_time() - c0
out = {"rays": r.num_rays, "points": len(r), "cpu_s": cpu, "rss_before_mb": before,
       "rss_peak_mb": status("VmHWM"), "rss_after_mb": status("VmRSS")}
if traced:
    cur, peak = tracemalloc.get_traced_memory()
    out.update(traced_peak_mb=peak / 2 ** 20, traced_held_mb=cur / 2 ** 20)
print("RESULT " + json.dumps(out), flush=True)
blensor_addon.unregister()
os._exit(0)
'''


def run_memory(counts: list[float], before: Path | None) -> None:
    print("\n== peak memory per 10^6 rays: HDL-64E S2 revolution of scenes/street.blend (target <= 200 MB)")
    trees = {"this": THIS} if before is None else {"before": before, "this": THIS}
    print(f"{'tree':>6} {'rays':>10} {'points':>10} {'RSS before':>10} {'RSS peak':>9} {'growth/1e6':>10} "
          f"{'traced peak/1e6':>15} {'held/1e6':>9} {'CPU s/1e6':>9}   (MB; MiB traced)")
    for n in counts:
        for label, tree in trees.items():
            res = {}
            for traced in (False, True):
                cmd = [sys.executable, "-c", MEMORY, str(STREET), repr(n), "1" if traced else "0"]
                with tempfile.TemporaryDirectory(prefix="startup-") as d:
                    proc = subprocess.run(cmd, env=child_env(tree), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, timeout=600, cwd=d)
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if not line:
                    raise SystemExit(f"the memory case failed:\n{proc.stderr[-2000:]}")
                res[traced] = json.loads(line[0][7:])
            a, t = res[False], res[True]
            m = a["rays"] / 1e6
            print(f"{label:>6} {a['rays']:>10,} {a['points']:>10,} {a['rss_before_mb']:>10.0f} "
                  f"{a['rss_peak_mb']:>9.0f} {(a['rss_peak_mb'] - a['rss_before_mb']) / m:>10.0f} "
                  f"{t['traced_peak_mb'] / m:>15.0f} {t['traced_held_mb'] / m:>9.0f} {a['cpu_s'] / m:>9.2f}")


def run_profile(top: int) -> None:
    print(f"\n== cProfile of one quick start to its first packet (top {top} by own time, then cumulative)")
    import pstats
    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        out, stamps, prof = Path(d) / "out", Path(d) / "stamps.json", Path(d) / "prof"
        env = child_env(STARTUP_T0=repr(time.time()), STARTUP_PROFILE=str(prof))
        subprocess.run([sys.executable, "-c", DRIVER, str(stamps), str(out), *QUICK_START, "--out", str(out)],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
        st = pstats.Stats(str(prof))
        st.sort_stats("tottime").print_stats(top)
        st.sort_stats("cumulative").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("start", "imports", "memory"))
    ap.add_argument("--rays", default="1e6,4e6", help="ray counts of the memory cases")
    ap.add_argument("--profile", type=int, metavar="N", help="cProfile one quick start to its first packet "
                    "(top N entries) instead of the timed cases")
    ap.add_argument("--before", type=Path, metavar="DIR", help="a source tree of the add-on to time in "
                    "alternation with this one (e.g. git archive of an earlier commit): ratios this / before")
    ap.add_argument("--this", type=Path, metavar="DIR", help="time the add-on of this source tree as "
                    "'this' instead of the checkout's (git archive of HEAD while the working tree is being "
                    "edited)")
    ap.add_argument("--compile", action="store_true", help="keep the shell's PYTHONDONTWRITEBYTECODE (every "
                    "module compiled from source at each start) instead of a bytecode cache")
    args = ap.parse_args()
    global THIS
    THIS = args.this
    cache = tempfile.TemporaryDirectory(prefix="startup-pyc-")
    if args.compile:
        PYCACHE.update({k: v for k, v in os.environ.items() if k == "PYTHONDONTWRITEBYTECODE"})
    else:
        PYCACHE["PYTHONPYCACHEPREFIX"] = cache.name
        with tempfile.TemporaryDirectory(prefix="startup-") as d:  # the cache filled: one untimed run
            first_packet(Path(d), 0, THIS)
            if args.before is not None:
                first_packet(Path(d), 1, args.before)
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); load average before {load()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{'no bytecode cache' if args.compile else 'bytecode cached (PYTHONPYCACHEPREFIX, filled first)'}")
    if args.profile:
        run_profile(args.profile)
        return
    if args.only in (None, "start"):
        run_start(args.rounds, args.before)
    if args.only in (None, "imports"):
        run_imports()
    if args.only in (None, "memory"):
        run_memory([float(x) for x in args.rays.split(",")], args.before)
    print(f"load average after {load()}")


if __name__ == "__main__":
    main()
