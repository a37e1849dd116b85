"""Glass and transparency (docs/physics.md, "Glass and alpha"): the Fresnel equations and Snell's law
(:mod:`blensor_addon.core.optics`) against their closed forms, the split tracer
(:func:`blensor_addon.raycast.trace.trace` with ``optics``) on thin panes, solid glass,
total internal reflection and alpha, on both backends, and the scene layer's split cast
(:meth:`blensor_addon.scene.context.TimelineContext.cast`) on real Blender scenes.

The materials' transmission, IOR and alpha come from Blender's node tree in the scene
layer (tests/test_materials_nodes.py); here the tracer gets a synthetic ``optics`` callable,
and the Blender scans fill the :class:`~blensor_addon.core.materials.MaterialTable`'s
arrays by material name (:func:`glass_by_name`, a monkeypatch of ``has_optics``, which the
scene layer asks before it calls ``optics``).
"""
from __future__ import annotations

import math
import subprocess
import types

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.optics import fresnel_sp, fresnel_unpolarized, refract, thin_slab
from blensor_addon.raycast import MeshData, SceneGeometry, get_backend, trace
from blensor_addon.raycast.trace import MIN_WEIGHT, SPECULAR_ACCEPTANCE
from conftest import ROOT, add_camera, add_mesh, generic_sensor, quad
from test_materials_nodes import _bsdf, _material, _replace_surface, _snapshot

BACKENDS = ["native", "bvhtree"]
#: the commit that fixed the contract of issue 22 (the tracer before glass)
CONTRACT = "3eef638"


# -- optics: closed forms ---------------------------------------------------------------

def test_fresnel_at_normal_incidence_is_four_percent():
    # ((n - 1) / (n + 1))^2 = 0.04 for n = 1.5, both ways through the boundary
    assert fresnel_unpolarized(np.array([1.0]), 1.0, 1.5)[0] == pytest.approx(0.04, abs=1e-15)
    assert fresnel_unpolarized(np.array([1.0]), 1.5, 1.0)[0] == pytest.approx(0.04, abs=1e-15)
    assert fresnel_unpolarized(np.array([1.0]), 1.0, 1.33)[0] == pytest.approx((0.33 / 2.33) ** 2, abs=1e-15)


def test_fresnel_rises_to_one_at_grazing_and_matches_the_sine_tangent_form():
    th = np.radians(np.linspace(0.5, 89.5, 179))
    n = 1.5
    R = fresnel_unpolarized(np.cos(th), 1.0, n)
    # Fresnel's own sine and tangent form (Hecht 4.6.2): an independent formula
    tt = np.arcsin(np.sin(th) / n)
    rs = (np.sin(th - tt) / np.sin(th + tt)) ** 2
    rp = (np.tan(th - tt) / np.tan(th + tt)) ** 2
    np.testing.assert_allclose(R, 0.5 * (rs + rp), rtol=1e-12, atol=1e-15)
    assert R[0] == pytest.approx(0.04, abs=1e-4) and np.all(np.diff(R) > 0)  # monotone for air -> glass
    assert R[np.argmin(np.abs(th - np.radians(45)))] == pytest.approx(0.0502, abs=1e-4)
    assert fresnel_unpolarized(np.array([0.0]), 1.0, n)[0] == 1.0  # 90 deg


def test_brewster_angle_has_no_p_reflectance():
    tb = np.arctan(1.5)  # tan(theta_B) = n2 / n1
    Rs, Rp = fresnel_sp(np.array([np.cos(tb)]), 1.0, 1.5)
    assert Rp[0] < 1e-20 and Rs[0] == pytest.approx(0.1479, abs=1e-4)
    Rs, Rp = fresnel_sp(np.array([np.cos(np.arctan(1 / 1.5))]), 1.5, 1.0)  # from inside too
    assert Rp[0] < 1e-20


def test_total_internal_reflection_beyond_the_critical_angle():
    # sin(theta_c) = 1 / 1.5 from inside glass: 41.81 deg
    tc = np.arcsin(1 / 1.5)
    th = np.array([tc - 1e-6, tc + 1e-6, np.radians(60), np.radians(89)])
    R = fresnel_unpolarized(np.cos(th), 1.5, 1.0)
    assert R[0] < 1.0 and np.all(R[1:] == 1.0)
    d = np.stack([np.sin(th), np.zeros(4), np.cos(th)], 1)  # toward +z, normal facing them: -z
    t, tir = refract(d, np.tile([0.0, 0.0, -1.0], (4, 1)), 1.5)
    assert tir.tolist() == [False, True, True, True]
    # under TIR the light is reflected: the mirror direction
    np.testing.assert_allclose(t[2], [np.sin(th[2]), 0.0, -np.cos(th[2])], atol=1e-15)
    # just below the critical angle the refracted ray grazes the surface
    assert t[0, 2] == pytest.approx(0.0, abs=2e-3) and t[0, 0] == pytest.approx(1.0, abs=1e-5)


