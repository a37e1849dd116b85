"""Native library vs an independent brute-force ray caster (numpy, float64), watertightness,
instancing, threads. No Blender needed."""
from __future__ import annotations

import numpy as np
import pytest

from blensor_addon.raycast import MeshData, SceneGeometry, get_backend, trace
from blensor_addon.raycast.native import NativeBackend, available
from conftest import native_build, random_cast

pytestmark = pytest.mark.skipif(not available(), reason="native library not built")


def brute_force(verts, tris, o, d):
    """Moller-Trumbore over every triangle, float64: (t, tri) of the closest hit, inf/-1."""
    v0, v1, v2 = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    e1, e2 = v1 - v0, v2 - v0
    t_best = np.full(len(o), np.inf)
    i_best = np.full(len(o), -1)
    for k in range(0, len(o), 256):
        oo, dd = o[k:k + 256, None, :], d[k:k + 256, None, :]
        p = np.cross(dd, e2[None])
        det = (e1[None] * p).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / det
            s = oo - v0[None]
            u = (s * p).sum(-1) * inv
            q = np.cross(s, e1[None])
            v = (dd * q).sum(-1) * inv
            t = (e2[None] * q).sum(-1) * inv
        ok = (np.abs(det) > 1e-12) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 1e-9)
        t = np.where(ok, t, np.inf)
        j = t.argmin(1)
        t_best[k:k + 256] = t[np.arange(len(j)), j]
        i_best[k:k + 256] = np.where(np.isfinite(t_best[k:k + 256]), j, -1)
    return t_best, i_best


def random_scene(rng, n_tris=400):
    c = rng.uniform(-5, 5, (n_tris, 1, 3))
    verts = (c + rng.normal(0, 0.6, (n_tris, 3, 3))).reshape(-1, 3)
    tris = np.arange(n_tris * 3).reshape(-1, 3)
    return verts, tris


def random_rays(rng, n):
    o = rng.uniform(-8, 8, (n, 3))
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return o, d


def test_matches_brute_force_on_random_triangles():
    rng = np.random.default_rng(0)
    verts, tris = random_scene(rng, 1500)
    o, d = random_rays(rng, 4000)
    b = NativeBackend(threads=2)
    b.set_geometry(SceneGeometry([MeshData(verts, tris)], [0], np.eye(4)[None]))
    h = b.intersect(o, d, 1e30)
    t_ref, i_ref = brute_force(verts, tris, o, d)
    # rays may differ only where two triangles are hit at (almost) the same distance
    agree = (h.primitive == i_ref) | np.isclose(h.t, t_ref, rtol=0, atol=1e-5)
    assert agree.mean() >= 0.9999
    hit = i_ref >= 0
    assert hit.sum() > 1000
    np.testing.assert_allclose(h.t[hit], t_ref[hit], atol=2e-5)
    # hit point from barycentrics equals the point along the ray
    tri = verts[tris[h.primitive[hit]]]
    b1, b2 = h.uv[hit, 0:1], h.uv[hit, 1:2]
    p = (1 - b1 - b2) * tri[:, 0] + b1 * tri[:, 1] + b2 * tri[:, 2]
    np.testing.assert_allclose(p, o[hit] + d[hit] * h.t[hit, None], atol=1e-4)
    # geometric normal is the winding normal
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    np.testing.assert_allclose(h.normal[hit], n, atol=1e-4)


def test_watertight_on_shared_edges_and_vertices():
    # a 20 x 20 grid of quads (two triangles each) at z = 0; aim exactly at vertices and
    # edge midpoints, where a non-watertight test lets rays slip through
    n = 20
    xs = np.arange(n + 1, dtype=np.float64)
    gx, gy = np.meshgrid(xs, xs, indexing="ij")
    verts = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)], 1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b_, c, d_ = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    tris = np.concatenate([np.stack([a, b_, c], 1), np.stack([a, c, d_], 1)])
    inner = verts[(verts[:, 0] > 0) & (verts[:, 0] < n) & (verts[:, 1] > 0) & (verts[:, 1] < n)]
    targets = np.concatenate([inner, inner + [0.5, 0, 0], inner + [0, 0.5, 0], inner - [0.5, 0.5, 0]])
    rng = np.random.default_rng(1)
    origins = targets + np.concatenate([rng.uniform(-3, 3, (len(targets), 2)),
                                        rng.uniform(2, 9, (len(targets), 1))], 1)
    dirs = targets - origins
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([MeshData(verts, tris)], [0], np.eye(4)[None]))
    h = be.intersect(origins, dirs, 100.0)
    assert (h.instance < 0).sum() == 0, "rays slipped through shared edges"


