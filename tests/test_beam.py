"""Beam divergence and multiple returns (docs/physics.md): the footprint's sub-rays
(geometry, Gaussian shares, determinism), echo formation and the return modes on
synthetic hits, and real scans of a wall edge (two echoes splitting the energy as the
footprint does, dual returns' return_number / number_of_returns) and of the demo scene
(one sub-ray per beam: the contract path's bytes)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.sensors import beam
from blensor_addon.core.sensors.raypattern import RayPattern, angles_of
from blensor_addon.core.sensors.returns import Returns, ReturnSettings

from conftest import add_camera, add_mesh, generic_sensor, quad, without_glass


def settings(**kw):
    base = dict(samples_per_beam=1, beam_divergence=0.0, beam_divergence_vertical=0.0, focus_distance=0.0,
                divergence_algorithm="echoes", returns="strongest", max_returns=3, echo_separation=1.0)
    base.update(kw)
    return ReturnSettings(**base)  # unvalidated: the stages read it through the schema


def pattern_of(directions, origins=None):
    d = np.asarray(directions, dtype=np.float64)
    d = (d / np.linalg.norm(d, axis=1)[:, None]).astype(np.float32)
    az, el = angles_of(d)
    n = d.shape[0]
    return RayPattern(directions=d, azimuth=az, elevation=el, channel=np.zeros(n, np.uint16),
                      ray_index=np.arange(n, dtype=np.int64), timestamp=np.linspace(0.0, 1e-3, n),
                      origins=origins)


class FakeHits:
    """The Hits protocol's fields form_returns reads, for core-only tests."""

    last_dir = returned = energy = None  # no final segment kept (cos_incidence given); not echoes

    def __init__(self, rng_, ray, refl=None, cos=None, weight=None, hit=None):
        n = len(rng_)
        self.range = np.asarray(rng_, dtype=np.float64)
        self.ray = np.asarray(ray, dtype=np.int64)
        self.hit = np.isfinite(self.range) if hit is None else np.asarray(hit, bool)
        self.reflectivity = np.full(n, 0.5, np.float32) if refl is None else np.asarray(refl, np.float32)
        self.cos_incidence = np.ones(n) if cos is None else np.asarray(cos, dtype=np.float64)
        self.weight = np.ones(n, np.float32) if weight is None else np.asarray(weight, np.float32)

    def take(self, idx):
        out = FakeHits.__new__(FakeHits)
        for k in ("range", "ray", "hit", "reflectivity", "cos_incidence", "weight"):
            setattr(out, k, getattr(self, k)[idx])
        return out


def sub_of(n_beams, S):
    uv, share = beam.disc_pattern(S)
    return beam.SubRays(directions=np.zeros((n_beams * S, 3)), origins=None, times=np.zeros(n_beams * S),
                        beam=np.repeat(np.arange(n_beams), S), share=np.tile(share, n_beams), per_beam=S)


# -- footprint ------------------------------------------------------------------------------------

def test_pattern_shares_and_layout():
    for S in (1, 2, 3, 7, 8, 19, 37, 64):
        uv, share = beam.disc_pattern(S)
        assert uv.shape == (S, 2) and share.shape == (S,)
        assert abs(share.sum() - 1.0) < 1e-12 and (share > 0).all()
        assert (np.hypot(uv[:, 0], uv[:, 1]) < 1.0).all()
        assert np.array_equal(uv[0], [0.0, 0.0])
        assert sum(beam.ring_counts(S)) == S - 1
    assert beam.ring_counts(7) == (6,) and beam.ring_counts(19) == (6, 12)
    # S = 7: centre disc radius sqrt(1/7) holds 1 - exp(-2/7) of the Gaussian, the ring the rest up to rho 1
    uv, share = beam.disc_pattern(7)
    total = 1.0 - math.exp(-2.0)
    assert share[0] == pytest.approx((1.0 - math.exp(-2.0 / 7.0)) / total, rel=1e-12)
    np.testing.assert_allclose(share[1:], (math.exp(-2.0 / 7.0) - math.exp(-2.0)) / 6.0 / total, rtol=1e-12)
    np.testing.assert_allclose(np.hypot(uv[1:, 0], uv[1:, 1]), math.sqrt(4.0 / 7.0), rtol=1e-12)