def test_refraction_obeys_snell_in_vector_form():
    rng = np.random.default_rng(3)
    n = rng.normal(size=(500, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    d = rng.normal(size=(500, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    d[np.einsum("ij,ij->i", d, n) > 0] *= -1  # incoming against the normal
    for n1, n2 in ((1.0, 1.5), (1.5, 1.0), (1.0, 1.0)):
        t, tir = refract(d, n, n1 / n2)
        ci = -np.einsum("ij,ij->i", d, n)
        ct = -np.einsum("ij,ij->i", t, n)
        ok = ~tir
        np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(n1 * np.sqrt(1 - ci[ok] ** 2), n2 * np.sqrt(1 - ct[ok] ** 2), atol=1e-9)
        assert np.all(ct[ok] > 0)  # goes through, to the far side
        # coplanar with the incident ray and the normal
        np.testing.assert_allclose(np.einsum("ij,ij->i", np.cross(d, n), t)[ok], 0.0, atol=1e-12)
        if n1 == n2:
            np.testing.assert_allclose(t, d, atol=1e-12)
        if n1 <= n2:
            assert not tir.any()
        else:
            assert np.array_equal(tir, np.sqrt(1 - ci ** 2) * n1 / n2 > 1)


def test_thin_pane_sums_its_internal_reflections():
    r = 0.04
    R, T = thin_slab(np.array([1.0, 0.5, 0.0]), 1.5)
    assert R[0] == pytest.approx(2 * r / (1 + r), abs=1e-15)
    assert T[0] == pytest.approx((1 - r) / (1 + r), abs=1e-15)
    np.testing.assert_allclose(R + T, 1.0, atol=1e-15)
    assert R[2] == 1.0 and T[2] == 0.0
    # more than two surfaces without the internal reflections, (1 - r)^2
    assert T[0] > (1 - r) ** 2


# -- the tracer: scenes built here --------------------------------------------------------

@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "bvhtree":
        request.getfixturevalue("bpy_mod")  # mathutils comes with bpy
    be = get_backend(request.param)
    yield be
    be.close()


def plane_x(x, half=50.0, flip=False):
    """The plane x = ``x`` (a square of ``half`` m), two triangles wound to +x (or -x)."""
    v = np.array([[x, -half, -half], [x, half, -half], [x, half, half], [x, -half, half]], float)
    f = np.array([[0, 2, 1], [0, 3, 2]]) if not flip else np.array([[0, 1, 2], [0, 2, 3]])
    return MeshData(v, f)


def plane_y(y, half=50.0):
    v = np.array([[-half, y, -half], [half, y, -half], [half, y, half], [-half, y, half]], float)
    return MeshData(v, np.array([[0, 1, 2], [0, 2, 3]]))


def convex_solid(vertices, faces, inward=False):
    """A closed mesh of the convex solid ``vertices`` (V, 3) with polygon ``faces``
    (fanned to triangles), every triangle wound outward (``inward``: every one inward)."""
    v = np.asarray(vertices, float)
    c = v.mean(axis=0)
    tris = []
    for f in faces:
        for k in range(1, len(f) - 1):
            a, b, e = f[0], f[k], f[k + 1]
            nrm = np.cross(v[b] - v[a], v[e] - v[a])
            out = np.dot(nrm, v[[a, b, e]].mean(axis=0) - c) > 0
            tris.append([a, b, e] if out != inward else [a, e, b])
    return MeshData(v, np.array(tris))


def box(x0, x1, y0, y1, z0, z1, inward=False):
    v = [(x, y, z) for x in (x0, x1) for y in (y0, y1) for z in (z0, z1)]
    faces = [(0, 1, 3, 2), (4, 5, 7, 6), (0, 1, 5, 4), (2, 3, 7, 6), (0, 2, 6, 4), (1, 3, 7, 5)]
    return convex_solid(v, faces, inward)


def scene(backend, meshes):
    k = len(meshes)
    backend.set_geometry(SceneGeometry(list(meshes), np.arange(k), np.stack([np.eye(4)] * k)))


def glass_of(table):
    """``optics`` for instances: ``table`` maps instance -> (transmission, ior, alpha);
    the others opaque."""
    def optics(inst, prim):
        t = np.zeros(inst.shape, np.float32)
        ior = np.full(inst.shape, 1.45, np.float32)
        a = np.ones(inst.shape, np.float32)
        for i, (ti, ni, ai) in table.items():
            m = inst == i
            t[m], ior[m], a[m] = ti, ni, ai
        return t, ior, a
    return optics


def rays_xy(angles):
    a = np.asarray(angles, float)
    return np.zeros((a.size, 3)), np.stack([np.cos(a), np.sin(a), np.zeros(a.size)], 1)


def rows_of(tr, ray):
    return np.flatnonzero(tr.ray == ray)


def test_window_gives_the_pane_the_wall_behind_and_the_mirror_path(backend):
    # a single-face pane at x = 5 (glass, IOR 1.5, thin), a wall at x = 10, a wall behind the
    # sensor at x = -3 that catches the pane's reflection
    scene(backend, [plane_x(5.0), plane_x(10.0), plane_x(-3.0)])
    th = 0.35
    o, d = rays_xy([0.0, th])
    tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, 1.5, 1.0)}))
    R0, T0 = thin_slab(np.array([1.0]), 1.5)
    R1, T1 = thin_slab(np.array([np.cos(th)]), 1.5)
    assert tr.ray[:2].tolist() == [0, 1] and tr.range.shape == (6,)
    # row 0: the pane at normal incidence returns its specular reflection (both surfaces)
    assert tr.hit[0] and tr.instance[0] == 0 and tr.range[0] == pytest.approx(5.0, abs=1e-6)
    assert tr.weight[0] == 1.0 and tr.diffuse[0] == 0.0 and tr.specular[0] == pytest.approx(R0[0], rel=1e-6)
    # row 1: the pane off normal returns nothing (clear glass): no candidate
    assert not tr.hit[1] and tr.range[1] == np.inf and tr.weight[1] == 1.0
    for ray, c, R, T in ((0, 1.0, R0[0], T0[0]), (1, np.cos(th), R1[0], T1[0])):
        ex = rows_of(tr, ray)[1:]
        assert np.all(ex >= 2)  # the extra rows follow the rays' first ends, in ray order
        inst = tr.instance[ex].tolist()
        assert sorted(inst) == [1, 2]
        wall, back = ex[inst.index(1)], ex[inst.index(2)]
        # straight through the thin pane: the wall at 10 / cos, weight T_slab
        assert tr.hit[wall] and tr.range[wall] == pytest.approx(10.0 / c, abs=2e-6)
        assert tr.weight[wall] == pytest.approx(T, rel=1e-6) and tr.bounces[wall] == 1
        assert tr.diffuse[wall] == 1.0 and tr.specular[wall] == 0.0
        # the mirror path: back to x = -3, 5 / cos + 8 / cos, weight R_slab
        assert tr.hit[back] and tr.range[back] == pytest.approx(13.0 / c, abs=5e-6)
        assert tr.weight[back] == pytest.approx(R, rel=1e-6)
        np.testing.assert_allclose(tr.last_dir[back], [-c, np.sin(th) if ray else 0.0, 0.0], atol=1e-6)
    # the specular return counts within the acceptance half-angle only
    o, d = rays_xy([0.5 * SPECULAR_ACCEPTANCE, 2.0 * SPECULAR_ACCEPTANCE])
    tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, 1.5, 1.0)}))
    assert tr.hit[:2].tolist() == [True, False] and tr.specular[0] > 0.07