def test_instances_transforms_and_blas_reuse():
    rng = np.random.default_rng(2)
    verts, tris = random_scene(rng, 200)
    mats = []
    for k in range(5):
        M = np.eye(4)
        a = 0.4 * k
        M[:3, :3] = [[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]]
        M[:3, :3] *= 1.0 + 0.1 * k
        M[:3, 3] = [12.0 * k, 0.0, 0.0]
        mats.append(M)
    # a translation only: the library reuses the world ray's setup (the direction is kept)
    mats.append(np.eye(4))
    mats[-1][:3, 3] = [60.0, 0.5, -0.25]
    be = NativeBackend(threads=2)
    geom = SceneGeometry([MeshData(verts, tris)], np.zeros(len(mats), np.int32), np.array(mats))
    be.set_geometry(geom)
    o, d = random_rays(rng, 3000)
    o[:, 0] = rng.uniform(-10, 70, len(o))
    h = be.intersect(o, d, 1e30)
    # reference: flatten instances into world space
    wv = np.concatenate([verts @ M[:3, :3].T + M[:3, 3] for M in mats])
    wt = np.concatenate([tris + k * len(verts) for k in range(len(mats))])
    t_ref, i_ref = brute_force(wv, wt, o, d)
    hit = i_ref >= 0
    assert hit.sum() > 500 and (i_ref[hit] // len(tris) == 5).sum() > 50
    assert np.array_equal(h.instance >= 0, hit)
    np.testing.assert_allclose(h.t[hit], t_ref[hit], rtol=1e-5, atol=1e-4)
    assert np.array_equal(h.instance[hit], i_ref[hit] // len(tris))
    assert np.array_equal(h.primitive[hit], i_ref[hit] % len(tris))
    # moving instances only rebuilds the top level, also when the transforms were
    # changed in place and the same geometry object is passed again
    builds, tops = be.blas_builds, be.scene_builds
    geom.instance_matrix[:, 2, 3] += 1.0
    be.set_geometry(geom)
    assert be.blas_builds == builds and be.scene_builds == tops + 1
    h2 = be.intersect(o, d, 1e30)
    moved = (h2.instance >= 0) & hit & (h.instance == h2.instance)
    assert moved.sum() > 100 and not np.array_equal(h2.t[moved], h.t[moved])
    be.set_geometry(SceneGeometry(geom.meshes, geom.instance_mesh.copy(), geom.instance_matrix.copy()))
    assert be.scene_builds == tops + 1  # the same content: the top level is kept


def test_threads_give_identical_answers_and_tmax_is_respected():
    rng = np.random.default_rng(3)
    verts, tris = random_scene(rng, 300)
    g = SceneGeometry([MeshData(verts, tris)], [0], np.eye(4)[None])
    o, d = random_rays(rng, 20000)
    a, b = NativeBackend(threads=1), NativeBackend(threads=2)
    a.set_geometry(g)
    b.set_geometry(g)
    ha, hb = a.intersect(o, d, 1e30), b.intersect(o, d, 1e30)
    assert np.array_equal(ha.t, hb.t) and np.array_equal(ha.primitive, hb.primitive)
    hc = a.intersect(o, d, np.full(len(o), 3.0, np.float32))
    assert np.all(hc.t[hc.instance >= 0] < 3.0)
    assert np.array_equal(hc.instance >= 0, (ha.instance >= 0) & (ha.t < 3.0))


def test_mirror_trace_accumulates_path():
    # mirror plane x = 2 (normal -x), wall plane y = 5; a ray along +x reflects back along -x
    # ... tilted 45 deg: from origin toward (1,1,0)/sqrt2 hits the mirror at (2,2), reflects to
    # (-1, 1)/sqrt2 and hits the wall y = 5 at (-1, 5): path = 2 sqrt2 + 3 sqrt2
    mirror = MeshData(np.array([[2, -10, -10], [2, 10, -10], [2, 10, 10], [2, -10, 10]], float),
                      np.array([[0, 2, 1], [0, 3, 2]]))
    wall = MeshData(np.array([[-10, 5, -10], [10, 5, -10], [10, 5, 10], [-10, 5, 10]], float),
                    np.array([[0, 1, 2], [0, 2, 3]]))
    g = SceneGeometry([mirror, wall], [0, 1], np.stack([np.eye(4)] * 2))
    be = get_backend("native")
    be.set_geometry(g)
    d = np.array([[1.0, 1.0, 0.0]]) / np.sqrt(2)
    tr = trace(be, np.zeros((1, 3)), d, 100.0, lambda inst, prim: inst == 0, max_bounces=8)
    assert tr.hit[0] and tr.instance[0] == 1 and tr.bounces[0] == 1
    assert tr.range[0] == pytest.approx(5 * np.sqrt(2), abs=1e-4)
    no = trace(be, np.zeros((1, 3)), d, 100.0, lambda inst, prim: inst == 0, max_bounces=0)
    assert not no.hit[0]
    short = trace(be, np.zeros((1, 3)), d, 5.0, lambda inst, prim: inst == 0, max_bounces=8)
    assert not short.hit[0]  # the accumulated path is longer than max_range


def test_empty_meshes_and_scenes():
    empty = MeshData(np.zeros((3, 3)), np.zeros((0, 3), np.int32))
    one = MeshData(np.array([[0, 0, -1], [1, 0, -1], [0, 1, -1]], float), np.array([[0, 1, 2]]))
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([empty, one], [1], np.eye(4)[None]))  # unused empty mesh
    h = be.intersect(np.array([[0.2, 0.2, 0.0]]), np.array([[0.0, 0.0, -1.0]]), 10.0)
    assert h.instance[0] == 0 and h.t[0] == pytest.approx(1.0)
    be.set_geometry(SceneGeometry([empty], [0], np.eye(4)[None]))  # only an empty instance
    assert be.intersect(np.zeros((1, 3)), np.array([[0.0, 0.0, -1.0]]), 10.0).instance[0] == -1
    be.set_geometry(SceneGeometry([], np.zeros(0, np.int32), np.zeros((0, 4, 4))))  # nothing at all
    assert be.intersect(np.zeros((2, 3)), np.array([[0.0, 0.0, -1.0]] * 2), 10.0).t.tolist() == [np.inf] * 2


def test_avx_sse_and_portable_kernels_agree(tmp_path):
    # the library carries an AVX copy of the traversal chosen at run time over the SSE2
    # one, and builds without SIMD on other CPUs (arm64): all three give the same answers
    portable = native_build.build(tmp_path / "portable", portable=True)
    variants = {"default": {}, "sse": {"BLENSOR_RT_NO_AVX": "1"}, "portable": {"BLENSOR_NATIVE_LIB": str(portable)}}
    out = {name: random_cast(tmp_path / f"{name}.npz", **extra) for name, extra in variants.items()}
    # each variant ran the kernel it names (the default one: AVX where the CPU has it)
    has_avx = "avx" in open("/proc/cpuinfo").read().split()
    assert [str(out[k]["k"]) for k in variants] == ["avx" if has_avx else "sse2", "sse2", "portable"]
    assert (out["default"]["p"] >= 0).sum() > 5000
    for name in ("sse", "portable"):
        for k in ("t", "p", "n", "uv"):
            assert np.array_equal(out["default"][k], out[name][k]), (name, k)


def test_singular_instance_transform_is_never_hit():
    # animations hide objects by scaling them to zero: the scene must still build
    tri = MeshData(np.array([[-5, -5, -1], [5, -5, -1], [0, 5, -1]], float), np.array([[0, 1, 2]]))
    flat = np.eye(4)
    flat[:3, :3] = 0.0
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([tri], [0, 0], np.stack([flat, np.eye(4)])))
    h = be.intersect(np.zeros((1, 3)), np.array([[0.0, 0.0, -1.0]]), 10.0)
    assert h.instance[0] == 1 and h.t[0] == pytest.approx(1.0)


