"""Ray-casting and end-to-end benchmark.

Usage: ``.venv/bin/python benchmarks/raycast.py [--repeat N] [--cast-rounds R] [--skip-bvhtree]``,
or ``benchmarks/raycast.py --threads 1,2,4,8,16 [--rounds 7] [--presorted]``: only the table
of native vs Embree on four ray sets per thread count (``--presorted``: and the scattered rays
cast already in Morton order) (needs numpy, the built library and embreex, not
bpy: it runs on a bigger machine without Blender).

Scene (deterministic): a 487 x 487 vertex terrain over 200 x 200 m displaced by a seeded
sum of sine waves (472,392 triangles) and four 4.5 x 1.8 x 1.5 m box cars.
Ray sets: one HDL-64E S2 revolution (133,312 rays, 120 m) from 2 m above the terrain
centre, and 10^6 random rays from above the terrain.
Backends, measured in the same run: the native library on 1 and 2 threads, the Blender
BVHTree fallback, and Embree 4 through ``embreex`` on two Python threads.
Moving instances: the same casts with a time per ray while the four cars drive 1.2 m and
turn 5 deg within the step (and once with the terrain moving too, so every ray meets a
moving instance), as a ratio to the static cast.
End to end (real bpy scene): one full revolution (extract + build + cast + noise + npz
write, fresh scanner each time) and a 10-frame range scan with moving cars.

Prints a table; static casts are the best of ``--cast-rounds`` rounds (15) that call the
native (1 and 2 threads) and Embree casts in turn, so the backends compared in a row share
the machine's moments of slowness; timed casts are the best of ``--repeat`` runs, the end
to end numbers medians.
Nothing here asserts a time: tests never time anything.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

GRID = 487
SIZE = 200.0
CARS = [(10.0, 5.0, 0.3), (-20.0, -8.0, 1.2), (30.0, 25.0, 2.0), (-5.0, 40.0, -0.7)]


def terrain_height(x, y):
    """Seeded sum of sine waves (m)."""
    rng = np.random.default_rng(20111126)
    h = np.zeros_like(x)
    for _ in range(12):
        kx, ky = rng.normal(0, 0.08, 2)
        amp = rng.uniform(0.1, 1.2)
        ph = rng.uniform(0, 2 * np.pi)
        h += amp * np.sin(kx * x + ky * y + ph)
    return h


def terrain():
    xs = np.linspace(-SIZE / 2, SIZE / 2, GRID)
    gx, gy = np.meshgrid(xs, xs, indexing="ij")
    verts = np.stack([gx.ravel(), gy.ravel(), terrain_height(gx, gy).ravel()], 1).astype(np.float32)
    idx = np.arange(GRID * GRID).reshape(GRID, GRID)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int32)
    return verts, tris


def box(center, size=(4.5, 1.8, 1.5), yaw=0.0):
    sx, sy, sz = size
    corners = np.array([[(i & 1) - 0.5, ((i >> 1) & 1) - 0.5, ((i >> 2) & 1) - 0.5] for i in range(8)])
    corners *= [sx, sy, sz]
    c, s = math.cos(yaw), math.sin(yaw)
    corners = corners @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])
    corners += center
    quads = [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3), (0, 4, 6, 2), (1, 3, 7, 5)]
    tris = np.array([t for q in quads for t in ((q[0], q[1], q[2]), (q[0], q[2], q[3]))], np.int32)
    return corners.astype(np.float32), tris


def car_boxes():
    out = []
    for x, y, yaw in CARS:
        z = float(terrain_height(np.array([x]), np.array([y]))[0]) + 0.75
        out.append(box((x, y, z), yaw=yaw))
    return out


def sensor_origin():
    return np.array([0.0, 0.0, float(terrain_height(np.array([0.0]), np.array([0.0]))[0]) + 2.0])


def hdl64_rays():
    from blensor_addon.core.sensors.rotating import LidarSettings, make_pattern, scan_columns
    p = make_pattern(LidarSettings(), *scan_columns(LidarSettings(), 0, 1 / 24, "single"))
    d = p.directions.astype(np.float64)
    world = np.stack([d[:, 0], -d[:, 2], d[:, 1]], 1)  # sensor +Y up -> world +Z up
    return np.broadcast_to(sensor_origin(), world.shape).astype(np.float32), world.astype(np.float32)


def random_rays(n=1_000_000):
    rng = np.random.default_rng(7)
    o = np.stack([rng.uniform(-90, 90, n), rng.uniform(-90, 90, n), rng.uniform(3, 20, n)], 1)
    d = rng.normal(size=(n, 3))
    d[:, 2] = -np.abs(d[:, 2])
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return o.astype(np.float32), d.astype(np.float32)


def best(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def interleaved(fns, rounds):
    """Best time and last output of each of ``fns`` (name -> callable), timed in
    ``rounds`` rounds that call every one once in turn: the backends compared in a row
    share this VM's moments of slowness instead of meeting them one after the other."""
    times = {k: [] for k in fns}
    outs = {}
    for _ in range(rounds):
        for k, fn in fns.items():
            t = time.perf_counter()
            outs[k] = fn()
            times[k].append(time.perf_counter() - t)
    return {k: (min(v), outs[k]) for k, v in times.items()}