def test_partly_transmitting_pane_shares_energy_three_ways(backend):
    # Principled with transmission 0.4: the diffuse base keeps (1 - t)(1 - F), the glass lobe
    # passes t T_slab, the rest reflects: the shares add to 1
    scene(backend, [plane_x(5.0), plane_x(10.0)])
    th = 0.6
    o, d = rays_xy([th])
    tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (0.4, 1.5, 1.0)}))
    F = fresnel_unpolarized(np.array([np.cos(th)]), 1.0, 1.5)[0]
    R, T = (v[0] for v in thin_slab(np.array([np.cos(th)]), 1.5))
    assert tr.hit[0] and tr.diffuse[0] == pytest.approx(0.6 * (1 - F), rel=1e-6) and tr.specular[0] == 0.0
    ex = rows_of(tr, 0)[1:]
    wall = ex[tr.instance[ex] == 1][0]
    refl = ex[tr.instance[ex] == 0][0]  # the reflected path misses (the record keeps the pane)
    assert tr.weight[wall] == pytest.approx(0.4 * T, rel=1e-6)
    assert not tr.hit[refl] and tr.weight[refl] == pytest.approx(0.6 * F + 0.4 * R, rel=1e-6)
    assert tr.diffuse[0] + tr.weight[wall] + tr.weight[refl] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("inward", [False, True])