def test_scattered_origins_reordered_in_the_library_give_the_answers_of_small_batches():
    # batches of >= 16384 rays from scattered origins are cast in Morton order of their
    # origins' cells inside the library (copied in that order, answers read back through
    # each ray's row; tests/test_native_scaling.py: on any number of threads); batches
    # below that are cast as given: every output must be the same bits either way,
    # with per-ray tmax, per-ray times of a moving instance, and non-finite origins
    rng = np.random.default_rng(11)
    verts, tris = random_scene(rng, 500)
    end = np.eye(4)
    end[:3, 3] = (0.7, -0.4, 0.2)
    g = SceneGeometry([MeshData(verts, tris)], [0, 0], np.stack([np.eye(4), np.eye(4)]),
                      np.stack([np.eye(4), end]))
    o, d = random_rays(rng, 40_000)
    o[::97] = np.nan
    tmax = rng.uniform(1.0, 20.0, len(o)).astype(np.float32)
    time = rng.uniform(0.0, 1.0, len(o)).astype(np.float32)
    import ctypes

    from blensor_addon.raycast.native import load_library
    lib = load_library()
    lib.brt_reordered_batches.restype = ctypes.c_int64
    for threads in (1, 2):
        be = NativeBackend(threads=threads)
        be.set_geometry(g)
        for kw in ({}, {"time": time}):
            before = lib.brt_reordered_batches()
            whole = be.intersect(o, d, tmax, **kw)
            assert lib.brt_reordered_batches() == before + 1  # this batch took the reordered path
            parts = [be.intersect(o[i:i + 4000], d[i:i + 4000], tmax[i:i + 4000],
                                  **({"time": time[i:i + 4000]} if kw else {})) for i in range(0, len(o), 4000)]
            assert lib.brt_reordered_batches() == before + 1  # the small batches did not
            for name in ("t", "instance", "primitive", "normal", "uv"):
                assert np.array_equal(getattr(whole, name), np.concatenate([getattr(p, name) for p in parts])), name
            hit = whole.instance >= 0
            assert 0.1 < hit.mean() < 0.95 and set(np.unique(whole.instance[hit]).tolist()) == {0, 1}
            assert (whole.instance[::97] == -1).all() and np.all(whole.t[hit] < tmax[hit])
        be.close()