def gaussian_split(t):
    """Share of the Gaussian profile exp(-2 rho^2) truncated to the unit disc on the side u > t
    of an edge (numerical integration on a fine grid: the reference the pattern approximates)."""
    g = (np.arange(2000) + 0.5) / 1000.0 - 1.0
    u, v = np.meshgrid(g, g)
    inside = u * u + v * v <= 1.0
    w = np.exp(-2.0 * (u * u + v * v)) * inside
    return float(w[u > t].sum() / w.sum())


def test_pattern_edge_split_follows_the_gaussian():
    # issue 22, section 5: a beam half on a near and half on a far wall splits as the footprint does;
    # the sampled footprint approaches the continuous Gaussian's split as S grows
    uv, share = beam.disc_pattern(64)
    for t in (-0.6, -0.3, 0.05, 0.35, 0.7):
        assert share[uv[:, 0] > t].sum() == pytest.approx(gaussian_split(t), abs=0.05)
    # and the edge through the centre splits about 50/50 (sub-rays on the edge counted half)
    on = np.abs(uv[:, 0]) < 1e-12
    assert share[(uv[:, 0] > 0) & ~on].sum() + 0.5 * share[on].sum() == pytest.approx(0.5, abs=0.02)


def test_footprint_single_sub_ray_is_the_beam():
    p = pattern_of([[0, 0, -1], [1, 0.2, 0], [0, 1, 0]], origins=np.ones((3, 3), np.float32))
    for kw in ({}, {"beam_divergence": 0.003}, {"samples_per_beam": 7}):
        sub = beam.footprint(settings(**kw), p)
        assert sub.per_beam == 1
        assert np.array_equal(sub.directions, p.directions.astype(np.float64))
        assert np.array_equal(sub.origins, p.origins.astype(np.float64))
        assert np.array_equal(sub.share, np.ones(3)) and np.array_equal(sub.beam, np.arange(3))
        assert sub.times is p.timestamp