def test_solid_glass_slab_offsets_the_ray_as_snell_says(backend, inward):
    # a closed glass box x in [4, 6] (2 m thick), a wall at x = 10; an oblique ray at 30 deg
    # refracts in (theta_t = asin(sin 30 / 1.5)) and out (back to 30 deg), shifted sideways
    # by t sin(theta - theta_t) / cos(theta_t); wound inward the rule finds it just the same
    scene(backend, [box(4.0, 6.0, -20, 20, -20, 20, inward), plane_x(10.0)])
    th, n = np.radians(30.0), 1.5
    tt = np.arcsin(np.sin(th) / n)
    o, d = rays_xy([th])
    tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, n, 1.0)}))
    assert not tr.hit[0] and tr.instance[0] == 0  # clear glass, off normal: no return
    ex = rows_of(tr, 0)[1:]
    wall = ex[(tr.instance[ex] == 1) & tr.hit[ex]]
    # straight through, and once more after two internal reflections (weight ~ F^2)
    assert wall.size == 2
    w = wall[np.argmax(tr.weight[wall])]
    assert tr.weight[wall].min() < 2e-3
    # the hit point on the wall from its barycentrics
    g = plane_x(10.0)
    tri = g.vertices[g.triangles[tr.primitive[w]]].astype(np.float64)
    b1, b2 = tr.bary[w].astype(np.float64)
    y = ((1 - b1 - b2) * tri[0] + b1 * tri[1] + b2 * tri[2])[1]
    straight = 10.0 * np.tan(th)
    shift = 2.0 * np.sin(th - tt) / np.cos(tt)  # perpendicular to the ray
    assert straight - y == pytest.approx(shift / np.cos(th), abs=2e-6)
    assert y == pytest.approx(4 * np.tan(th) + 2 * np.tan(tt) + 4 * np.tan(th), abs=2e-6)
    # the exit direction is the entry direction again
    np.testing.assert_allclose(tr.last_dir[w], d[0], atol=1e-6)
    # time of flight: the path inside counts n times
    assert tr.range[w] == pytest.approx(8.0 / np.cos(th) + n * 2.0 / np.cos(tt), abs=5e-6)
    # weight: (1 - F) in, (1 - F) out (the same F by reciprocity); two refractions
    F_in = fresnel_unpolarized(np.array([np.cos(th)]), 1.0, n)[0]
    F_out = fresnel_unpolarized(np.array([np.cos(tt)]), n, 1.0)[0]
    assert F_out == pytest.approx(F_in, abs=1e-12)
    assert tr.weight[w] == pytest.approx((1 - F_in) * (1 - F_out), rel=1e-6) and tr.bounces[w] == 2
    # a thin pane would not have shifted it: the same ray through one face of the box
    scene(backend, [plane_x(4.0), plane_x(10.0)])
    thin = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, n, 1.0)}))
    tw = rows_of(thin, 0)[1:]
    tw = tw[thin.instance[tw] == 1][0]
    assert thin.range[tw] == pytest.approx(10.0 / np.cos(th), abs=2e-6)


def test_right_angle_prism_reflects_totally_inside(backend):
    # a glass prism (right isosceles triangle (4,-1), (6,1), (4,1) in xy, z in [-1, 1]): a ray
    # along +x enters x = 4 at normal incidence, meets the hypotenuse y = x - 5 at 45 deg
    # (> 41.8 deg, the critical angle of n = 1.5): totally reflected to +y, leaves y = 1 at
    # normal incidence and meets the wall y = 5 at (5, 5). Nothing passes the hypotenuse.
    pts = [(4, -1), (6, 1), (4, 1)]
    v = [(x, y, z) for z in (-1.0, 1.0) for x, y in pts]
    prism = convex_solid(v, [(0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)])
    scene(backend, [prism, plane_y(5.0), plane_x(10.0)])
    o, d = rays_xy([0.0])
    tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, 1.5, 1.0)}))
    assert 2 not in tr.instance[tr.hit].tolist()  # no light through the hypotenuse
    wall = np.flatnonzero((tr.instance == 1) & tr.hit)
    w, w2 = wall[np.argsort(tr.range[wall])]
    assert tr.range[w] == pytest.approx(4.0 + 1.5 * 1.0 + 1.5 * 1.0 + 4.0, abs=1e-5)
    assert tr.weight[w] == pytest.approx(0.96 * 1.0 * 0.96, rel=1e-6) and tr.bounces[w] == 3
    np.testing.assert_allclose(tr.last_dir[w], [0.0, 1.0, 0.0], atol=1e-6)
    # ... and once more: 4 % back at y = 1, totally reflected, 4 % back at x = 4, totally
    # reflected again: 4 m more inside glass (6 m of flight), weight 0.9216 x 0.04^2
    assert tr.range[w2] == pytest.approx(11.0 + 1.5 * 4.0, abs=1e-5)
    assert tr.weight[w2] == pytest.approx(0.9216 * 0.04 * 0.04, rel=1e-5) and tr.bounces[w2] == 7
    # the entry face at normal incidence returns its 4 %
    assert tr.hit[0] and tr.specular[0] == pytest.approx(0.04, rel=1e-6)


def test_double_glazing_and_a_two_face_slab(backend):
    # two faces of one mesh wound the same way are two thin panes (T_slab each); wound
    # against each other they close a slab: solid glass, (1 - F)^2, no shift at normal
    # incidence
    v = np.array([[x, s * 50, t * 50] for x in (5.0, 5.02) for s, t in ((-1, -1), (1, -1), (1, 1), (-1, 1))])
    same = MeshData(v, np.array([[0, 2, 1], [0, 3, 2], [4, 6, 5], [4, 7, 6]]))
    slab = MeshData(v, np.array([[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7]]))
    o, d = rays_xy([0.0])
    T = thin_slab(np.array([1.0]), 1.5)[1][0]
    for mesh, weight, rng in ((same, T * T, 10.0), (slab, 0.96 * 0.96, 10.0 + 0.5 * 0.02)):
        scene(backend, [mesh, plane_x(10.0)])
        tr = trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (1.0, 1.5, 1.0)}))
        wall = np.flatnonzero((tr.instance == 1) & tr.hit)
        # the wall: straight through, and (the slab) once more after a round trip inside
        first = wall[np.argmin(tr.range[wall])]
        assert tr.weight[first] == pytest.approx(weight, rel=1e-5)
        assert tr.range[first] == pytest.approx(rng, abs=5e-6)