def geometry():
    from blensor_addon.raycast import MeshData, SceneGeometry
    v, t = terrain()
    meshes = [MeshData(v, t)] + [MeshData(cv, ct) for cv, ct in car_boxes()]
    return SceneGeometry(meshes, np.arange(len(meshes), dtype=np.int32),
                         np.repeat(np.eye(4, dtype=np.float32)[None], len(meshes), 0))


def embree_scene(geom):
    from embreex import rtcore_scene
    from embreex.mesh_construction import TriangleMesh
    scene = rtcore_scene.EmbreeScene()
    for m in geom.meshes:
        TriangleMesh(scene, m.vertices.astype(np.float32), m.triangles.astype(np.int32))
    return scene


def embree_cast(scene, o, d, tmax, threads=2):
    def run(sl):
        return scene.run(o[sl], d[sl], dists=np.full(sl.stop - sl.start, tmax, np.float32), output=1)
    n = len(o)
    parts = [slice(k * n // threads, (k + 1) * n // threads) for k in range(threads)]
    with ThreadPoolExecutor(threads) as ex:
        res = list(ex.map(run, parts))
    return np.concatenate([r["tfar"] for r in res]), np.concatenate([r["geomID"] for r in res])


def cast_benchmarks(repeat, skip_bvhtree, cast_rounds=15):
    import bpy  # noqa: F401  (mathutils for the fallback)

    from blensor_addon.raycast.bvhtree import BVHTreeBackend
    from blensor_addon.raycast.native import NativeBackend
    geom = geometry()
    ntri = sum(m.triangles.shape[0] for m in geom.meshes)
    rows, builds = [], {}
    rays = {"HDL-64E revolution (133,312 rays, 120 m)": (*hdl64_rays(), 120.0),
            "random (1,000,000 rays, 1000 m)": (*random_rays(), 1000.0)}

    t = time.perf_counter()
    n1 = NativeBackend(threads=1)
    n1.set_geometry(geom)
    builds["native"] = time.perf_counter() - t
    n2 = NativeBackend(threads=2)
    n2.set_geometry(geom)
    t = time.perf_counter()
    emb = embree_scene(geom)
    builds["embree"] = time.perf_counter() - t  # Embree builds lazily: first cast adds more
    embree_cast(emb, *hdl64_rays()[:2], 1.0)
    bvh = None
    if not skip_bvhtree:
        t = time.perf_counter()
        bvh = BVHTreeBackend()
        bvh.set_geometry(geom)
        builds["bvhtree"] = time.perf_counter() - t

    for label, (o, d, tmax) in rays.items():
        n = len(o)
        timed = interleaved({"native 1 thread": lambda: n1.intersect(o, d, tmax),
                             "native 2 threads": lambda: n2.intersect(o, d, tmax),
                             "embreex 2 threads": lambda: embree_cast(emb, o, d, tmax)}, cast_rounds)
        res = {k: t for k, (t, _) in timed.items()}
        h2 = timed["native 2 threads"][1]
        te, ge = timed["embreex 2 threads"][1]
        if bvh is not None:
            sub = min(n, 200_000)  # the per-ray Python loop: time a slice, report the rate
            tb, hb = best(lambda: bvh.intersect(o[:sub], d[:sub], tmax), 1)
            res["BVHTree fallback"] = tb * n / sub
        hit_n = h2.instance >= 0
        hit_e = ge >= 0
        agree = np.mean(hit_n == hit_e)
        dmax = float(np.abs(h2.t[hit_n & hit_e] - te[hit_n & hit_e]).max()) if (hit_n & hit_e).any() else 0.0
        rows.append((label, n, res, agree, dmax))
    return ntri, builds, rows


def moving_geometry(geom, terrain_moves=False):
    """``geom`` with end transforms: every car 1.2 m along its heading and 5 deg more yaw;
    with ``terrain_moves`` the terrain also shifts 0.1 m and turns 0.5 deg."""
    from blensor_addon.raycast import SceneGeometry
    end = geom.instance_matrix.astype(np.float64).copy()
    for i, (x, y, yaw) in enumerate(CARS, start=1):
        a = math.radians(5.0)
        Rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
        c = np.array([x, y, 0.0])  # turn about the car's own position
        end[i, :3, :3] = Rz
        end[i, :3, 3] = c - Rz @ c + 1.2 * np.array([math.cos(yaw), math.sin(yaw), 0.0])
    if terrain_moves:
        a = math.radians(0.5)
        end[0, :3, :3] = [[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]]
        end[0, :3, 3] = [0.1, 0.0, 0.0]
    return SceneGeometry(geom.meshes, geom.instance_mesh, geom.instance_matrix, end.astype(np.float32))


def timed_benchmarks(repeat):
    """Seconds of the static cast and of timed casts with moving instances (2 threads)."""
    from blensor_addon.raycast.native import NativeBackend
    geom = geometry()
    rows = []
    for label, (o, d, tmax) in {"HDL-64E revolution": (*hdl64_rays(), 120.0),
                                "random 10^6": (*random_rays(), 1000.0)}.items():
        n = len(o)
        time_ = (np.linspace(0.0, 1.0, n) if label.startswith("HDL") else
                 np.random.default_rng(3).uniform(0.0, 1.0, n)).astype(np.float32)
        res = {}
        for name, g in (("static", geom), ("cars moving", moving_geometry(geom)),
                        ("all moving", moving_geometry(geom, True))):
            be = NativeBackend(threads=2)
            be.set_geometry(g)
            ts = None if name == "static" else time_
            res[name], _ = best(lambda: be.intersect(o, d, tmax, time=ts), repeat)
            be.close()
        rows.append((label, res))
    return rows


def end_to_end(repeat):
    import bpy

    import blensor_addon
    from blensor_addon.io.formats.npz import write_npz
    from blensor_addon.jobs.range_scan import scan_range
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    blensor_addon.register()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 10
    v, t = terrain()
    mesh = bpy.data.meshes.new("Terrain")
    mesh.vertices.add(len(v))
    mesh.vertices.foreach_set("co", v.ravel())
    mesh.loops.add(t.size)
    mesh.loops.foreach_set("vertex_index", t.ravel())
    mesh.polygons.add(len(t))
    mesh.polygons.foreach_set("loop_start", np.arange(0, t.size, 3))
    mesh.update()
    scene.collection.objects.link(bpy.data.objects.new("Terrain", mesh))
    bv, bt = box((0, 0, 0))
    for i, (x, y, yaw) in enumerate(CARS):
        m = bpy.data.meshes.new(f"Car{i}")
        m.from_pydata(bv.tolist(), [], bt.tolist())
        o = bpy.data.objects.new(f"Car{i}", m)
        scene.collection.objects.link(o)
        z = float(terrain_height(np.array([x]), np.array([y]))[0]) + 0.75
        for f, dx in ((1, 0.0), (10, 12.0)):
            o.location = (x + dx * math.cos(yaw), y + dx * math.sin(yaw), z)
            o.rotation_euler = (0, 0, yaw)
            o.keyframe_insert("location", frame=f)
    cam = bpy.data.objects.new("Velodyne", bpy.data.cameras.new("Velodyne"))
    cam.location = tuple(sensor_origin())
    cam.rotation_euler = (math.pi / 2, 0, 0)
    scene.collection.objects.link(cam)
    scene.camera = cam
    tmp = Path(tempfile.mkdtemp(prefix="blensor-bench-"))

    def one_revolution():
        s = Scanner(cam, backend="native")
        r = s.scan(Packet("single", 1))[0]
        write_npz(r, tmp / "rev.npz")
        s.close()
        return len(r)

    one_revolution()  # warm-up (imports, first depsgraph evaluation)
    revs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        one_revolution()
        revs.append(time.perf_counter() - t0)
    sweep_times = []
    last = [time.perf_counter()]

    def progress(done, total, entry):
        now = time.perf_counter()
        if entry is not None:
            sweep_times.append(now - last[0])
        last[0] = now

    t0 = time.perf_counter()
    job = scan_range(cam, range(1, 11), tmp / "range", ("npz",), backend="native", progress=progress)
    total = time.perf_counter() - t0
    blensor_addon.unregister()  # bpy 4.2 crashes and 4.5 hangs at exit while classes are registered
    return statistics.median(revs), sweep_times, total, job.points


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), or the platform's processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def revolutions_rays(k=8):
    """``k`` HDL-64E revolutions from ``k`` origins 2 m above the terrain on a 40 m circle
    (k x 133,312 rays, each revolution's rays consecutive)."""
    o1, d1 = hdl64_rays()
    os_, ds = [], []
    for i in range(k):
        a = 2 * math.pi * i / k
        x, y = 40 * math.cos(a), 40 * math.sin(a)
        z = float(terrain_height(np.array([x]), np.array([y]))[0]) + 2.0
        os_.append(np.broadcast_to(np.array([x, y, z], np.float32), o1.shape))
        ds.append(d1)
    return np.concatenate(os_), np.concatenate(ds)


def thread_table(threads, rounds):
    """Mrays/s of the native library and of Embree (embreex, the rays split over as many
    Python threads) on the same rays, for each thread count: best of ``rounds`` rounds
    that call both in turn. Needs numpy, the built library and embreex, not bpy (docs/performance.md,
    "The kernel on many cores"). Yields (label, rays, threads, native, embree) row by row,
    so a run cut short still printed what it measured."""
    from blensor_addon.raycast.native import NativeBackend
    geom = geometry()
    emb = embree_scene(geom)
    embree_cast(emb, *hdl64_rays()[:2], 1.0)  # Embree builds lazily
    sets = {"HDL-64E, 1 revolution": (*hdl64_rays(), 120.0),
            "HDL-64E, 8 revolutions from 8 origins": (*revolutions_rays(8), 120.0),
            "random, 1M": (*random_rays(1_000_000), 1000.0),
            "random, 4M": (*random_rays(4_000_000), 1000.0)}
    for t in threads:
        nb = NativeBackend(threads=t)
        nb.set_geometry(geom)
        for label, (o, d, tmax) in sets.items():
            timed = interleaved({"native": lambda: nb.intersect(o, d, tmax),
                                 "embree": lambda: embree_cast(emb, o, d, tmax, threads=t)}, rounds)
            n = len(o)
            yield label, n, t, n / timed["native"][0] / 1e6, n / timed["embree"][0] / 1e6
        nb.close()


def morton_order(o) -> np.ndarray:
    """(N,) int64: the rays in Morton (Z-curve) order of their origins ``o`` (N, 3), 10 bits
    an axis over the origins' bounding box (stable)."""
    o = np.asarray(o, dtype=np.float64)
    lo, hi = o.min(0), o.max(0)
    q = ((o - lo) / np.maximum(hi - lo, 1e-9) * 1023).astype(np.uint64)

    def spread(x):  # bit i of x to bit 3 i
        x = (x | (x << np.uint64(16))) & np.uint64(0x030000FF)
        x = (x | (x << np.uint64(8))) & np.uint64(0x0300F00F)
        x = (x | (x << np.uint64(4))) & np.uint64(0x030C30C3)
        return (x | (x << np.uint64(2))) & np.uint64(0x09249249)
    key = spread(q[:, 0]) | (spread(q[:, 1]) << np.uint64(1)) | (spread(q[:, 2]) << np.uint64(2))
    return np.argsort(key, kind="stable")


def presorted_table(threads, rounds):
    """The serial share of a scattered cast: the 4M random rays cast as given
    (the library orders them by their origins' Morton code, then casts) and already in
    Morton order (cast as given), for each thread count; Mrays/s, best of ``rounds``.
    Returns [(threads, as given, pre-sorted)]."""
    from blensor_addon.raycast.native import NativeBackend
    geom = geometry()
    o, d = random_rays(4_000_000)
    order = morton_order(o)
    os_, ds = np.ascontiguousarray(o[order]), np.ascontiguousarray(d[order])
    rows = []
    for t in threads:
        nb = NativeBackend(threads=t)
        nb.set_geometry(geom)
        timed = interleaved({"given": lambda: nb.intersect(o, d, 1000.0),
                             "sorted": lambda: nb.intersect(os_, ds, 1000.0)}, rounds)
        rows.append((t, len(o) / timed["given"][0] / 1e6, len(o) / timed["sorted"][0] / 1e6))
        nb.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cast-rounds", type=int, default=15,
                    help="rounds of the static casts, each calling every backend once in turn")
    ap.add_argument("--skip-bvhtree", action="store_true")
    ap.add_argument("--threads", help="comma-separated thread counts (e.g. 1,2,4,8,16): only the table of "
                    "native vs Embree Mrays/s on four ray sets per thread count (no bpy needed)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of --threads (best of)")
    ap.add_argument("--presorted", action="store_true", help="with --threads: also the 4M random rays "
                    "cast already in Morton order (the serial share of the library's reordering)")
    args = ap.parse_args(argv)
    if args.threads:
        from blensor_addon.raycast import native
        counts = [int(v) for v in args.threads.split(",") if v.strip()]
        print(f"cpu: {cpu_model()}, {__import__('os').cpu_count()} logical cores; native kernel "
              f"{native.kernel()}; best of {args.rounds} interleaved rounds (Mrays/s)", flush=True)
        print(f"{'rays':<40} {'count':>9} {'threads':>7} {'native':>8} {'Embree':>8} {'native/Embree':>13}")
        for label, n, t, nat, em in thread_table(counts, args.rounds):
            print(f"{label:<40} {n:>9,} {t:>7} {nat:8.2f} {em:8.2f} {nat / em:13.2f}", flush=True)
        if args.presorted:
            print("random, 4M, native: as given (the library reorders) vs already in Morton order (Mrays/s)")
            for t, given, srt in presorted_table(counts, args.rounds):
                print(f"  threads {t:>2}: as given {given:7.2f}, pre-sorted {srt:7.2f}, x{srt / given:.2f}")
        return 0
    ntri, builds, rows = cast_benchmarks(args.repeat, args.skip_bvhtree, args.cast_rounds)
    print(f"scene: {ntri:,} triangles (terrain {GRID}x{GRID} vertices + 4 cars)")
    print("build (s): " + ", ".join(f"{k} {v:.3f}" for k, v in builds.items())
          + "  (Embree finishes its build lazily inside the first cast)")
    print()
    for label, n, res, agree, dmax in rows:
        print(f"{label}")
        print(f"  {'backend':<20} {'seconds':>9} {'Mrays/s':>9} {'x BVHTree':>10} {'x embreex':>10}")
        base = res.get("BVHTree fallback")
        emb = res["embreex 2 threads"]
        for name, secs in res.items():
            mr = n / secs / 1e6
            vs_b = f"{base / secs:10.1f}" if base else f"{'-':>10}"
            print(f"  {name:<20} {secs:9.4f} {mr:9.2f} {vs_b} {emb / secs:10.2f}")
        print(f"  native vs embreex: hit/miss agree on {agree * 100:.4f} % of rays, "
              f"max |dt| on common hits {dmax:.2e} m")
        print()
    print("moving instances (native, 2 threads, a time per ray): seconds and ratio to static")
    for label, res in timed_benchmarks(args.repeat):
        base = res["static"]
        print(f"  {label:<20} " + "  ".join(f"{k} {v:.4f} s (x{v / base:.2f})" for k, v in res.items()))
    print()
    rev, sweeps, total, points = end_to_end(args.repeat)
    print("end to end (HDL-64E S2, real bpy scene, native backend)")
    print(f"  one revolution: extract + build + cast + noise + npz   {rev:.3f} s (median of {args.repeat})")
    print(f"  10-frame range scan with moving cars: total {total:.3f} s, {points:,} points")
    print(f"    first sweep (builds every mesh BVH)                 {sweeps[0]:.3f} s")
    print(f"    later sweeps, meshes unchanged (median, max)        {statistics.median(sweeps[1:]):.3f} s, "
          f"{max(sweeps[1:]):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
