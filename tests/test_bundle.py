"""Bundled sub-rays (for speed): the native library's bundle traversal
(``brt_intersect_bundled``, ``NativeBackend.intersect(..., bundle=S)``) gives the per-ray
kernel's answers bit for bit, on every kernel variant and under the sanitizers; a scan with
several sub-rays per beam gives the same bytes with bundling on and off, on both backends;
the scene layer's lazy labels and the returns' candidate order are those of before."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import libasan, native_build, native_env

#: Random scenes and bundles: a grid of quads (shared edges and vertices), a triangle soup
#: placed plain, translated, rotated and scaled, and moving; a second grid instance on top of
#: the first (exact ties between instances); bundles of 2, 3 and 7 rays from one origin within
#: cones of 0.5 to 50 mrad, per-ray limits, one time per bundle, some that are no bundle
#: (origins apart, a NaN time, a zero limit, directions across an axis plane) and a last
#: incomplete bundle. Prints "ok", the kernel, the rays cast and the rays recast alone.
SCRIPT = r'''
import sys
import numpy as np
from blensor_addon.raycast.base import MeshData, SceneGeometry
from blensor_addon.raycast.native import NativeBackend, load_library

lib = load_library()
rng = np.random.default_rng(22)
n = 12
g = np.linspace(-1.0, 1.0, n + 1)
gx, gy = np.meshgrid(g, g, indexing="ij")
gv = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)], axis=1)
q = (np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]).ravel()
gt = np.concatenate([np.stack([q, q + n + 1, q + 1], 1), np.stack([q + 1, q + n + 1, q + n + 2], 1)])
grid = MeshData(gv, gt)
sv = rng.uniform(-1.0, 1.0, (600, 3))
soup = MeshData(sv, np.arange(600).reshape(-1, 3))
eye = np.eye(4)
def xf(t=(0, 0, 0), ang=0.0, s=1.0):
    m = np.eye(4)
    c, si = np.cos(ang), np.sin(ang)
    m[:3, :3] = np.array([[c, -si, 0], [si, c, 0], [0, 0, 1]]) * s
    m[:3, 3] = t
    return m
mats = np.stack([eye, eye, xf((0, 0, 1.5)), xf((2, 0, 0), 0.7, 0.8), xf((0, 2, 0.5)), xf((-2, 0, 0.2))])
end = mats.copy()
end[5] = xf((-1.6, 0.3, 0.4), 0.5, 1.1)  # the last soup moves within the step
geo = SceneGeometry([grid, soup], np.array([0, 0, 1, 1, 1, 1]), mats, end)
total = recast = 0
for threads in (1, 2):
    be = NativeBackend(threads=threads)
    be.set_geometry(geo)
    for S in (2, 3, 7):
        B = 1500
        o = rng.uniform(-3.0, 3.0, (B, 3)) + np.array([0, 0, 3.0])
        aim = rng.uniform(-1.2, 1.2, (B, 3)) * np.array([1, 1, 0.3])
        aim[::5] = gv[rng.integers(0, gv.shape[0], aim[::5].shape[0])]  # grid vertices
        d0 = aim - o
        d0 /= np.linalg.norm(d0, axis=1)[:, None]
        d0[7::50] = [0.0, 0.0, -1.0]  # straight down: zero components
        spread = rng.choice([5e-4, 2e-3, 5e-2], B)[:, None, None]
        d = d0[:, None, :] + spread * rng.normal(size=(B, S, 3))
        d[7::50] = d0[7::50][:, None, :]
        d[9::50, :, 0] = np.linspace(-1e-3, 1e-3, S)  # signs part across the bundle
        d /= np.linalg.norm(d, axis=2)[:, :, None]
        org = np.repeat(o, S, axis=0)
        org[3::97] += 1e-3  # origins apart: no bundle
        dirs = d.reshape(-1, 3)
        tmax = rng.uniform(2.0, 12.0, B * S).astype(np.float32)
        tmax[11::89] = 0.0
        tmax[::13] = 1e30
        time = np.repeat(rng.uniform(0.0, 1.0, B), S).astype(np.float32)
        time[5 * S:6 * S] = np.nan
        m = B * S - 1  # the last bundle incomplete
        org, dirs, tmax, time = org[:m], dirs[:m], tmax[:m], time[:m]
        before = lib.brt_bundle_recasts()
        a = be.intersect(org, dirs, tmax, time=time)
        b = be.intersect(org, dirs, tmax, time=time, bundle=S)
        recast += lib.brt_bundle_recasts() - before
        total += m
        for f in ("t", "instance", "primitive", "normal", "uv"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (threads, S, f)
        assert set(np.unique(a.instance).tolist()) >= {-1, 0, 1, 2, 3, 4, 5}, np.unique(a.instance)
        # the scalar limit too
        c = be.intersect(org, dirs, 8.0, time=time, bundle=S)
        e = be.intersect(org, dirs, 8.0, time=time)
        assert c.t.tobytes() == e.t.tobytes() and c.primitive.tobytes() == e.primitive.tobytes()
    be.close()
print("ok", lib.brt_kernel().decode(), total, recast)
'''


def run_script(lib=None, *, no_avx=False, preload=None) -> list:
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=native_env(lib, no_avx=no_avx, preload=preload), timeout=600)
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stdout + res.stderr
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr
    return res.stdout.split()


def cpu_kernel() -> str:
    flags = open("/proc/cpuinfo").read().split() if sys.platform.startswith("linux") else []
    return "avx" if "avx" in flags else "sse2"


@pytest.mark.parametrize("no_avx", [False, True])
def test_bundles_give_the_per_ray_answers(no_avx):
    """Every bundle size, thread count 1 and 2, both SIMD kernels: the same bytes as ray by
    ray; the grid instance twice at one place makes exact ties, which are recast alone (a
    few percent of the rays, not all: the rest went through the bundle traversal)."""
    _, kernel, total, recast = run_script(no_avx=no_avx)
    assert kernel == ("sse2" if no_avx else cpu_kernel())
    assert 0 < int(recast) < 0.5 * int(total), (recast, total)


def test_bundles_on_the_portable_kernel(tmp_path):
    """The portable C kernel has no bundle traversal: bundle=S casts ray by ray (no recasts)."""
    lib = native_build.build(tmp_path / "portable", portable=True)
    _, kernel, _, recast = run_script(lib)
    assert kernel == "portable" and recast == "0"


def test_bundles_under_sanitizers(tmp_path):
    asan = libasan()
    if asan is None:
        pytest.skip("gcc's libasan is not installed")
    lib = native_build.build(tmp_path / "asan", sanitize=True)
    _, kernel, total, recast = run_script(lib, preload=asan)
    assert kernel == cpu_kernel() and 0 < int(recast) < int(total)


def test_bundle_argument_checked():
    from blensor_addon.raycast.base import MeshData, SceneGeometry
    from blensor_addon.raycast.native import NativeBackend
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([MeshData(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]]), [[0, 1, 2]])],
                                  [0], np.eye(4)[None]))
    o = np.zeros((4, 3))
    d = np.tile([0.2, 0.2, 1.0], (4, 1)) / np.linalg.norm([0.2, 0.2, 1.0])
    o[:, 2] = -1.0
    assert (be.intersect(o, d, 10.0, bundle=4).instance == 0).all()
    assert (be.intersect(o, d, 10.0, bundle=100).instance == 0).all()  # above 64: ray by ray
    assert (be.intersect(o, d, 10.0, bundle=0).instance == 0).all()  # below 1: as 1
    # the library itself refuses a bundle below 1
    out = [np.empty(4, np.float32), np.empty(4, np.int32), np.empty(4, np.int32)]
    f32 = np.ascontiguousarray(o, np.float32), np.ascontiguousarray(d, np.float32)
    import ctypes
    p = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in f32]
    rc = be._lib.brt_intersect_bundled(be._scene, p[0], p[1], None, None, 10.0, 4, 0, 1,
                                       out[0].ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                       out[1].ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                       out[2].ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), None, None)
    assert rc == -1
    be.close()


def test_merge_extra_is_the_lexsort():
    """form_returns' candidate order with glass path ends (issue 22, section 2: the merge
    that replaced a lexsort of every candidate): beam, then range, then row, ties included."""
    from blensor_addon.core.sensors.beam import _merge_extra
    rng = np.random.default_rng(5)
    for S in (1, 3, 7):
        nb = 400
        R = nb * S
        E = 300
        rr = rng.choice([1.0, 2.0, 2.5, 3.0, 7.25], R + E)  # many equal ranges
        ok = rng.random(R + E) < 0.7
        ray = np.concatenate([np.arange(R), rng.integers(0, R, E)])
        beam = np.repeat(np.arange(nb), S)
        rows = np.flatnonzero(ok)
        want = rows[np.lexsort((rr[rows], beam[ray[rows]]))]
        assert np.array_equal(_merge_extra(rr, ok, ray, beam, S, R), want)
    ok[R:] = False
    rows = np.flatnonzero(ok)
    assert np.array_equal(_merge_extra(rr, ok, ray, beam, S, R), rows[np.lexsort((rr[rows], beam[ray[rows]]))])
    # extra rows in ray order (as the cast gives them), sorted or not within a beam, with
    # equal ranges: the sorted case skips the lexsort (issue 22, section 2: speed)
    for shuffle in (False, True):
        ray = np.concatenate([np.arange(R), np.sort(rng.integers(0, R, E))])
        rr = rng.choice([1.0, 2.0, 2.5, 3.0, 7.25], R + E)
        if not shuffle:  # each beam's extra ranges ascending
            eb = beam[ray[R:]]
            rr[R:] = rr[R:][np.lexsort((rr[R:], eb))]
        ok = rng.random(R + E) < 0.7
        rows = np.flatnonzero(ok)
        want = rows[np.lexsort((rr[rows], beam[ray[rows]]))]
        assert np.array_equal(_merge_extra(rr, ok, ray, beam, S, R), want)


def test_order_by_beam_range_is_the_lexsort():
    """The extra rows' order in form_returns (issue 22, section 2: one argsort of a
    combined key instead of a lexsort): the lexsort's, with ties (equal pairs, ranges
    1 ulp apart that the key merges: then the lexsort itself) and without."""
    from blensor_addon.core.sensors.beam import _order_by_beam_range
    rng = np.random.default_rng(11)
    for E, ties in ((5000, False), (5000, True), (1, False), (0, False)):
        eb = np.sort(rng.integers(0, 400, E))
        er = rng.random(E) * 120.0
        if ties:
            er[::7] = 2.5
            er[1::11] = np.nextafter(er[2::11][: er[1::11].size], np.inf)
        got = _order_by_beam_range(eb, er)
        assert np.array_equal(got, np.lexsort((er, eb))), (E, ties)
    eb = rng.integers(0, 50, 3000)  # beams in any order
    er = rng.random(3000)
    assert np.array_equal(_order_by_beam_range(eb, er), np.lexsort((er, eb)))


def test_beam_axes_are_numpys_cross_and_norm():
    """beam_axes writes np.cross and np.linalg.norm out (issue 22, section 2: speed): the
    same bytes as they give, for random beams, vertical ones (the fallback axis), signed
    zeros and float32-rounded directions."""
    from blensor_addon.core.sensors.beam import _VERTICAL, UP, _norm3, beam_axes
    rng = np.random.default_rng(3)
    d = rng.normal(size=(20000, 3))
    d[::50] = (0.0, 1.0, 0.0)
    d[1::50] = (0.0, -1.0, -0.0)
    d[2::77, 0] = -0.0
    d[3::91] = d[3::91].astype(np.float32)
    assert _norm3(d).tobytes() == np.linalg.norm(d, axis=1).tobytes()
    d /= np.linalg.norm(d, axis=1)[:, None]
    h = np.cross(UP, d)
    norm = np.linalg.norm(h, axis=1)
    flat = norm < _VERTICAL
    h[flat] = (1.0, 0.0, 0.0)
    norm[flat] = 1.0
    h /= norm[:, None]
    v = np.cross(d, h)
    v /= np.linalg.norm(v, axis=1)[:, None]
    got = beam_axes(d)
    assert flat.sum() >= 400 and got[0].tobytes() == h.tobytes() and got[1].tobytes() == v.tobytes()


def _scan_arrays(result) -> dict:
    out = {}
    for k, v in vars(result).items():
        if isinstance(v, np.ndarray):
            out[k] = v
        elif isinstance(v, dict):
            out.update({f"{k}.{k2}": v2 for k2, v2 in v.items() if isinstance(v2, np.ndarray)})
    return out


@pytest.mark.parametrize("backend,angle,focus", [("native", 360.0, 0.0), ("bvhtree", 20.0, 0.0),
                                                 ("native", 20.0, 5.0)])
def test_scan_same_with_and_without_bundles(crossing, monkeypatch, backend, angle, focus):
    """The demo's HDL-64E with 7 sub-rays per beam (glass in the scene: split paths): the
    same bytes when the scene layer is told that the sub-rays come in bundles (native
    traversal, pose per beam, the lasers' origins rotated once per beam, lazy labels) as
    when it is not (every array of the result). With a focus distance the sub-rays'
    origins differ: rotated row by row."""
    import bpy

    import blensor_addon
    from blensor_addon.scene.context import TimelineContext
    cam = bpy.data.objects["Velodyne"]
    cam.data.blensor.end_angle = angle
    kw = dict(frame=12, backend=backend, samples_per_beam=7, beam_divergence=0.002, returns="dual",
              focus_distance=focus)
    on = _scan_arrays(blensor_addon.scan(cam, **kw))
    cast = TimelineContext.cast

    def unbundled(self, *a, **k):
        k["bundle"] = 1
        return cast(self, *a, **k)
    monkeypatch.setattr(TimelineContext, "cast", unbundled)
    off = _scan_arrays(blensor_addon.scan(cam, **kw))
    assert on.keys() == off.keys() and len(on["range"]) > (100000 if angle == 360.0 else 1000)
    for k in on:
        assert on[k].dtype == off[k].dtype and on[k].tobytes() == off[k].tobytes(), k
