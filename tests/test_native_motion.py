"""Moving instances and per-ray time (continuous-time LiDAR, rolling shutter): the numpy
interpolation (raycast/motion.py), the native library's timed casting against analytic
values and against static scenes at the interpolated transform, the BVHTree fallback's
time slices, every kernel variant (AVX, SSE2, portable C) and hostile motion records."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from blensor_addon.raycast import MeshData, SceneGeometry, trace
from blensor_addon.raycast import motion as mo
from blensor_addon.raycast.native import NativeBackend, available
from conftest import libasan, native_build, native_env

pytestmark = pytest.mark.skipif(not available(), reason="native library not built")


def cube(half=0.5):
    v = np.array([[x, y, z] for x in (-half, half) for y in (-half, half) for z in (-half, half)], np.float32)
    f = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
         (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    return MeshData(v, np.array(f))


def soup(rng, n=300, spread=1.0, size=0.4):
    c = rng.uniform(-spread, spread, (n, 1, 3))
    v = (c + rng.normal(0, size, (n, 3, 3))).reshape(-1, 3)
    return MeshData(v, np.arange(3 * n).reshape(-1, 3))


def rot(axis, angle):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def affine(R=np.eye(3), scale=(1, 1, 1), t=(0, 0, 0), shear=0.0):
    M = np.eye(4)
    S = np.diag(np.asarray(scale, float))
    S[0, 1] = shear
    M[:3, :3] = R @ S
    M[:3, 3] = t
    return M


def rays_at(rng, n, centre, spread, dist=8.0, above=False):
    """n rays from a sphere of radius dist around centre (its upper half if above) toward
    points within spread of it."""
    o = rng.normal(size=(n, 3))
    if above:
        o[:, 2] = np.abs(o[:, 2])
    o = centre + dist * o / np.linalg.norm(o, axis=1, keepdims=True)
    d = centre + rng.uniform(-spread, spread, (n, 3)) - o
    return o, d / np.linalg.norm(d, axis=1, keepdims=True)


# -------------------------------------------------------------- numpy interpolation


def test_interpolation_ends_half_angle_and_mirror():
    rng = np.random.default_rng(0)
    def random_affine():
        return affine(rot(rng.normal(size=3), rng.uniform(0, 3)), rng.uniform(0.2, 3, 3), rng.normal(size=3),
                      rng.normal())

    M0 = np.stack([random_affine() for _ in range(20)])
    M1 = np.stack([random_affine() for _ in range(20)])
    rec, moving = mo.motion_records(M0, M1)
    assert rec.shape == (20, 32) and rec.dtype == np.float64 and moving.all()
    assert ((rec[:, 6:10] * rec[:, 10:14]).sum(1) >= 0).all()  # shortest arc
    np.testing.assert_allclose(mo.interpolate(rec, np.zeros(20)), M0, atol=1e-6)
    np.testing.assert_allclose(mo.interpolate(rec, np.ones(20)), M1, atol=1e-6)
    np.testing.assert_allclose(mo.interpolate_matrices(M0, M1, 1.0), M1, atol=1e-6)
    # decompose: A = R(q) U, U upper triangular with positive diagonal, R proper
    t, q, U = mo.decompose(M0)
    np.testing.assert_allclose(mo.quat_to_matrix(q) @ U, M0[:, :3, :3], atol=1e-12)
    assert np.all(np.tril(U, -1) == 0) and np.all(np.diagonal(U, axis1=1, axis2=2) > 0)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    # a pure rotation: s = 0.5 is the rotation by half the angle about the same axis
    axis = np.array([1.0, -2.0, 0.5])
    R0, R1 = affine(rot(axis, 0.3)), affine(rot(axis, 0.3 + 1.7))
    half = mo.interpolate_matrices(R0[None], R1[None], 0.5)[0]
    np.testing.assert_allclose(half, affine(rot(axis, 0.3 + 0.85)), atol=1e-12)
    # also with a translation, scale and shear: those are linear
    A = affine(rot(axis, 0.2), (1, 2, 3), (1, 2, 3), 0.5)
    B = affine(rot(axis, 1.4), (3, 2, 1), (5, 0, 3), -0.5)
    mid = mo.interpolate_matrices(A[None], B[None], 0.25)[0]
    np.testing.assert_allclose(mid, affine(rot(axis, 0.5), (1.5, 2, 2.5), (2, 1.5, 3), 0.25), atol=1e-12)
    # mirrored matrices (negative determinant) round-trip, and stay mirrored in between
    mirror = affine(rot(axis, 0.7), (1.0, -2.0, 0.5), (1, 1, 1))
    mirror2 = affine(rot(axis, 2.0), (-3.0, 1.0, 0.5), (0, 1, 2))
    assert np.linalg.det(mirror[:3, :3]) < 0 and np.linalg.det(mirror2[:3, :3]) < 0
    t, q, U = mo.decompose(mirror)
    assert U[2, 2] < 0 and np.linalg.det(mo.quat_to_matrix(q)) == pytest.approx(1.0)
    np.testing.assert_allclose(mo.quat_to_matrix(q) @ U, mirror[:3, :3], atol=1e-12)
    rec, moving = mo.motion_records(mirror[None], mirror2[None])
    between = mo.interpolate(rec, np.linspace(0, 1, 9))
    np.testing.assert_allclose(between[0], mirror, atol=1e-12)
    np.testing.assert_allclose(between[-1], mirror2, atol=1e-12)
    assert (np.linalg.det(between[:, :3, :3]) < 0).all()
    # Shepperd's method on every branch (trace, and each diagonal element largest)
    for R in (rot([0, 0, 1], 0.1), rot([1, 0, 0], 3.1), rot([0, 1, 0], 3.1), rot([0, 0, 1], 3.1),
              rot([1, 1, 0], np.pi)):
        np.testing.assert_allclose(mo.quat_to_matrix(mo.matrix_to_quat(R)), R, atol=1e-12)


def test_records_of_static_singular_and_non_finite_instances():
    flat = affine(scale=(0, 1, 1))
    nan = np.eye(4)
    nan[0, 3] = np.nan
    M0 = np.stack([np.eye(4), np.eye(4), flat, np.eye(4), nan])
    M1 = np.stack([np.eye(4), affine(t=(1, 0, 0)), affine(t=(1, 0, 0)), flat, affine(t=(1, 0, 0))])
    rec, moving = mo.motion_records(M0, M1)
    assert moving.tolist() == [False, True, False, False, False]
    # an instance that cannot move stays at M0
    np.testing.assert_allclose(mo.interpolate(rec[3], 0.7)[0], np.eye(4), atol=1e-15)
    with pytest.raises(ValueError):
        mo.motion_records(M0, M1[:2])
    with pytest.raises(ValueError):
        SceneGeometry([cube()], [0, 0], np.stack([np.eye(4)] * 2), np.eye(4)[None])
    g = SceneGeometry([cube()], [0], np.eye(4)[None])
    assert g.hash() != SceneGeometry([cube()], [0], np.eye(4)[None], affine(t=(1, 0, 0))[None]).hash()
    assert g.hash() == SceneGeometry([cube()], [0], np.eye(4)[None]).hash()


# -------------------------------------------------------------- native timed casting


def test_translating_cube_analytic_distance_and_normal():
    H, x0 = 10.0, -1.0
    M0, M1 = affine(t=(x0, 0, 0)), affine(t=(x0 + 2.0, 0, 0))
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([cube()], [0], M0[None], M1[None]))
    assert be.moving_instances == 1
    s = np.linspace(0, 1, 11).astype(np.float32)
    o = np.tile([H, 0.1, 0.2], (11, 1))
    d = np.tile([-1.0, 0.0, 0.0], (11, 1))
    h = be.intersect(o, d, 100.0, time=s)
    np.testing.assert_allclose(h.t, H - (x0 + 2 * s.astype(np.float64)) - 0.5, atol=1e-5)
    assert (h.instance == 0).all()
    np.testing.assert_allclose(h.normal, np.tile([1.0, 0, 0], (11, 1)), atol=1e-6)
    # without time every ray is cast at the start
    np.testing.assert_allclose(be.intersect(o, d, 100.0).t, H - x0 - 0.5, atol=1e-5)
    # from behind (+x face leaves, -x face comes): normal -x, distance shrinks the other way
    h = be.intersect(-o, -d, 100.0, time=s)
    np.testing.assert_allclose(h.t, H + (x0 + 2 * s.astype(np.float64)) - 0.5, atol=1e-5)
    np.testing.assert_allclose(h.normal, np.tile([-1.0, 0, 0], (11, 1)), atol=1e-6)


def moving_scene(rng):
    """A triangle soup turning 90 deg about an oblique axis while it moves and its
    non-uniform scale and shear change; a mirrored box moving the other way; a static
    box. Returns the geometry and the motion records."""
    axis = np.array([1.0, 2.0, -0.7])
    R0 = rot([0.3, -1, 0.2], 0.4)
    A0 = affine(R0, (1.0, 0.6, 1.4), (0.5, -0.3, 0.2), 0.2)
    A1 = affine(rot(axis, np.pi / 2) @ R0, (0.7, 1.3, 0.9), (1.5, 0.4, -0.4), -0.3)
    B0 = affine(rot([0, 0, 1], 0.3), (-1.0, 0.5, 0.8), (-2.5, 1.0, 0.0))
    B1 = affine(rot([0, 1, 1], 1.2), (-0.8, 0.7, 0.5), (-3.0, 0.0, 0.5))
    C = affine(scale=(1.0, 1.0, 0.2), t=(0.0, 0.0, -3.0))
    M0, M1 = np.stack([A0, B0, C]), np.stack([A1, B1, C])
    g = SceneGeometry([soup(rng), cube(0.7)], [0, 1, 1], M0, M1)
    return g, mo.motion_records(g.instance_matrix, g.instance_matrix_end)


def test_rotating_scaled_mesh_matches_static_scene_at_each_time():
    rng = np.random.default_rng(1)
    g, (rec, moving) = moving_scene(rng)
    assert moving.tolist() == [True, True, False]
    timed = NativeBackend(threads=2)
    timed.set_geometry(g)
    static = NativeBackend(threads=1)
    svals = np.concatenate([[0.0, 1.0], rng.uniform(0, 1, 28)]).astype(np.float32)
    n = 600
    half = n * len(svals) // 2
    o, d = map(np.concatenate, zip(rays_at(rng, half, np.zeros(3), 2.5),
                                   rays_at(rng, half, np.array([-2.7, 0.5, 0.2]), 1.5)))
    perm = rng.permutation(len(o))
    o, d = o[perm], d[perm]
    s = np.repeat(svals, n)
    h = timed.intersect(o, d, 1e3, time=s)
    ref_t = np.empty(len(o), np.float32)
    ref_i = np.empty(len(o), np.int32)
    ref_p = np.empty(len(o), np.int32)
    ref_n = np.empty((len(o), 3), np.float32)
    for k, sv in enumerate(svals):
        sl = slice(k * n, (k + 1) * n)
        at_s = mo.interpolate(rec, sv).astype(np.float32)
        static.set_geometry(SceneGeometry(g.meshes, g.instance_mesh, at_s))
        r = static.intersect(o[sl], d[sl], 1e3)
        ref_t[sl], ref_i[sl], ref_p[sl], ref_n[sl] = r.t, r.instance, r.primitive, r.normal
    hit = ref_i >= 0
    assert hit.sum() > len(o) // 3 and (ref_i == 0).sum() > 3000 and (ref_i == 1).sum() > 1000
    same = (h.instance == ref_i) & (h.primitive == ref_p)
    assert same.mean() > 0.999, same.mean()
    both = hit & (h.instance >= 0)
    assert ((h.instance >= 0) != hit).sum() < 10  # hit/miss differ only at a few grazing rays
    np.testing.assert_allclose(h.t[both], ref_t[both], rtol=0, atol=1e-4)
    np.testing.assert_allclose(h.normal[same & hit], ref_n[same & hit], atol=1e-4)


def test_top_level_box_covers_the_motion_between_the_ends():
    # a 10 m bar turning 90 deg about z: at s = 0.5 its tip is at 45 deg, outside the
    # union of its boxes at s = 0 and s = 1
    corners = [[x, y, z] for x in (-5, 5) for y in (-0.1, 0.1) for z in (-0.1, 0.1)]
    bar = MeshData(np.array(corners, np.float32), cube().triangles)
    M0, M1 = np.eye(4), affine(rot([0, 0, 1], np.pi / 2))
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([bar], [0], M0[None], M1[None]))
    tip = 4.9 * np.array([np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0])
    o = np.array([tip + [0, 0, 5.0]] * 3)
    d = np.array([[0.0, 0.0, -1.0]] * 3)
    h = be.intersect(o, d, 100.0, time=np.array([0.0, 0.5, 1.0], np.float32))
    assert h.instance.tolist() == [-1, 0, -1]
    assert h.t[1] == pytest.approx(4.9, abs=1e-5)
    np.testing.assert_allclose(h.normal[1], [0, 0, 1], atol=1e-6)


def test_static_scene_same_bits_with_and_without_time():
    rng = np.random.default_rng(2)
    g, _ = moving_scene(rng)
    o, d = rays_at(rng, 20000, np.zeros(3), 3.0)
    s = rng.uniform(-0.5, 1.5, len(o)).astype(np.float32)
    plain = NativeBackend(threads=2)
    plain.set_geometry(SceneGeometry(g.meshes, g.instance_mesh, g.instance_matrix))
    same_end = NativeBackend(threads=2)
    same_end.set_geometry(SceneGeometry(g.meshes, g.instance_mesh, g.instance_matrix,
                                        g.instance_matrix.copy()))
    assert same_end.moving_instances == 0
    a = plain.intersect(o, d, 1e3)
    assert (a.instance >= 0).sum() > 5000
    for b in (plain.intersect(o, d, 1e3, time=s), same_end.intersect(o, d, 1e3, time=s),
              same_end.intersect(o, d, 1e3)):
        for f in ("t", "instance", "primitive", "normal", "uv"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_non_finite_time_misses_and_out_of_range_time_clamps():
    rng = np.random.default_rng(3)
    g, _ = moving_scene(rng)
    be = NativeBackend(threads=1)
    be.set_geometry(g)
    o, d = rays_at(rng, 2000, np.zeros(3), 2.0)
    n = len(o)

    def cast(v):
        return be.intersect(o, d, 1e3, time=np.full(n, v, np.float32))

    h0, h1 = cast(0.0), cast(1.0)
    assert (h0.instance >= 0).sum() > 500 and not np.array_equal(h0.t, h1.t)
    for v, ref in ((-1.0, h0), (-1e30, h0), (2.0, h1), (1e30, h1)):
        h = cast(v)
        assert np.array_equal(h.t, ref.t) and np.array_equal(h.primitive, ref.primitive), v
    for v in (np.nan, np.inf, -np.inf):
        h = cast(v)
        assert (h.instance == -1).all() and np.isinf(h.t).all() and (h.primitive == -1).all(), v
    with pytest.raises(ValueError):
        be.intersect(o, d, 1e3, time=np.zeros(n - 1, np.float32))
    with pytest.raises(ValueError):
        be.intersect(o, d, 1e3, time=np.zeros((n, 1), np.float32))


def test_mirror_trace_reflects_at_the_rays_time():
    # a mirror plane x = 2 + s (normal -x) moving away over the step; the ray from the
    # origin along +x reflects back along -x past the origin to a wall at x = -3:
    # path (2 + s) + (2 + s + 3)
    mirror = MeshData(np.array([[0, -10, -10], [0, 10, -10], [0, 10, 10], [0, -10, 10]], float),
                      np.array([[0, 2, 1], [0, 3, 2]]))
    wall = MeshData(np.array([[0, -10, -10], [0, 10, -10], [0, 10, 10], [0, -10, 10]], float),
                    np.array([[0, 1, 2], [0, 2, 3]]))
    M0 = np.stack([affine(t=(2, 0, 0)), affine(t=(-3, 0, 0))])
    M1 = np.stack([affine(t=(3, 0, 0)), affine(t=(-3, 0, 0))])
    be = NativeBackend(threads=1)
    be.set_geometry(SceneGeometry([mirror, wall], [0, 1], M0, M1))
    s = np.array([0.0, 0.25, 1.0], np.float32)
    o = np.tile([0.0, 0.1, 0.2], (3, 1))
    d = np.tile([1.0, 0.0, 0.0], (3, 1))
    tr = trace(be, o, d, 100.0, lambda inst, prim: inst == 0, time=s)
    assert tr.hit.all() and (tr.instance == 1).all() and (tr.bounces == 1).all()
    np.testing.assert_allclose(tr.range, 2 * (2 + s) + 3, atol=2e-4)
    with pytest.raises(ValueError):
        trace(be, o, d, 100.0, time=s[:2])


# -------------------------------------------------------------- BVHTree fallback


def test_bvhtree_time_slices_agree_with_native():
    pytest.importorskip("bpy")
    from blensor_addon.raycast.bvhtree import BVHTreeBackend
    rng = np.random.default_rng(4)
    # a box car driving 0.2 m and turning 8 deg, a soup tumbling 20 deg, a static ground
    car0 = affine(rot([0, 0, 1], 0.1), (2.0, 0.9, 0.7), (0.0, 0.0, 0.0))
    car1 = affine(rot([0, 0, 1], 0.1 + np.radians(8)), (2.0, 0.9, 0.7), (0.2, 0.05, 0.0))
    soup0 = affine(rot([1, 1, 0], 0.3), (0.5, 0.5, 0.5), (0.0, 3.0, 0.0))
    soup1 = affine(rot([1, 1, 0], 0.3 + np.radians(20)), (0.5, 0.5, 0.5), (0.0, 3.0, 0.1))
    ground = affine(scale=(20, 20, 0.1), t=(0, 0, -1.5))
    g = SceneGeometry([cube(0.5), soup(rng, 200, 1.0, 0.3)], [0, 1, 0], np.stack([car0, soup0, ground]),
                      np.stack([car1, soup1, ground]))
    o, d = map(np.concatenate, zip(rays_at(rng, 1500, np.zeros(3), 1.3, dist=10.0, above=True),
                                   rays_at(rng, 1500, np.array([0.0, 3.0, 0.0]), 1.0, dist=10.0, above=True)))
    s = rng.uniform(0, 1, len(o)).astype(np.float32)
    s[:5] = np.nan
    nat = NativeBackend(threads=2)
    nat.set_geometry(g)
    bvh = BVHTreeBackend()
    bvh.set_geometry(g)
    assert 100 <= bvh.slices <= 256
    hn, hb = nat.intersect(o, d, 100.0, time=s), bvh.intersect(o, d, 100.0, time=s)
    assert (hb.instance[:5] == -1).all()
    assert (hn.instance == 0).sum() > 300 and (hn.instance == 1).sum() > 300
    same = hn.instance == hb.instance
    assert same.mean() > 0.995, same.mean()
    both = same & (hn.instance >= 0)
    dt = np.abs(hn.t[both] - hb.t[both])
    assert np.quantile(dt, 0.99) < 2e-3 and np.median(dt) < 5e-4, (np.quantile(dt, 0.99), dt.max())
    # without time both cast at the start, as before
    hn0, hb0 = nat.intersect(o, d, 100.0), bvh.intersect(o, d, 100.0)
    ok = hn0.instance >= 0
    assert (ok != (hb0.instance >= 0)).sum() < 5
    both0 = ok & (hb0.instance == hn0.instance)
    np.testing.assert_allclose(hb0.t[both0], hn0.t[both0], atol=1e-4)


# -------------------------------------------------------------- kernels and hostile input

#: A moving scene cast with random rays and times in a fresh process (with
#: BLENSOR_NATIVE_LIB / BLENSOR_RT_NO_AVX from the environment); hostile motion records
#: through ctypes; saves the hits to argv[1] and prints "ok".
TIMED_SCRIPT = r'''
import ctypes, sys
import numpy as np
from blensor_addon.raycast import MeshData, SceneGeometry
from blensor_addon.raycast import motion as mo
from blensor_addon.raycast.native import NativeBackend, kernel, load_library

rng = np.random.default_rng(11)
c = rng.uniform(-2, 2, (2000, 1, 3)); v = (c + rng.normal(0, .4, (2000, 3, 3))).reshape(-1, 3)
soup = MeshData(v, np.arange(6000).reshape(-1, 3))
def aff(axis, ang, scale, t):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    M = np.eye(4); M[:3, :3] = (np.eye(3) + np.sin(ang) * K + (1 - np.cos(ang)) * K @ K) @ np.diag(scale)
    M[:3, 3] = t
    return M
M0 = np.stack([aff([1, 2, 3], 0.2, (1, 2, 1), (0, 0, 0)), aff([0, 0, 1], 0, (1, 1, 1), (8, 0, 0)),
               aff([1, 0, 0], 1.0, (-1, 1, 1), (0, 8, 0))])
M1 = np.stack([aff([1, 2, 3], 1.8, (2, 1, 1), (1, 1, 0)), aff([0, 0, 1], 0, (1, 1, 1), (8, 0, 0)),
               aff([1, 0, 0], 2.5, (-1, 2, 1), (0, 9, 1))])
be = NativeBackend(2)
be.set_geometry(SceneGeometry([soup], [0, 0, 0], M0, M1))
o = rng.uniform(-6, 14, (20000, 3)); d = rng.normal(size=(20000, 3))
d /= np.linalg.norm(d, axis=1, keepdims=True)
s = rng.uniform(-0.2, 1.2, 20000).astype(np.float32)
s[::97] = np.nan; s[::101] = np.inf
h = be.intersect(o, d, 1e30, time=s)
np.savez(sys.argv[1], t=h.t, p=h.primitive, i=h.instance, n=h.normal, uv=h.uv, k=kernel())

# hostile records straight into the library: NaN, inf, huge, zero quaternions, singular
# and sign-changing U; none may crash or be hit where it cannot be placed
lib = load_library()
vp = ctypes.c_void_p
mesh = vp()
assert lib.brt_mesh_create(v.astype(np.float32).ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(v),
                           np.arange(6000, dtype=np.int32).ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                           2000, ctypes.byref(mesh)) == 0
good, _ = mo.motion_records(M0[:1], M1[:1])
recs = [good[0].copy() for _ in range(12)]
recs[0][0] = np.nan; recs[1][5] = np.inf; recs[2][6:10] = 0; recs[3][14] = 0
recs[4][0:6] = 1e300; recs[5][0:3] = 3e38; recs[6][14:23] *= 1e100; recs[7][23:32] *= 1e-200
recs[8][31] = -recs[8][31]  # U22 changes sign: singular somewhere in the step
recs[9][6:14] = 1e308; recs[10][6:14] = 1e-300; recs[11][10:14] = -recs[11][10:14]
rec = np.ascontiguousarray(np.stack(recs))
xf = np.ascontiguousarray(np.repeat(np.eye(4, dtype=np.float32)[None], 12, 0))
xf[:, 0, 3] = np.arange(12) * 1e3  # where the instances stay if their record is refused
mov = np.ones(12, np.uint8)
scene = vp()
handles = (vp * 1)(mesh.value)
im = np.zeros(12, np.int32)
P = lambda a, t: a.ctypes.data_as(ctypes.POINTER(t))
assert lib.brt_scene_create_motion(handles, 1, P(im, ctypes.c_int32), P(xf, ctypes.c_float),
                                   P(rec, ctypes.c_double), P(mov, ctypes.c_uint8), 12,
                                   ctypes.byref(scene)) == 0
N = 30000
target = np.zeros((N, 3)); target[:, 0] = 1e3 * rng.integers(0, 12, N) * (rng.uniform(size=N) < 0.7)
ro = target + rng.normal(0, 6, (N, 3))
rd = target + rng.normal(0, 1.5, (N, 3)) - ro
rd /= np.linalg.norm(rd, axis=1, keepdims=True)
ro, rd = np.ascontiguousarray(ro, np.float32), np.ascontiguousarray(rd, np.float32)
ts = np.ascontiguousarray(rng.uniform(-0.5, 1.5, N), np.float32); ts[::13] = np.nan
out_t = np.empty(N, np.float32); out_i = np.empty(N, np.int32); out_p = np.empty(N, np.int32)
out_n = np.empty((N, 3), np.float32); out_uv = np.empty((N, 2), np.float32)
f = lambda a, t=ctypes.c_float: a.ctypes.data_as(ctypes.POINTER(t))
for tptr in (f(ts), None):
    assert lib.brt_intersect_timed(scene, f(ro), f(rd), tptr, None, ctypes.c_float(1e30), N, 2, f(out_t),
                                   f(out_i, ctypes.c_int32), f(out_p, ctypes.c_int32), f(out_n),
                                   f(out_uv)) == 0
    hit = out_i >= 0
    assert np.isfinite(out_t[hit]).all() and (out_t[hit] > 0).all()
    assert (np.abs(np.linalg.norm(out_n[hit], axis=1) - 1) < 1e-4).all()
    if tptr is not None:
        assert (out_i[np.isnan(ts)] == -1).all()
    assert set(np.unique(out_i[hit]).tolist()) <= {0, 1, 2, 3, 7, 8, 9, 10, 11}, np.unique(out_i[hit])
    assert hit.sum() > 1000
lib.brt_scene_free(scene)
lib.brt_mesh_free(mesh)
print("ok")
'''


def run_timed(tmp_path, name, lib=None, no_avx=False, preload=None):
    env = native_env(lib, no_avx=no_avx, preload=preload)
    out = tmp_path / f"{name}.npz"
    res = subprocess.run([sys.executable, "-c", TIMED_SCRIPT, str(out)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr
    return np.load(out)


def cpu_kernel() -> str:
    """The SIMD kernel the default build must pick on this CPU."""
    flags = open("/proc/cpuinfo").read().split() if sys.platform.startswith("linux") else []
    return "avx" if "avx" in flags else "sse2"


def test_avx_sse_and_portable_kernels_agree_on_timed_casts(tmp_path):
    portable = native_build.build(tmp_path / "portable", portable=True)
    out = {"default": run_timed(tmp_path, "default"), "sse": run_timed(tmp_path, "sse", no_avx=True),
           "portable": run_timed(tmp_path, "portable", portable)}
    assert str(out["default"]["k"]) == cpu_kernel()
    assert str(out["sse"]["k"]) == "sse2"
    assert str(out["portable"]["k"]) == "portable"
    assert (out["default"]["i"] >= 0).sum() > 2000
    assert set(np.unique(out["default"]["i"]).tolist()) == {-1, 0, 1, 2}
    for name in ("sse", "portable"):
        for k in ("t", "p", "i", "n", "uv"):
            assert np.array_equal(out["default"][k], out[name][k]), (name, k)


@pytest.mark.parametrize("variant", ["simd", "portable"])
def test_timed_casts_under_sanitizers(tmp_path, variant):
    """The ASan + UBSan build (-O1) finds nothing on the timed casts and the hostile
    records, runs the kernel it is meant to, and gives the optimized build's answers bit
    for bit (both are built with -ffp-contract=off)."""
    asan = libasan()
    if asan is None:
        pytest.skip("gcc's libasan is not installed")
    lib = native_build.build(tmp_path / variant, portable=variant == "portable", sanitize=True)
    got = run_timed(tmp_path, variant, lib, preload=asan)
    assert str(got["k"]) == (cpu_kernel() if variant == "simd" else "portable")
    ref = run_timed(tmp_path, "reference")
    assert (ref["i"] >= 0).sum() > 2000
    for k in ("t", "p", "i", "n", "uv"):
        assert np.array_equal(got[k], ref[k]), k