def test_bad_indices_and_huge_transforms_are_refused_not_converted():
    # int64 indices above 2^31 used to wrap (2^32 became 0), float indices were
    # truncated (1.7 became 1), and an end transform near float32's maximum made the
    # instance miss: each is refused, naming the array and the allowed range
    v = np.array([[-5, -5, -1], [5, -5, -1], [0, 5, -1]], float)
    for bad in (np.array([[0, 1, 2 ** 32]]), np.array([[0, 1, 1.7]]), np.array([[0, 1, -1]]),
                np.array([[0, 1, np.nan]])):
        with pytest.raises(ValueError, match=r"triangles must be integers within 0\.\.2147483647"):
            MeshData(v, bad)
    tri = MeshData(v, np.array([[0, 1, 2.0]]))  # integral floats are exact: taken
    assert tri.triangles.dtype == np.int32 and tri.triangles.tolist() == [[0, 1, 2]]
    for bad in ([2 ** 32], [0.5]):
        with pytest.raises(ValueError, match="instance_mesh must be integers"):
            SceneGeometry([tri], np.array(bad), np.eye(4)[None])
    be = NativeBackend(threads=1)
    for name in ("instance_matrix", "instance_matrix_end"):
        huge = np.eye(4)
        huge[0, 3] = 3e38
        kw = {"instance_matrix": huge[None]} if name == "instance_matrix" else \
            {"instance_matrix": np.eye(4)[None], "instance_matrix_end": huge[None]}
        with pytest.raises(ValueError, match=rf"{name} entries must be within \+-1e\+30.*3e\+38 at "
                                             "instance 0"):
            be.set_geometry(SceneGeometry([tri], [0], **kw))
    # at the limit the instance is hit at both ends of its motion
    end = np.eye(4)
    end[0, 3] = 1e30
    be.set_geometry(SceneGeometry([tri], [0], np.eye(4)[None], end[None]))
    h = be.intersect(np.zeros((2, 3)), np.array([[0.0, 0.0, -1.0]] * 2), 10.0, time=np.array([0.0, 1e-35]))
    assert h.instance.tolist() == [0, 0] and h.t.tolist() == [1.0, 1.0]
    # non-finite entries keep their meaning: that instance is not hit, the scene builds
    end[0, 3] = np.nan
    be.set_geometry(SceneGeometry([tri], [0, 0], np.stack([np.eye(4)] * 2), np.stack([end, np.eye(4)])))
    assert be.intersect(np.zeros((1, 3)), np.array([[0.0, 0.0, -1.0]]), 10.0).instance[0] in (0, 1)
    be.close()