@pytest.mark.parametrize("S", [7, 19, 64])
def test_footprint_within_the_elliptical_cone(S):
    # sub-rays inside the cone of full angles (3 mrad horizontal, 1 mrad vertical), beam-major,
    # deterministic; beams straight up and down included (their horizontal axis is +X)
    rng = np.random.default_rng(1)
    d = rng.normal(size=(50, 3))
    d = np.concatenate([d, [[0, 1, 0], [0, -1, 0], [0, 0, -1]]])
    p = pattern_of(d)
    s = settings(samples_per_beam=S, beam_divergence=0.003, beam_divergence_vertical=0.001)
    sub = beam.footprint(s, p)
    assert sub.directions.shape == (len(p) * S, 3) and sub.per_beam == S and sub.origins is None
    np.testing.assert_allclose(np.linalg.norm(sub.directions, axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(sub.beam, np.repeat(np.arange(len(p)), S))
    np.testing.assert_allclose(np.bincount(sub.beam, sub.share), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(sub.times, np.repeat(p.timestamp, S))
    axis = p.directions.astype(np.float64)
    axis /= np.linalg.norm(axis, axis=1)[:, None]
    h, v = beam.beam_axes(axis)
    np.testing.assert_allclose(np.einsum("ij,ij->i", h, axis), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("ij,ij->i", v, axis), 0.0, atol=1e-12)
    assert np.isfinite(h).all() and np.isfinite(v).all()
    np.testing.assert_allclose(h[-3], [1.0, 0.0, 0.0])  # straight up: h = +X
    dd = sub.directions.reshape(len(p), S, 3)
    a = np.arctan2(np.einsum("bsk,bk->bs", dd, h), np.einsum("bsk,bk->bs", dd, axis))
    b = np.arctan2(np.einsum("bsk,bk->bs", dd, v), np.einsum("bsk,bk->bs", dd, axis))
    assert ((a / 0.0015) ** 2 + (b / 0.0005) ** 2 < 1.0 + 1e-9).all()
    # the pattern's own position, scaled by the half angles
    uv, _ = beam.disc_pattern(S)
    np.testing.assert_allclose(a, np.broadcast_to(0.0015 * uv[:, 0], a.shape), atol=1e-12)
    np.testing.assert_allclose(b, np.broadcast_to(0.0005 * uv[:, 1], b.shape), atol=1e-12)
    # h is the direction in which the azimuth grows, v toward +Y (up)
    az = angles_of(axis[:1] + 1e-6 * h[:1])[0] - angles_of(axis[:1])[0]
    assert np.mod(az[0] + np.pi, 2 * np.pi) - np.pi > 0
    assert v[-1][1] == pytest.approx(1.0)  # the beam at -Z: vertical axis +Y
    again = beam.footprint(s, p)
    assert np.array_equal(again.directions, sub.directions) and np.array_equal(again.share, sub.share)


def test_footprint_focus_distance():
    # every sub-ray crosses the axis at the focus F = o + f d, starting on the aperture plane
    f = 40.0
    o = np.array([[0.1, 0.2, 0.0], [0.0, 0.0, 0.0]], np.float32)
    p = pattern_of([[0.3, 0.1, -1.0], [1.0, 0.0, 0.0]], origins=o)
    sub = beam.footprint(settings(samples_per_beam=7, beam_divergence=0.004, focus_distance=f), p)
    d = p.directions.astype(np.float64)
    d /= np.linalg.norm(d, axis=1)[:, None]
    F = np.repeat(o + f * d, 7, axis=0)
    rel = F - sub.origins
    along = np.einsum("ij,ij->i", rel, sub.directions)
    np.testing.assert_allclose(rel - along[:, None] * sub.directions, 0.0, atol=1e-9)  # F on the sub-ray
    np.testing.assert_allclose(np.einsum("ij,ij->i", sub.origins - np.repeat(o, 7, axis=0),
                                         np.repeat(d, 7, axis=0)), 0.0, atol=1e-9)  # aperture plane
    # width at the aperture: f tan(a) off the axis for the ring (rho = sqrt(4/7) of the half angle)
    off = np.linalg.norm(sub.origins - np.repeat(o, 7, axis=0), axis=1).reshape(2, 7)
    assert off[:, 0] == pytest.approx([0.0, 0.0], abs=1e-12)
    np.testing.assert_allclose(off[:, 1:], f * math.tan(0.002 * math.sqrt(4.0 / 7.0)), rtol=1e-6)


# -- echoes and return modes on synthetic hits -------------------------------------------------------

def edge_hits(n_beams=1, near=10.0, far=20.0):
    """S = 7 sub-rays per beam: the centre and the ring points with u > 0 on a near wall, the
    others on a far wall (a vertical edge just beside the beam's centre)."""
    uv, share = beam.disc_pattern(7)
    side = uv[:, 0] >= 0.0
    r = np.tile(np.where(side, near, far), n_beams)
    return FakeHits(r, np.arange(7 * n_beams)), sub_of(n_beams, 7), share, side


def test_edge_gives_two_echoes_split_as_the_footprint():
    hits, sub, share, side = edge_hits()
    ret = beam.form_returns(settings(returns="all"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(ret.range) == [10.0, 20.0]
    assert list(ret.return_number) == [1, 2] and list(ret.number_of_returns) == [2, 2]
    split = np.array([share[side].sum(), share[~side].sum()])
    np.testing.assert_allclose(ret.energy, 0.5 * split, rtol=1e-12)
    np.testing.assert_allclose(ret.returned, ret.energy, rtol=1e-12)  # cos 1
    assert ret.energy.sum() == pytest.approx(0.5)  # the beam's whole energy: shares sum to 1
    # 4 of 7 on the near wall: the centre and 3 ring points
    assert share[side].sum() == pytest.approx(share[0] + 3 * share[1])
    assert ret.row[0] == 0 and ret.row[1] in (2, 3, 4)


def test_return_modes():
    hits, sub, share, side = edge_hits()
    near_e, far_e = 0.5 * share[side].sum(), 0.5 * share[~side].sum()
    assert near_e > far_e
    rng = np.random.default_rng(0)

    def run(**kw):
        return beam.form_returns(settings(**kw), sub, hits, 100.0, rng)

    assert list(run(returns="strongest").range) == [10.0]
    assert list(run(returns="first").range) == [10.0]
    assert list(run(returns="last").range) == [20.0]
    r = run(returns="dual")
    assert list(r.range) == [10.0, 20.0] and list(r.return_number) == [1, 2]
    assert list(run(returns="dual_ouster").range) == [10.0, 20.0]
    assert list(run(returns="all", max_returns=1).range) == [10.0]
    for mode in ("strongest", "first", "last"):
        assert list(run(returns=mode).number_of_returns) == [1]
    # max_range drops the far wall
    assert list(beam.form_returns(settings(returns="all"), sub, hits, 15.0, rng).range) == [10.0]
    # average: one mixed range, the centroid of the received power (energy / r^2) of every candidate
    # (issue 22 review: the waveform's centroid, not the energy's), the whole beam's energy
    a = run(divergence_algorithm="average", returns="strongest")
    near_p, far_p = near_e / 100.0, far_e / 400.0
    assert a.range[0] == pytest.approx((10.0 * near_p + 20.0 * far_p) / (near_p + far_p), rel=1e-12)
    assert a.energy[0] == pytest.approx(0.5) and list(a.number_of_returns) == [1]
    # first: the nearest sub-ray's range, the whole beam's energy
    f = run(divergence_algorithm="first")
    assert list(f.range) == [10.0] and f.energy[0] == pytest.approx(0.5) and f.row[0] == 0
    # one echo when the surfaces are closer than echo_separation: the mixed range
    m = run(echo_separation=15.0, returns="all")
    assert len(m) == 1 and m.range[0] == pytest.approx(a.range[0], rel=1e-12)


def test_dual_when_the_strongest_is_the_last():
    # VLP-16 manual, dual return mode: strongest and last; the second strongest when they coincide
    S = 7
    sub = sub_of(3, S)
    # beam 0: echoes at 5 (weak), 10 (medium), 20 (strong, last) -> 10 and 20
    # beam 1: one echo -> reported once; beam 2: 5 (strong), 30 (weak, last) -> both
    # (strength is the received power, energy / r^2: issue 22 review)
    r = np.array([5, 10, 10, 20, 20, 20, 20] + [8] * 7 + [5, 5, 5, 5, 5, 5, 30], float)
    refl = np.array([0.02, 0.3, 0.3, 0.9, 0.9, 0.9, 0.9] + [0.5] * 7 + [0.9] * 6 + [0.01])
    hits = FakeHits(r, np.arange(3 * S), refl=refl)
    d = beam.form_returns(settings(returns="dual"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(d.beam) == [0, 0, 1, 2, 2]
    assert list(d.range) == [10.0, 20.0, 8.0, 5.0, 30.0]
    assert list(d.return_number) == [1, 2, 1, 1, 2] and list(d.number_of_returns) == [2, 2, 1, 2, 2]
    o = beam.form_returns(settings(returns="dual_ouster"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(o.range) == [10.0, 20.0, 8.0, 5.0, 30.0]
    a = beam.form_returns(settings(returns="all", max_returns=15), sub, hits, 100.0, np.random.default_rng(0))
    assert list(a.range) == [5.0, 10.0, 20.0, 8.0, 5.0, 30.0]
    assert list(a.return_number) == [1, 2, 3, 1, 1, 2]
    s = beam.form_returns(settings(returns="strongest"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(s.range) == [20.0, 8.0, 5.0]


def test_random_draws_in_proportion_to_received_power():
    # random: one candidate drawn with probability proportional to its received power (energy / r^2)
    n = 20000
    hits, sub, share, side = edge_hits(n)
    s = settings(divergence_algorithm="random")
    r1 = beam.form_returns(s, sub, hits, 100.0, np.random.default_rng(7))
    r2 = beam.form_returns(s, sub, hits, 100.0, np.random.default_rng(7))
    assert np.array_equal(r1.range, r2.range) and np.array_equal(r1.row, r2.row)  # seeded
    r3 = beam.form_returns(s, sub, hits, 100.0, np.random.default_rng(8))
    assert not np.array_equal(r1.row, r3.row)  # another seed, other draws
    assert len(r1) == n and set(np.unique(r1.range)) == {10.0, 20.0}
    pn, pf = share[side].sum() / 100.0, share[~side].sum() / 400.0
    assert (r1.range == 10.0).mean() == pytest.approx(pn / (pn + pf), abs=0.015)
    # each drawn row is a candidate of its own beam
    assert np.array_equal(sub.beam[hits.ray[r1.row]], np.arange(n))
    np.testing.assert_allclose(r1.energy, 0.5, rtol=1e-12)


def test_dense_and_general_paths_agree():
    # one row per sub-ray (the sort of each beam's S ranges) and with extra path ends (a general sort)
    rng = np.random.default_rng(3)
    S, B = 7, 400
    sub = sub_of(B, S)
    r = rng.choice([5.0, 5.4, 9.0, 12.0, np.inf], size=B * S)
    refl = rng.uniform(0.05, 1.0, B * S)
    cos = rng.uniform(0.1, 1.0, B * S)
    hits = FakeHits(r, np.arange(B * S), refl=refl, cos=cos)
    extra = FakeHits(np.concatenate([r, [np.inf]]), np.concatenate([np.arange(B * S), [0]]),
                     refl=np.concatenate([refl, [0.5]]), cos=np.concatenate([cos, [1.0]]))
    for kw in ({"returns": "all", "max_returns": 15}, {"returns": "dual"}, {"returns": "strongest"},
               {"divergence_algorithm": "average"}, {"divergence_algorithm": "first"},
               {"divergence_algorithm": "random"}):
        a = beam.form_returns(settings(**kw), sub, hits, 100.0, np.random.default_rng(1))
        b = beam.form_returns(settings(**kw), sub, extra, 100.0, np.random.default_rng(1))
        for k in Returns._ARRAYS:
            assert np.array_equal(getattr(a, k), getattr(b, k)), (kw, k)
        # rows in beam order, nearest first within a beam
        assert (np.diff(a.beam) >= 0).all()
        same = np.diff(a.beam) == 0
        assert (np.diff(a.range)[same] > 0).all()


def test_glass_extra_rows_join_their_beam():
    # rows past the sub-rays are extra path ends (a pane at 4 m, what is behind at 10 m)
    S = 7
    sub = sub_of(2, S)
    r = np.concatenate([np.full(7, 4.0), np.full(7, 12.0), np.full(7, 10.0)])
    ray = np.concatenate([np.arange(14), np.arange(7)])
    w = np.concatenate([np.full(7, 0.2), np.ones(7), np.full(7, 0.9)])
    hits = FakeHits(r, ray, weight=w)
    ret = beam.form_returns(settings(returns="all"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(ret.beam) == [0, 0, 1] and list(ret.range) == [4.0, 10.0, 12.0]
    np.testing.assert_allclose(ret.energy, [0.5 * 0.04, 0.5 * 0.81, 0.5], rtol=1e-6)
    assert list(ret.number_of_returns) == [2, 2, 1]
    assert ret.row[1] >= 14  # the echo behind the pane is an extra row


def test_rank_returns():
    num, tot = beam.rank_returns(np.array([3, 1, 3, 3, 1]), np.array([9.0, 2.0, 1.0, 5.0, 1.0]))
    assert list(num) == [3, 2, 1, 2, 1] and list(tot) == [3, 2, 3, 3, 2]
    assert num.dtype == np.uint8


def test_no_candidates():
    sub = sub_of(2, 7)
    ret = beam.form_returns(settings(returns="dual"), sub, FakeHits(np.full(14, np.inf), np.arange(14)),
                            100.0, np.random.default_rng(0))
    assert len(ret) == 0 and ret.return_number.dtype == np.uint8


# -- real scans ------------------------------------------------------------------------------------------

def edge_scene(bpy_mod):
    """A near wall (10 m, x <= 1 mm) and a far wall (20 m) seen by a one-laser rotating sensor at
    the origin looking down -Z (blensor axes): the beam at azimuth 0 has the near wall's edge 1 mm
    beside its centre (the footprint's ring is at 7.6 mm at 10 m for 2 mrad)."""
    v, f = quad(-50.0, 0.001, -50.0, 50.0, -10.0)
    add_mesh(bpy_mod, "Near", v, f)
    v, f = quad(-100.0, 100.0, -100.0, 100.0, -20.0)
    add_mesh(bpy_mod, "Far", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-1.0, end_angle=1.0, angle_resolution=0.5, max_range=50.0)
    return cam


def test_scan_wall_edge_two_echoes(bpy_mod, empty_scene):
    cam = edge_scene(bpy_mod)
    kw = dict(axes="blensor", samples_per_beam=7, beam_divergence=0.002)
    r = blensor_addon.scan(cam, returns="all", **kw)
    col = np.round(np.degrees(np.mod(r.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    edge = col == 0
    # the edge beam: two returns, near then far, energies (lambert intensity) split as the footprint
    assert edge.sum() == 2
    np.testing.assert_allclose(r.range[edge], [10.0, 20.0], atol=1e-4)
    assert list(r.return_number[edge]) == [1, 2] and list(r.number_of_returns[edge]) == [2, 2]
    uv, share = beam.disc_pattern(7)
    near = share[uv[:, 0] >= 0].sum()  # h = -X at azimuth 0: the sub-rays with u >= 0 meet the near wall
    np.testing.assert_allclose(r.intensity[edge], 0.8 * np.array([near, 1.0 - near]), rtol=1e-4)
    names = {o["id"]: o["name"] for o in r.objects}
    assert [names[i] for i in r.object_id[edge]] == ["Near", "Far"]
    # beams fully on one wall: one return each, the whole energy
    assert (r.number_of_returns[~edge] == 1).all()
    cos = np.cos(np.radians(0.5 * np.abs(col[~edge])))
    np.testing.assert_allclose(r.intensity[~edge], 0.8 * cos, rtol=1e-4)
    # average: one mixed range between the walls, the centroid of the received power (energy / r^2)
    a = blensor_addon.scan(cam, divergence_algorithm="average", **kw)
    ae = np.round(np.degrees(np.mod(a.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int) == 0
    pn, pf = near / 100.0, (1.0 - near) / 400.0
    assert a.range[ae][0] == pytest.approx((10.0 * pn + 20.0 * pf) / (pn + pf), abs=1e-3)
    assert "return_number" not in a.extra  # one return per beam: no per-return fields


def test_scan_dual_returns(bpy_mod, empty_scene):
    cam = edge_scene(bpy_mod)
    r = blensor_addon.scan(cam, axes="blensor", samples_per_beam=7, beam_divergence=0.002, returns="dual")
    assert "return_number" in r.capabilities.fields and "number_of_returns" in r.capabilities.fields
    assert r.return_number.dtype == np.uint8
    col = np.round(np.degrees(np.mod(r.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    edge = col == 0
    # the strongest (near: 4 of 7 sub-rays, centre included) and the last (far)
    np.testing.assert_allclose(r.range[edge], [10.0, 20.0], atol=1e-4)
    assert list(r.return_number[edge]) == [1, 2] and list(r.number_of_returns[edge]) == [2, 2]
    assert (r.return_number[~edge] == 1).all() and (r.number_of_returns[~edge] == 1).all()
    assert len(r) == r.num_rays + 1
    # strongest alone: the near wall on the edge beam, one point per beam
    s = blensor_addon.scan(cam, axes="blensor", samples_per_beam=7, beam_divergence=0.002)
    assert len(s) == s.num_rays and "return_number" not in s.extra


def _stub_footprint(s, pattern):
    """The contract's stub (commit 'Contract for issue 22'): the beams themselves."""
    n = len(pattern)
    o = None if pattern.origins is None else pattern.origins.astype(np.float64)
    return beam.SubRays(directions=pattern.directions.astype(np.float64), origins=o, times=pattern.timestamp,
                        beam=np.arange(n, dtype=np.int64), share=np.ones(n), per_beam=1)


def _stub_form_returns(s, sub, hits, max_range, rng, select=True):
    """The contract's stub: the strongest candidate of each beam."""
    ok = np.asarray(hits.hit) & (np.asarray(hits.range) <= max_range)
    rows = np.flatnonzero(ok)
    cand = hits.take(rows)
    ray = np.asarray(cand.ray)
    b = sub.beam[ray]
    w = np.asarray(cand.weight, dtype=np.float64)
    refl = np.asarray(cand.reflectivity)
    returned = sub.share[ray] * (w * w) * refl
    energy = returned * np.asarray(cand.cos_incidence)
    order = np.lexsort((rows, -energy, b))
    first = np.ones(order.shape[0], bool)
    first[1:] = b[order][1:] != b[order][:-1]
    pick = np.sort(order[first])
    k = pick.shape[0]
    return Returns(beam=b[pick], row=rows[pick], range=np.asarray(cand.range, dtype=np.float64)[pick],
                   reflectivity=refl[pick], returned=returned[pick], energy=energy[pick],
                   return_number=np.ones(k, np.uint8), number_of_returns=np.ones(k, np.uint8),
                   weather=np.zeros(k, bool))


def test_single_sub_ray_is_the_contract_path(bpy_mod, crossing, monkeypatch):
    # byte identity of the default path: one sub-ray per beam gives the contract stub's points, for
    # every divergence algorithm and a divergence set with one sample (an HDL-64E S2 turn, frame 12)
    without_glass(bpy_mod)  # the stub treats glass as opaque: compare on opaque surfaces
    cam = bpy_mod.data.objects["Velodyne"]
    cam.data.blensor.end_angle = 360.0
    results = {}
    for name, kw in (("default", {}), ("divergence", {"beam_divergence": 0.002}),
                     ("first", {"divergence_algorithm": "first"}),
                     ("average", {"divergence_algorithm": "average", "beam_divergence": 0.002}),
                     ("random", {"divergence_algorithm": "random"})):
        results[name] = blensor_addon.scan(cam, frame=12, **kw)
    monkeypatch.setattr(beam, "footprint", _stub_footprint)
    monkeypatch.setattr(beam, "form_returns", _stub_form_returns)
    ref = blensor_addon.scan(cam, frame=12)
    assert len(ref) > 100_000
    for name, r in results.items():
        for k, v in ref.arrays().items():
            got = r.arrays()[k]
            assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), (name, k)


def test_scan_number_of_returns_counts_detected_returns(bpy_mod, empty_scene):
    # issue 22, section 2: number_of_returns counts the returns the sensor reports, not the echoes formed
    # before detection (the contract path kept the formed count: a dropped far echo left its near echo at
    # "1 of 2"). Limit model: 0.3 beyond 5 m; the edge beam's near echo returns 0.8 x 0.64 = 0.52, its far
    # echo 0.8 x 0.36 = 0.29 (dropped)
    cam = edge_scene(bpy_mod)
    r = blensor_addon.scan(cam, axes="blensor", samples_per_beam=7, beam_divergence=0.002, returns="dual",
                           ref_dist=5.0, ref_limit=0.3, ref_slope=0.0)
    col = np.round(np.degrees(np.mod(r.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    edge = col == 0
    np.testing.assert_allclose(r.range[edge], [10.0], atol=1e-4)
    assert list(r.return_number[edge]) == [1] and list(r.number_of_returns[edge]) == [1]
    assert (r.number_of_returns == 1).all()


def test_scan_mode_chooses_among_the_detected_echoes(bpy_mod, empty_scene):
    # issue 22 review: the returns mode chooses after detection. The edge beam's far echo (0.8 x 0.36
    # = 0.29 returned) is below the limit 0.3; its near echo (0.52) is above. "last" used to pick the
    # far echo before detection and the beam reported nothing; now it reports the last detected: 10 m
    cam = edge_scene(bpy_mod)
    kw = dict(axes="blensor", samples_per_beam=7, beam_divergence=0.002, ref_dist=5.0, ref_limit=0.3,
              ref_slope=0.0)
    for mode in ("last", "dual", "all", "strongest"):
        r = blensor_addon.scan(cam, returns=mode, **kw)
        col = np.round(np.degrees(np.mod(r.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
        np.testing.assert_allclose(r.range[col == 0], [10.0], atol=1e-4, err_msg=mode)
    # without the limit both echoes are detected and "last" reports the far one
    r = blensor_addon.scan(cam, returns="last", axes="blensor", samples_per_beam=7, beam_divergence=0.002)
    col = np.round(np.degrees(np.mod(r.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    np.testing.assert_allclose(r.range[col == 0], [20.0], atol=1e-4)


def test_scan_random_is_seeded_and_focus_keeps_ranges(bpy_mod, empty_scene):
    # random: the stage's seeded generator, so the same seed gives the same points; the edge beam reports
    # one of the two walls. A focus at 15 m (sub-rays cross the axis there) keeps the full-wall ranges.
    cam = edge_scene(bpy_mod)
    kw = dict(axes="blensor", samples_per_beam=19, beam_divergence=0.004, divergence_algorithm="random")
    a, b = blensor_addon.scan(cam, seed=3, **kw), blensor_addon.scan(cam, seed=3, **kw)
    assert a.range.tobytes() == b.range.tobytes() and a.object_id.tobytes() == b.object_id.tobytes()
    col = np.round(np.degrees(np.mod(a.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    edge_range = a.range[col == 0][0]
    assert np.isclose(edge_range, 10.0, atol=1e-4) or np.isclose(edge_range, 20.0, atol=1e-4)
    f = blensor_addon.scan(cam, axes="blensor", samples_per_beam=7, beam_divergence=0.004,
                           focus_distance=15.0, returns="all")
    fc = np.round(np.degrees(np.mod(f.azimuth + np.pi, 2 * np.pi) - np.pi) / 0.5).astype(int)
    np.testing.assert_allclose(f.range[fc == -1], 20.0 / np.cos(np.radians(0.5)), atol=1e-3)
    np.testing.assert_allclose(f.range[fc == 1], 10.0 / np.cos(np.radians(0.5)), atol=1e-3)


def test_empty_pattern():
    p = RayPattern(
        directions=np.zeros((0, 3), np.float32), azimuth=np.zeros(0), elevation=np.zeros(0),
        channel=np.zeros(0, np.uint16), ray_index=np.zeros(0, np.int64), timestamp=np.zeros(0))
    sub = beam.footprint(settings(samples_per_beam=7, beam_divergence=0.002), p)
    assert sub.directions.shape == (0, 3) and sub.beam.shape == (0,)
    ret = beam.form_returns(settings(), sub, FakeHits(np.zeros(0), np.zeros(0, np.int64)), 10.0,
                            np.random.default_rng(0))
    assert len(ret) == 0


def test_echoes_are_grouped_for_the_beams_of_several_candidates_only(monkeypatch):
    # one sub-ray per beam and a pane in front of a few beams (extra path ends): the
    # weighted range and the strongest candidate are worked out for the echoes of several
    # candidates only; an echo of one candidate is that candidate, bit for bit
    seen = {"weighted": 0, "strongest": 0}
    weighted, strongest = beam._weighted_range, beam._first_of_groups

    def count_weighted(r, wts, starts):
        seen["weighted"] += r.shape[0]
        return weighted(r, wts, starts)

    def count_strongest(key, starts):
        seen["strongest"] += key.shape[0]
        return strongest(key, starts)

    monkeypatch.setattr(beam, "_weighted_range", count_weighted)
    monkeypatch.setattr(beam, "_first_of_groups", count_strongest)
    rng = np.random.default_rng(11)
    B = 1000
    sub = sub_of(B, 1)
    r = rng.uniform(2.0, 60.0, B)
    # beams 3 and 7 see a pane 0.4 m before what is behind it (one echo of two candidates),
    # beam 9 one 5 m before (two echoes of one candidate each)
    extra_ray = np.array([3, 7, 9])
    extra_r = r[extra_ray] - np.array([0.4, 0.4, 5.0])
    refl = rng.uniform(0.05, 1.0, B + 3)
    hits = FakeHits(np.concatenate([r, extra_r]), np.concatenate([np.arange(B), extra_ray]), refl=refl)
    ret = beam.form_returns(settings(returns="all"), sub, hits, 100.0, np.random.default_rng(0))
    assert seen == {"weighted": 4, "strongest": 4}
    assert len(ret) == B - 2 + 3 and list(ret.number_of_returns[ret.beam == 9]) == [2, 2]
    one = ~np.isin(ret.beam, [3, 7, 9])
    assert np.array_equal(ret.range[one], r[ret.beam[one]])  # the candidate's range, bit for bit
    assert np.array_equal(ret.energy[one], 1.0 * refl[:B][ret.beam[one]].astype(np.float32) * 1.0)
    assert np.array_equal(ret.row[one], ret.beam[one])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0, as the formula does
def test_an_echo_of_one_candidate_with_a_non_finite_weight_takes_the_general_formula():
    # a reflectivity of inf makes the candidate's received power inf: the energy-weighted
    # range is then NaN (inf * 0 / inf), as the general formula gives it, not the range
    sub = sub_of(3, 1)
    hits = FakeHits(np.array([5.0, 6.0, 7.0, 4.0]), np.array([0, 1, 2, 2]),
                    refl=np.array([0.5, np.inf, 0.5, 0.5], np.float32))
    ret = beam.form_returns(settings(returns="all"), sub, hits, 100.0, np.random.default_rng(0))
    assert list(ret.beam) == [0, 1, 2, 2]
    assert ret.range[0] == 5.0 and np.isnan(ret.range[1]) and list(ret.range[2:]) == [4.0, 7.0]


def test_the_strongest_echo_is_searched_among_the_beams_of_several_echoes_only(monkeypatch):
    # the returns mode after detection (select_returns) on a scan where most beams have
    # one echo: only the beams with several are searched; the others keep their one
    searched = []
    runs = beam._first_of_runs

    def count(key, starts, counts):
        searched.append(key.shape[0])
        return runs(key, starts, counts)

    monkeypatch.setattr(beam, "_first_of_runs", count)
    B = 1000
    key = np.concatenate([np.arange(B), [10, 500]])
    order = np.argsort(key, kind="stable")
    key = key[order]
    r = np.linspace(5.0, 50.0, key.shape[0])
    energy = np.random.default_rng(2).uniform(0.1, 1.0, key.shape[0])
    chosen = beam.select_returns(settings(returns="strongest"), key, r, energy)
    assert searched == [4]
    assert np.array_equal(key[chosen], np.arange(B))  # one return per beam
    for b in (10, 500):
        two = np.flatnonzero(key == b)
        p = energy[two] / r[two] ** 2
        assert chosen[b] == two[np.argmax(p)]