def test_bounds_end_paths(backend):
    # two glass panes facing each other: the reflections between them are cut by
    # max_bounces and the weight threshold
    scene(backend, [plane_x(5.0), plane_x(6.0), plane_x(10.0)])
    o, d = rays_xy([0.01])
    opt = glass_of({0: (1.0, 1.5, 1.0), 1: (1.0, 1.5, 1.0)})
    none = trace(backend, o, d, 100.0, None, 0, optics=opt)
    assert none.range.shape == (1,) and not none.hit[0]  # no event followed: the pane's row only
    tr = trace(backend, o, d, 100.0, None, 8, optics=opt)
    assert np.all(tr.bounces <= 8) and np.all(tr.weight[1:] >= MIN_WEIGHT)
    wall = np.flatnonzero((tr.instance == 2) & tr.hit)
    # straight through both (T^2), and after one round trip between them (T^2 R^2): R^2 < 1e-2
    # ... the next round trip (R^4 ~ 3.5e-5) is below the threshold
    R, T = (v[0] for v in thin_slab(np.array([np.cos(0.01)]), 1.5))
    np.testing.assert_allclose(np.sort(tr.weight[wall])[::-1], [T * T, T * T * R * R], rtol=1e-5)
    two = trace(backend, o, d, 100.0, None, 2, optics=opt)
    assert np.flatnonzero((two.instance == 2) & two.hit).size == 1 and two.bounces.max() == 2


def test_alpha_lets_a_seeded_share_of_rays_pass(backend):
    # a plane of alpha 0.5 at x = 5, a wall at x = 10: a ray passes where its uniform
    # (one per ray, in ray order) is below 1 - alpha
    scene(backend, [plane_x(5.0), plane_x(10.0)])
    n = 2000
    o, d = rays_xy(np.linspace(-0.5, 0.5, n))
    opt = glass_of({0: (0.0, 1.45, 0.5)})
    tr = trace(backend, o, d, 100.0, None, 8, optics=opt, rng=np.random.default_rng(11))
    assert tr.range.shape == (n,) and np.all(tr.hit)  # alpha adds no rows
    passed = tr.instance == 1
    expect = np.random.default_rng(11).random(n) < 0.5
    assert np.array_equal(passed, expect) and passed.sum() == expect.sum() == 1031
    assert abs(passed.mean() - 0.5) < 4 * np.sqrt(0.25 / n)
    np.testing.assert_allclose(tr.range[passed], 10.0 / np.cos(np.linspace(-0.5, 0.5, n)[passed]), atol=2e-6)
    np.testing.assert_allclose(tr.range[~passed], 5.0 / np.cos(np.linspace(-0.5, 0.5, n)[~passed]), atol=2e-6)
    assert np.all(tr.weight == 1.0)
    # seeded: the same draws again; alpha 0 passes all, alpha 1 draws nothing
    again = trace(backend, o, d, 100.0, None, 8, optics=opt, rng=np.random.default_rng(11))
    assert np.array_equal(again.instance, tr.instance)
    assert np.all(trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (0.0, 1.45, 0.0)}),
                        rng=np.random.default_rng(11)).instance == 1)
    g = np.random.default_rng(11)
    trace(backend, o, d, 100.0, None, 8, optics=glass_of({0: (0.0, 1.45, 1.0)}), rng=g)
    assert g.random() == np.random.default_rng(11).random()