def test_mesh_arrays_of_the_wrong_shape_or_dtype_are_refused_naming_the_argument():
    # a (4, 3) triangle array given as (3, 4) and (2, 3) vertices given as (3, 2) were
    # reshaped to (-1, 3) without a word (other triangles, other vertices); float indices
    # with inf raised IndexError while the message was built
    import re

    from blensor_addon.core.errors import SettingsError
    from blensor_addon.raycast.native import _NativeMesh, load_library
    v = np.array([[0, 0, -1], [1, 0, -1], [0, 1, -1], [1, 1, -1]], float)
    t = np.array([[0, 1, 2], [1, 3, 2], [0, 2, 1], [1, 2, 3]])
    shape = r"triangles must be a \(T, 3\) array of vertex indices \(integers within 0\.\.2147483647\), got "
    for bad, got in ((t.T, "'shape (3, 4), dtype int64'"), (t.ravel(), "'shape (12,), dtype int64'"),
                     (t[None], "'shape (1, 4, 3), dtype int64'"), (t[:, :2], "'shape (4, 2), dtype int64'")):
        with pytest.raises(SettingsError) as exc:
            MeshData(v, bad)
        assert re.fullmatch(shape + re.escape(got), str(exc.value)), str(exc.value)
    for bad, got in ((v[:2].T, "'shape (3, 2), dtype float64'"), (v.ravel(), "'shape (12,), dtype float64'"),
                     (v.astype(complex), "'shape (4, 3), dtype complex128'"),
                     (v.astype(bool), "'shape (4, 3), dtype bool'"),
                     (v.astype("U4"), "'shape (4, 3), dtype <U4'")):
        with pytest.raises(SettingsError) as exc:
            MeshData(bad, t[:1])
        assert str(exc.value) == ("vertices must be a (V, 3) array of real numbers (m, stored as float32), "
                                  f"got {got}"), str(exc.value)
    for x in (np.inf, -np.inf, np.nan, 1.5):
        with pytest.raises(SettingsError) as exc:
            MeshData(v, np.array([[0, 1, x]]))
        assert str(exc.value) == f"triangles must be integers within 0..2147483647 (or integral floats), " \
                                 f"got {x!r}", str(exc.value)
    for bad in (t.astype(bool), t.astype(complex), t.astype(str)):
        with pytest.raises(SettingsError) as exc:
            MeshData(v, bad)
        assert str(exc.value) == "triangles must be integers within 0..2147483647 (or integral floats), " \
                                 f"got 'dtype {bad.dtype}'", str(exc.value)
    # an index past the vertices (the library refused it without naming it; the BVHTree
    # backend would have taken the next mesh's vertices)
    with pytest.raises(SettingsError) as exc:
        MeshData(v, np.array([[0, 1, 4]]))
    assert str(exc.value) == "triangles must be vertex indices within 0..3 (the mesh has 4 vertices), got " \
                             "'values in 0..4'", str(exc.value)
    # the wrapper itself, given the arrays directly, refuses the same shapes
    for verts, tris in ((v, t.T), (v[:2].T, t[:1]), (v, np.array([[0, 1, np.inf]]))):
        with pytest.raises(SettingsError):
            _NativeMesh(load_library(), verts, tris)
    # what stays accepted: (V, 3) and (T, 3) of any real/integer dtype, integral floats, empties
    m = MeshData(v.astype(np.float32), t.astype(np.float64))
    assert m.triangles.dtype == np.int32 and m.triangles.tolist() == t.tolist()
    assert MeshData(v.astype(np.int16), t.astype(np.uint8)).vertices.dtype == np.float32
    assert MeshData(np.zeros((0, 3)), np.zeros((0, 3), np.int32)).triangles.shape == (0, 3)


