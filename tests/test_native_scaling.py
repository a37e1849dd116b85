"""The native library's cast of rays from scattered origins: every phase of the
reordering (cells of the origins, counting sort, cast in cell order, answers back in the
caller's order) runs on all of the cast's threads, and every ray's answer is the same bits
on any number of threads, in any order, with or without normals, as from casts of small
batches, which are cast in the caller's order. Also a C driver (tests/native_threads.c)
built with ThreadSanitizer and with AddressSanitizer + UndefinedBehaviorSanitizer."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from blensor_addon.raycast import MeshData, SceneGeometry
from blensor_addon.raycast.native import NativeBackend, available, load_library
from conftest import ROOT, native_build

pytestmark = pytest.mark.skipif(not available(), reason="native library not built")

FIELDS = ("t", "instance", "primitive", "normal", "uv")


def scene_and_rays(n, seed=24):
    """A moving and a static instance of 600 random triangles, and ``n`` rays from origins
    spread over a 16 m box (every 97th origin NaN, two far outliers, one infinite), with
    per-ray tmax and time."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(-5, 5, (600, 1, 3))
    verts = (c + rng.normal(0, 0.6, (600, 3, 3))).reshape(-1, 3)
    tris = np.arange(1800).reshape(-1, 3)
    end = np.eye(4)
    end[:3, 3] = (0.7, -0.4, 0.2)
    g = SceneGeometry([MeshData(verts, tris)], [0, 0], np.stack([np.eye(4), np.eye(4)]),
                      np.stack([np.eye(4), end]))
    o = rng.uniform(-8, 8, (n, 3))
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o[::97] = np.nan
    o[5] = (1e6, -3e5, 2.0)  # outside the sampled box: the border cells
    o[6] = (-1e30, 1e30, 0.0)
    o[7, 2] = np.inf
    tmax = rng.uniform(1.0, 20.0, n).astype(np.float32)
    time = rng.uniform(0.0, 1.0, n).astype(np.float32)
    return g, o, d, tmax, time


def small_batches(g, o, d, tmax, time, size=4000):
    """The answers of casts of ``size`` rays at a time (below the library's 16,384: cast
    in the caller's order) on one thread, concatenated."""
    be = NativeBackend(threads=1)
    be.set_geometry(g)
    parts = [be.intersect(o[i:i + size], d[i:i + size], tmax[i:i + size],
                          time=None if time is None else time[i:i + size]) for i in range(0, len(o), size)]
    be.close()
    return {k: np.concatenate([getattr(p, k) for p in parts]) for k in FIELDS}


def reordered_batches():
    lib = load_library()
    lib.brt_reordered_batches.restype = ctypes.c_int64
    return lib.brt_reordered_batches()


def test_scattered_rays_give_the_same_bits_on_1_2_3_and_7_threads():
    # 150,001 rays: three blocks of the counting sort, the last one short
    g, o, d, tmax, time = scene_and_rays(150_001)
    for kw in ({}, {"time": time}):
        ref = small_batches(g, o, d, tmax, kw.get("time"))
        hit = ref["instance"] >= 0
        assert 0.1 < hit.mean() < 0.95 and set(np.unique(ref["instance"][hit]).tolist()) == {0, 1}
        assert (ref["instance"][::97] == -1).all() and (ref["instance"][6:8] == -1).all()
        assert np.all(ref["t"][hit] < tmax[hit])
        for threads in (1, 2, 3, 7):
            be = NativeBackend(threads=threads)
            be.set_geometry(g)
            before = reordered_batches()
            h = be.intersect(o, d, tmax, **kw)
            assert reordered_batches() == before + 1  # the whole batch took the reordered path
            for name in FIELDS:
                assert np.array_equal(getattr(h, name), ref[name]), (threads, name, kw.keys())
            be.close()


def test_reordered_cast_without_normals_and_barycentrics_writes_only_what_is_asked():
    # the C API takes NULL normal and barycentric arrays and one tmax for all rays
    g, o, d, _, _ = scene_and_rays(40_000, seed=5)
    be = NativeBackend(threads=3)
    be.set_geometry(g)
    full = be.intersect(o, d, 7.5)
    lib = load_library()
    n = len(o)
    o32, d32 = np.ascontiguousarray(o, np.float32), np.ascontiguousarray(d, np.float32)
    t = np.empty(n, np.float32)
    inst = np.empty(n, np.int32)
    prim = np.empty(n, np.int32)
    f32p, i32p = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)
    for threads in (1, 2, 3, 7):
        t[:] = -5.0
        rc = lib.brt_intersect_timed(be._scene, o32.ctypes.data_as(f32p), d32.ctypes.data_as(f32p),
                                     None, None,
                                     7.5, n, threads, t.ctypes.data_as(f32p), inst.ctypes.data_as(i32p),
                                     prim.ctypes.data_as(i32p), None, None)
        assert rc == 0
        assert np.array_equal(t, full.t) and np.array_equal(inst, full.instance)
        assert np.array_equal(prim, full.primitive)
    assert np.isinf(full.t[full.instance < 0]).all() and (full.t[full.instance >= 0] <= 7.5).all()
    be.close()


def test_concurrent_reordered_casts_on_one_scene_each_get_their_own_answers():
    # two callers at once (ctypes lets go of the GIL): each cast takes its own scratch
    # memory; batches of different sizes, so a kept buffer is too small for the next one
    g, o, d, tmax, time = scene_and_rays(120_000, seed=9)
    be = NativeBackend(threads=2)
    be.set_geometry(g)
    sizes = (30_000, 120_000, 70_000, 20_000)
    refs = [be.intersect(o[:k], d[:k], tmax[:k], time=time[:k]) for k in sizes]
    with ThreadPoolExecutor(2) as ex:
        outs = list(ex.map(lambda k: be.intersect(o[:k], d[:k], tmax[:k], time=time[:k]), sizes * 3))
    for k, h in zip(sizes * 3, outs):
        ref = refs[sizes.index(k)]
        for name in FIELDS:
            assert np.array_equal(getattr(h, name), getattr(ref, name)), (k, name)
    be.close()


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_thread_driver_under_sanitizers(tmp_path, sanitizer):
    # tests/native_threads.c: 70,001 scattered rays on 1, 2, 3 and 7 threads (the same bits),
    # with and without normals and per-ray tmax, and two casts at once from two threads
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "native_threads"
    cmd = [cc, "-O1", "-g", "-std=c99", "-pthread", "-ffp-contract=off", f"-fsanitize={sanitizer}",
           "-fno-sanitize-recover=all", "-o", str(exe), str(ROOT / "tests" / "native_threads.c"),
           str(native_build.SRC), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    missing = ("cannot find", "-ltsan", "-lasan")
    if res.returncode != 0 and any(m in res.stderr for m in missing):
        pytest.skip(f"no {sanitizer} sanitizer runtime: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600,
                         env={"TSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1",
                              "UBSAN_OPTIONS": "halt_on_error=1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "WARNING" not in run.stderr and "ERROR" not in run.stderr, run.stderr
    assert int(run.stdout.split()[0]) > 3000