def contract_trace():
    """The tracer of the contract commit (before glass), loaded from git."""
    src = subprocess.run(["git", "show", f"{CONTRACT}:blensor_addon/raycast/trace.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("blensor_addon.raycast._trace_contract")
    mod.__package__ = "blensor_addon.raycast"
    exec(compile(src, "trace_contract.py", "exec"), mod.__dict__)
    return mod.trace


def test_without_glass_the_rows_are_the_contract_tracers(backend):
    # issue 22, section 3: optics=None, and optics that find every surface opaque, give the
    # contract commit's rows byte for byte, mirrors included
    mirror = MeshData(np.array([[2, -10, -10], [2, 10, -10], [2, 10, 10], [2, -10, 10]], float),
                      np.array([[0, 2, 1], [0, 3, 2]]))
    scene(backend, [mirror, plane_y(5.0), plane_y(-7.0), plane_x(-20.0, half=5.0)])
    rng = np.random.default_rng(2)
    d = rng.normal(size=(3000, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o = rng.uniform(-1, 1, (3000, 3))
    old = contract_trace()
    for mb in (0, 1, 8):
        ref = old(backend, o, d, 30.0, lambda i, p: i == 0, mb)
        for opt in (None, glass_of({})):
            tr = trace(backend, o, d, 30.0, lambda i, p: i == 0, mb, optics=opt, rng=np.random.default_rng(0))
            for f in ref._FIELDS:
                a, b = getattr(ref, f), getattr(tr, f)
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (mb, opt, f)
            assert np.all(tr.diffuse == 1.0) and np.all(tr.specular == 0.0)


# -- the scene layer: real Blender scenes --------------------------------------------------

def glass_by_name(monkeypatch, table):
    """Give the scene's :class:`~blensor_addon.core.materials.MaterialTable` glass and
    alpha by material name (``table``: name -> (transmission, ior, alpha)), as the node-tree
    reader will: the arrays are filled when the scene layer first asks ``has_optics``
    (before it calls ``optics``), the table's own methods do the rest."""
    from blensor_addon.core.materials import MaterialTable
    has = MaterialTable.has_optics

    def has_optics(self):
        if not getattr(self, "_test_optics", False):
            m = len(self.names)
            t, ior, a = np.zeros(m, np.float32), np.full(m, 1.45, np.float32), np.ones(m, np.float32)
            for i, name in enumerate(self.names):
                if name in table:
                    t[i], ior[i], a[i] = table[name]
            self.transmission, self.ior, self.alpha = t, ior, a
            self._test_optics = True
        return has(self)
    monkeypatch.setattr(MaterialTable, "has_optics", has_optics)


def record_casts(monkeypatch):
    """The (kwargs, hits) of every :meth:`TimelineContext.cast` from now on."""
    from blensor_addon.scene.context import TimelineContext
    seen = []
    cast = TimelineContext.cast

    def recording(self, *args, **kwargs):
        hits = cast(self, *args, **kwargs)
        seen.append((kwargs, hits))
        return hits
    monkeypatch.setattr(TimelineContext, "cast", recording)
    return seen


def tube(bpy, name, radius, material=None, segments=360):
    """An open cylinder (no caps: single faces) of ``radius`` around the sensor's spin
    axis (Blender Y: the generic sensor's elevation 0 plane is y = 0)."""
    from conftest import cylinder_mesh
    import math
    v, f = cylinder_mesh(radius, -2.0, 2.0, segments)
    obj = add_mesh(bpy, name, v, f, material)
    obj.rotation_euler = (math.pi / 2, 0, 0)
    return obj


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_sweep_through_a_glass_tube_in_continuous_time(bpy_mod, empty_scene, monkeypatch, backend_name):
    # a single-face glass tube of radius 5 m (IOR 1.5) inside an opaque tube of radius 10 m;
    # a 10 Hz revolution spans three scene frames: the split cast's steps are scattered,
    # the extra rows come after the N rays' rows with their global ray, time and step
    glass = bpy_mod.data.materials.new("Glass")
    tube(bpy_mod, "Pane", 5.0, glass)
    tube(bpy_mod, "Wall", 10.0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.5)
    glass_by_name(monkeypatch, {"Glass": (1.0, 1.5, 1.0)})
    seen = record_casts(monkeypatch)
    r = blensor_addon_scan(cam, backend_name)
    (kw, h), = seen
    assert kw["split"] is True
    n = 720
    assert h.range.shape[0] > n and np.array_equal(h.ray[:n], np.arange(n))
    assert np.all(np.diff(h.ray[n:]) >= 0)
    np.testing.assert_array_equal(h.time[n:], h.time[h.ray[n:]])
    np.testing.assert_array_equal(h.segment[n:], h.segment[h.ray[n:]])
    assert len(np.unique(h.segment)) >= 3  # cast in several steps
    # the rays' first ends: the pane at 5 m, seen (its specular reflection, R_slab) where the
    # facet is met within the acceptance angle, else no return
    R0, T0 = (v[0] for v in thin_slab(np.array([1.0]), 1.5))
    cos = h.cos_incidence[:n]
    within = cos >= np.cos(SPECULAR_ACCEPTANCE)
    assert 0 < within.sum() < n
    assert np.array_equal(h.hit[:n], within)
    np.testing.assert_allclose(h.range[:n][within], 5.0 * np.cos(np.pi / 360), atol=2e-6)  # facet centres
    R, _ = thin_slab(cos[within], 1.5)
    np.testing.assert_allclose(h.reflectivity[:n][within], R, rtol=1e-5)
    # behind the pane, for every ray, the wall at 10 m with the pane's T_slab (0.923)
    names = {o["id"]: o["name"] for o in r.objects}
    wall_id = [k for k, v in names.items() if v == "Wall"][0]
    straight = np.flatnonzero((h.object_id == wall_id) & (h.weight > 0.5))
    assert np.array_equal(h.ray[straight], np.arange(n))
    np.testing.assert_allclose(h.range[straight], 10.0, atol=4e-4)  # 360 facets: within 10 (1 - cos 0.5 deg)
    np.testing.assert_allclose(h.weight[straight], T0, rtol=1e-3)
    np.testing.assert_allclose(h.reflectivity[straight], 0.8)
    # the strongest candidate of each beam (the returns stage's default): the wall
    assert len(r) == n and {names[i] for i in np.unique(r.object_id)} == {"Wall"}
    np.testing.assert_allclose(r.range, 10.0, atol=4e-4)


def blensor_addon_scan(cam, backend, **kw):
    return blensor_addon.scan(cam, backend=backend, **kw)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_window_in_a_scan_and_without_glass(bpy_mod, empty_scene, monkeypatch, backend_name):
    # a window pane (single face) 5 m ahead of a wall 10 m ahead: as glass the scan sees the
    # wall through it; the pane opaque (no optics), the scan sees the pane
    from conftest import quad
    glass = bpy_mod.data.materials.new("Glass")
    v, f = quad(-20, 20, -20, 20, -5.0)
    add_mesh(bpy_mod, "Pane", v, f, glass)
    v, f = quad(-50, 50, -50, 50, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-30.0, end_angle=30.0, angle_resolution=0.25)
    opaque = blensor_addon_scan(cam, backend_name, axes="blensor")
    assert len(opaque) == 240 and np.all(np.abs(opaque.xyz[:, 2] + 5.0) < 1e-4)
    glass_by_name(monkeypatch, {"Glass": (1.0, 1.5, 1.0)})
    seen = record_casts(monkeypatch)
    r = blensor_addon_scan(cam, backend_name, axes="blensor")
    assert len(r) == 240 and np.all(np.abs(r.xyz[:, 2] + 10.0) < 1e-4)
    (_, h), = seen
    n = 240
    # one beam meets the pane at normal incidence: the pane's 7.7 % and the wall's 0.923^2 x 0.8
    normal = np.flatnonzero(h.hit[:n])
    assert normal.size == 1 and h.range[normal[0]] == pytest.approx(5.0, abs=1e-5)
    assert h.reflectivity[normal[0]] == pytest.approx(2 * 0.04 / 1.04, rel=1e-5)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_scene_without_glass_scans_byte_identically_through_the_split_tracer(bpy_mod, empty_scene,
                                                                              monkeypatch, backend_name):
    # issue 22, section 3: the split tracer on a scene whose materials are all opaque (a
    # mirror among them) gives the scan of the tracer without optics, byte for byte
    from conftest import quad
    mat = bpy_mod.data.materials.new("Mirror")
    mat.blensor.mirror = True
    d = 1.0
    add_mesh(bpy_mod, "Mirror", [(-d, -d, -4 + d), (d, -d, -4 - d), (d, d, -4 - d), (-d, d, -4 + d)],
             [(0, 1, 2, 3)], mat)
    add_mesh(bpy_mod, "Wall", [(6, -50, -50), (6, 50, -50), (6, 50, 50), (6, -50, 50)], [(0, 1, 2, 3)])
    v, f = quad(-50, 50, -50, 50, -12.0)
    add_mesh(bpy_mod, "Back", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "-2, 0, 2", angle_resolution=0.5, noise=True)
    ref = blensor_addon_scan(cam, backend_name, seed=3)
    glass_by_name(monkeypatch, {"Nothing": (1.0, 1.5, 1.0)})
    from blensor_addon.core.materials import MaterialTable
    monkeypatch.setattr(MaterialTable, "has_optics", lambda self: True)  # the split tracer, all opaque
    calls = []
    import blensor_addon.scene.context as context
    real = context.trace
    monkeypatch.setattr(context, "trace", lambda *a, **k: calls.append(k["optics"]) or real(*a, **k))
    r = blensor_addon_scan(cam, backend_name, seed=3)
    assert calls and all(c is not None for c in calls)
    a, b = ref.arrays(), r.arrays()
    assert a.keys() == b.keys() and len(ref) > 100
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_alpha_in_a_scan_is_seeded(bpy_mod, empty_scene, monkeypatch, backend_name):
    # a plane of alpha 0.3 before a wall: about 70 % of the beams pass; the draws come from
    # the scan's seed (stage_rng), the same seed gives the same points
    from conftest import quad
    leaf = bpy_mod.data.materials.new("Leaf")
    v, f = quad(-50, 50, -50, 50, -5.0)
    add_mesh(bpy_mod, "Leaves", v, f, leaf)
    v, f = quad(-50, 50, -50, 50, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-40.0, end_angle=40.0, angle_resolution=0.1)
    glass_by_name(monkeypatch, {"Leaf": (0.0, 1.45, 0.3)})
    one = blensor_addon_scan(cam, backend_name, seed=5, axes="blensor")
    two = blensor_addon_scan(cam, backend_name, seed=5, axes="blensor")
    other = blensor_addon_scan(cam, backend_name, seed=6, axes="blensor")
    far = np.abs(one.xyz[:, 2] + 10.0) < 1e-4
    assert len(one) == one.num_rays > 790 and np.all(far | (np.abs(one.xyz[:, 2] + 5.0) < 1e-4))
    assert abs(far.mean() - 0.7) < 4 * np.sqrt(0.21 / len(one))
    assert one.xyz.tobytes() == two.xyz.tobytes() and one.xyz.tobytes() != other.xyz.tobytes()


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_partly_transmitting_pane_counts_its_transmission_once(bpy_mod, empty_scene, monkeypatch,
                                                                backend_name):
    # issue 22 review: a Principled pane (base 0.8, transmission 0.5, IOR 1.5) 5 m ahead of a
    # wall. The pane row's reflectivity is rho (1 - t)(1 - F(theta)) = 0.8 x 0.5 x (1 - F) (plus
    # the specular share within the acceptance). Before the fix the table already held
    # (1 - t) rho + t 0.02 = 0.41, and the tracer's (1 - t)(1 - F) came on top: 0.197 at normal
    # incidence instead of 0.384.
    mat = _material(bpy_mod, "HalfGlass", (0.8, 0.8, 0.8))
    _bsdf(mat).inputs["Transmission Weight"].default_value = 0.5
    _bsdf(mat).inputs["IOR"].default_value = 1.5
    v, f = quad(-20, 20, -20, 20, -5.0)
    add_mesh(bpy_mod, "Pane", v, f, mat)
    v, f = quad(-50, 50, -50, 50, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-30.0, end_angle=30.0, angle_resolution=0.25, ref_limit=-1.0)
    mt = _snapshot(bpy_mod).materials
    row = mt.names.index("HalfGlass")
    assert mt.reflectivity[row] == np.float32(0.8) and mt.transmission[row] == np.float32(0.5)
    seen = record_casts(monkeypatch)
    blensor_addon.scan(cam, axes="blensor", backend=backend_name)
    rng = np.concatenate([h.range for _, h in seen]).astype(np.float64)
    hit = np.concatenate([h.hit for _, h in seen])
    refl = np.concatenate([h.reflectivity for _, h in seen]).astype(np.float64)
    pane = hit & (rng < 6.0)
    assert pane.sum() == 240  # every beam meets the pane (its own row) before the wall
    cos_i = 5.0 / rng[pane]
    expected = 0.8 * 0.5 * (1.0 - fresnel_unpolarized(cos_i, 1.0, 1.5))
    off = cos_i < math.cos(SPECULAR_ACCEPTANCE)  # no specular share: the diffuse alone
    assert off.sum() >= 238
    np.testing.assert_allclose(refl[pane][off], expected[off], rtol=1e-4)
    assert refl[pane][off].max() == pytest.approx(0.8 * 0.5 * 0.96, rel=1e-3)


def test_pure_glass_keeps_the_glass_entry_and_mixes_keep_the_opaque_part(bpy_mod, empty_scene):
    # issue 22 review: a Glass BSDF (no opaque part) keeps the library's glass entry (0.02);
    # a Mix of Glass and a Diffuse 0.6 keeps 0.6 (the opaque part's), transmission 0.5
    from blensor_addon.core.materials import library
    glass = _material(bpy_mod, "Clear")
    _replace_surface(glass, "ShaderNodeBsdfGlass")
    mix = _material(bpy_mod, "Mixed")
    nt = mix.node_tree
    m = nt.nodes.new("ShaderNodeMixShader")
    g = nt.nodes.new("ShaderNodeBsdfGlass")
    d = nt.nodes.new("ShaderNodeBsdfDiffuse")
    d.inputs["Color"].default_value = (0.6, 0.6, 0.6, 1.0)
    m.inputs[0].default_value = 0.5
    nt.links.new(g.outputs[0], m.inputs[1])
    nt.links.new(d.outputs[0], m.inputs[2])
    nt.links.new(m.outputs[0], nt.get_output_node("ALL").inputs["Surface"])
    for i, mat in enumerate((glass, mix)):
        v, f = quad(-1, 1, -1, 1, -5)
        add_mesh(bpy_mod, mat.name, v, f, mat, location=(3 * i, 0, 0))
    add_camera(bpy_mod)
    mt = _snapshot(bpy_mod).materials
    c, x = mt.names.index("Clear"), mt.names.index("Mixed")
    assert mt.reflectivity[c] == np.float32(library()["glass"].at(905)) == np.float32(0.02)
    assert mt.reflectivity[x] == pytest.approx(0.6, rel=1e-6) and mt.transmission[x] == np.float32(0.5)


def test_glass_reflects_back_within_half_the_beam_divergence(bpy_mod, empty_scene):
    # issue 22 review: the specular return of a clear pane counts within half the sensor's beam
    # divergence (the reflected beam overlaps the outgoing one), the 2 mrad default without one.
    # A pane 5 m ahead; columns every 0.1 deg from -0.35 deg: 0.87, 2.62, 4.36, 6.11 mrad off normal
    mat = _material(bpy_mod, "Clear", (0.8, 0.8, 0.8))
    _bsdf(mat).inputs["Transmission Weight"].default_value = 1.0
    _bsdf(mat).inputs["IOR"].default_value = 1.5
    v, f = quad(-20, 20, -20, 20, -5.0)
    add_mesh(bpy_mod, "Pane", v, f, mat)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-0.35, end_angle=0.35, angle_resolution=0.1)

    def offsets_mrad(**kw):
        r = blensor_addon.scan(cam, axes="blensor", **kw)
        return sorted(np.round(np.abs(np.arccos(np.clip(5.0 / r.range, -1, 1))) * 1e3, 1).tolist())

    assert max(offsets_mrad()) < SPECULAR_ACCEPTANCE * 1e3  # the default: 2 mrad
    within4 = offsets_mrad(beam_divergence=0.008)  # half of 8 mrad: 4 mrad
    assert 2.0 < max(within4) < 4.0 and len(within4) > len(offsets_mrad())  # 2.62 in, 4.36 out