def test_the_typed_library_seam_agrees_with_the_c_header_and_the_ctypes_declarations():
    # raycast/native.py calls the library through native._Api (Python-side types, read by
    # mypy) after _declare gave ctypes each function's argtypes/restype: the three must
    # say the same as native_patch/src/blensor_rt.h, or a 64-bit count goes out as a C int,
    # a float64 buffer is read as float32, and mypy checks the calls against a fiction
    import ctypes
    import inspect
    import re

    from blensor_addon.raycast import native
    from conftest import ROOT
    header = (ROOT / "native_patch" / "src" / "blensor_rt.h").read_text()
    protos = {m[2]: (m[1].strip(), m[3]) for m in re.finditer(r"BRT_API\s+([\w\s\*]+?)\s*\b(\w+)\(([^)]*)\);",
                                                              re.sub(r"/\*.*?\*/", "", header, flags=re.S))}
    vp = ctypes.c_void_p
    c_of = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double,
            "const char*": ctypes.c_char_p, "void": None, "const float*": ctypes.POINTER(ctypes.c_float),
            "float*": ctypes.POINTER(ctypes.c_float), "const double*": ctypes.POINTER(ctypes.c_double),
            "const int32_t*": ctypes.POINTER(ctypes.c_int32), "int32_t*": ctypes.POINTER(ctypes.c_int32),
            "const uint8_t*": ctypes.POINTER(ctypes.c_uint8), "brt_mesh*": vp, "const brt_scene*": vp,
            "brt_scene*": vp, "brt_mesh**": ctypes.POINTER(vp), "brt_scene**": ctypes.POINTER(vp),
            "brt_mesh*const*": ctypes.POINTER(vp)}
    # the Python-side annotations of _Api and the ctypes argument each stands for
    py_of = {"_F32P": ctypes.POINTER(ctypes.c_float), "_F32P | None": ctypes.POINTER(ctypes.c_float),
             "_F64P | None": ctypes.POINTER(ctypes.c_double), "_I32P": ctypes.POINTER(ctypes.c_int32),
             "_U8P | None": ctypes.POINTER(ctypes.c_uint8), "bytes | None": ctypes.c_char_p,
             "ctypes.c_void_p": vp, "ctypes._CArgObject": ctypes.POINTER(vp),
             "ctypes.Array[ctypes.c_void_p]": ctypes.POINTER(vp), "float": ctypes.c_float}
    returns = {"int": (ctypes.c_int, ctypes.c_int64), "None": (None,), "bytes": (ctypes.c_char_p,)}

    def c_type(decl: str) -> object:
        decl = re.sub(r"\s*\*\s*", "*", decl.strip())
        return c_of[decl if decl in c_of else re.sub(r"\s*\w+$", "", decl)]

    lib = native.load_library()
    names = [n for n in vars(native._Api) if n.startswith("brt_")]
    assert len(names) == 9, names
    for name in names:
        ret, args = protos[name]
        want = [] if args.strip() in ("", "void") else [c_type(a) for a in args.split(",")]
        f = getattr(lib, name)
        assert f.restype is c_type(ret), name
        assert list(f.argtypes) == want, name
        sig = inspect.signature(getattr(native._Api, name))
        params = list(sig.parameters.values())[1:]
        assert len(params) == len(want), name
        for p, c in zip(params, want):
            assert py_of.get(p.annotation, ctypes.c_int if p.annotation == "int" else None) in (
                c, ctypes.c_int if c is ctypes.c_int64 else c), (name, p.name, p.annotation, c)
        assert f.restype in returns[sig.return_annotation], name
