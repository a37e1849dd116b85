"""Weather (docs/physics.md): fog after Hahner et al. 2021 and rain (Marshall-Palmer
extinction as in LISA, Goodin et al. 2019's range noise, drop returns), asserted on real
scans of Blender geometry and on the stage's rules for the return modes."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.sensors import beam as beam_mod
from blensor_addon.core.sensors import weather
from blensor_addon.core.sensors.returns import Returns
from blensor_addon.core.sensors.rotating import LidarSettings
from conftest import add_camera, add_mesh, generic_sensor, quad


# -- the stage alone -----------------------------------------------------------------------

def _returns(beam, rng_m, energy):
    k = len(beam)
    e = np.asarray(energy, dtype=np.float64)
    return Returns(beam=np.asarray(beam, np.int64), row=np.asarray(beam, np.int64),
                   range=np.asarray(rng_m, np.float64), reflectivity=np.full(k, 0.5, np.float32),
                   returned=e.copy(),
                   energy=e, return_number=np.ones(k, np.uint8), number_of_returns=np.ones(k, np.uint8),
                   weather=np.zeros(k, bool))


def _settings(**kw):
    base = dict(weather="fog", fog_visibility=30.0, rain_rate=10.0, max_range=100.0, returns="strongest",
                divergence_algorithm="echoes", max_returns=3, beam_divergence=0.0)
    base.update(kw)
    return LidarSettings(**base)  # unvalidated: the stages read it through the schema


SUB4 = SimpleNamespace(per_beam=1, directions=np.zeros((4, 3)))


def test_weather_none_returns_its_input_object():
    # issue 22, section 4: weather = none is byte-identical to before (the same object back)
    ret = _returns([0, 1], [5.0, 7.0], [0.5, 0.5])
    assert weather.apply(_settings(weather="none"), ret, SUB4, np.random.default_rng(0)) is ret


def test_fog_alpha_and_backscatter_peak_near_the_sensor():
    # alpha = -ln(0.05) / MOR (Hahner et al. 2021); the soft target's peak lies just past the
    # receiver's overlap (R_1 = 0.9, R_2 = 1.0 m), within c tau_H / 2 + R_2 = 4 m, and its
    # power grows as the MOR falls (beta = 0.046 / MOR, less attenuation in between)
    assert weather.fog_alpha(50.0) == pytest.approx(-math.log(0.05) / 50.0, rel=1e-15)
    peaks = []
    for mor in (1000.0, 200.0, 100.0, 50.0, 20.0):
        r0, p, at = weather.fog_backscatter(mor, 100.0)
        far = p[-1]
        peaks.append(far)
        assert 1.0 < at[-1] < weather.FOG_R2 + 0.5 * weather.SPEED_OF_LIGHT * weather.FOG_TAU_H
        assert p[r0 < weather.FOG_R1].max() == 0.0  # nothing inside R_1
    assert all(a < b for a, b in zip(peaks, peaks[1:]))
    # roughly beta times a range integral: ~0.083 / MOR m^-2 for light fog
    assert peaks[0] * 1000.0 == pytest.approx(0.0996, rel=0.05)


@pytest.mark.parametrize("mode,expect", [
    # beam: 0 weak far target, 1 strong near target (beats the fog: no spurious return),
    # 2 nothing, 3 a weak target at 20 m (and one at 40 m in the multi-return modes); targets
    # 20 m or more away keep the noisy fog range (R_0 / u >= 2/3 of the ~1.6 m peak) past R_1
    ("strongest", {0: [True], 1: [False], 2: [True], 3: [True]}),
    ("first", {0: [True], 1: [False], 2: [True], 3: [True]}),
    ("last", {0: [False], 1: [False], 2: [True], 3: [False]}),
    ("dual", {0: [True, False], 1: [False], 2: [True], 3: [True, False]}),
    ("dual_ouster", {0: [True, False], 1: [False], 2: [True], 3: [True, False]}),
    ("all", {0: [True, False], 1: [False], 2: [True], 3: [True, False, False]}),
])
def test_fog_return_replaces_or_joins_by_mode(mode, expect):
    # issue 22, section 4: single-return modes keep the stronger (strongest), the nearer
    # (first), the farther (last); dual and all report both, renumbered nearest first
    # (weather.apply adds the fog's return; the returns mode chooses, as in a scan)
    beams, ranges, energy = [0, 1, 3, 3], [30.0, 5.0, 20.0, 40.0], [0.01, 0.8, 0.01, 0.3]
    single = mode in ("strongest", "first", "last")
    if single:  # one hard return per beam in these modes
        beams, ranges, energy = beams[:3], ranges[:3], energy[:3]
    s = _settings(returns=mode)
    out = weather.apply(s, _returns(beams, ranges, energy), SUB4, np.random.default_rng(1))
    # the sensor then chooses among the detected returns by received power and renumbers
    # (Sensor.detect_and_assemble: the mode decides after detection)
    sel = beam_mod.select_returns(s, out.beam, out.range, out.energy)
    if sel is not None:
        out = out.take(sel)
    out.return_number, out.number_of_returns = beam_mod.rank_returns(out.beam, out.range)
    got = {int(b): [bool(x) for x in out.weather[out.beam == b]] for b in np.unique(out.beam)}
    assert got == expect
    if mode == "dual":  # the hard return kept beside the fog is the beam's last (40 m)
        assert out.range[(out.beam == 3) & ~out.weather].tolist() == [40.0]
    if mode == "dual_ouster":  # ... the strongest one (20 m: 0.01 e^-4 / 400 > 0.3 e^-8 / 1600)
        assert out.range[(out.beam == 3) & ~out.weather].tolist() == [20.0]
    assert np.all(np.diff(out.beam) >= 0)
    for b in np.unique(out.beam):
        rows = out.beam == b
        assert np.all(np.diff(out.range[rows]) > 0)  # nearest first
        assert list(out.return_number[rows]) == list(range(1, rows.sum() + 1))
        assert set(out.number_of_returns[rows].tolist()) == {int(rows.sum())}
    w = out.weather
    assert np.all(out.reflectivity[w] == 0) and np.all(out.row[w] == out.beam[w])
    assert np.all(out.range[w] > weather.FOG_R1) and np.all(out.range[w] < 4.0)
    np.testing.assert_allclose(out.transmission[~w], np.exp(-2 * weather.fog_alpha(30.0) * out.range[~w]))
    hard_in = np.asarray(energy)[np.isin(ranges, out.range[~w])]
    np.testing.assert_allclose(out.energy[~w], hard_in * out.transmission[~w])


def test_rain_extinction_follows_marshall_palmer_curve():
    # alpha = int (pi D^2 / 2) N0 exp(-Lambda D) dD = pi N0 / Lambda^3 with N0 = 8000 m^-3 mm^-1,
    # Lambda = 4.1 R^-0.21 mm^-1 (Marshall-Palmer, LISA; Q_ext = 2): 3.65e-4 R^0.63 per m.
    # Checked against a numerical integral over the drop sizes, not the closed form.
    d = np.linspace(0.0, 20.0, 200001)  # mm
    for rate, per_km in ((5.0, 1.0052), (25.0, 2.7707), (100.0, 6.6357)):
        lam = 4.1 * rate ** -0.21
        numeric = np.trapz(np.pi * d ** 2 / 2 * 8000.0 * np.exp(-lam * d), d) * 1e-6  # mm^2 m^-3 -> 1/m
        assert weather.rain_extinction(rate) == pytest.approx(numeric, rel=1e-6)
        assert weather.rain_extinction(rate) * 1e3 == pytest.approx(per_km, rel=1e-4)
        assert weather.rain_extinction(rate) == pytest.approx(3.65e-4 * rate ** 0.63, rel=2e-3)
    assert weather.rain_extinction(0.0) == 0.0


# -- real scans ----------------------------------------------------------------------------

def _wall_sensor(bpy, H=20.0, elevations="0", **kw):
    v, f = quad(-400, 400, -80, 80, -H)
    add_mesh(bpy, "Wall", v, f)
    cam = add_camera(bpy)
    s = generic_sensor(cam, elevations, start_angle=-60.0, end_angle=60.0, angle_resolution=0.25,
                       max_range=100.0, **kw)
    return cam, s


def test_fog_attenuates_every_return_by_exp_minus_2_alpha_r(bpy_mod, empty_scene):
    # issue 22, section 5: fog attenuation matches exp(-2 alpha r), alpha = -ln(0.05)/MOR, on a
    # wall 20-40 m away (MOR 300 m: its backscatter stays below detection, no spurious returns)
    cam, s = _wall_sensor(bpy_mod)
    clear = blensor_addon.scan(cam, axes="blensor")
    s.weather, s.fog_visibility = "fog", 300.0
    fog = blensor_addon.scan(cam, axes="blensor")
    assert len(fog) == len(clear) == 480 and not np.any(fog.semantic == weather.WEATHER_SEMANTIC)
    np.testing.assert_array_equal(fog.range, clear.range)
    alpha = -math.log(0.05) / 300.0
    np.testing.assert_allclose(fog.intensity, clear.intensity * np.exp(-2 * alpha * clear.range), rtol=2e-6)
    assert fog.intensity.min() < 0.7 * clear.intensity.min()  # the effect is not negligible


def test_fog_drops_returns_below_the_linear_detection_limit(bpy_mod, empty_scene):
    # seed 002 Eq. 4-5 at the attenuated energy: detected iff 0.8 cos(theta) exp(-2 alpha r) >=
    # ref_max r / max_range, r = H / cos(theta); in clear air every column is detected
    v, f = quad(-400, 400, -80, 80, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    s = generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.25, max_range=50.0,
                       return_model="linear", ref_max=0.4)
    assert len(blensor_addon.scan(cam, axes="blensor")) == 480
    s.weather, s.fog_visibility = "fog", 60.0
    r = blensor_addon.scan(cam, axes="blensor")
    alpha = -math.log(0.05) / 60.0
    az = np.deg2rad(-60.0 + 0.25 * np.arange(480))
    rr = 10.0 / np.cos(az)
    expect = 0.8 * np.cos(az) * np.exp(-2 * alpha * rr) >= 0.4 * rr / 50.0
    assert 100 < expect.sum() < 400
    assert not np.any(r.semantic == weather.WEATHER_SEMANTIC)
    got = np.zeros(480, bool)
    got[np.round(np.mod(np.rad2deg(r.azimuth.astype(np.float64)) + 60.0, 360.0) / 0.25).astype(int)] = True
    np.testing.assert_array_equal(got, expect)


def _floor_sensor(bpy, **kw):
    # a floor 2 m below (sensor +Y up): lasers from -1 to -30 deg meet it 115 m to 4 m away,
    # the +5 deg laser meets nothing
    add_mesh(bpy, "Floor", [(-400, -2, -400), (400, -2, -400), (400, -2, 400), (-400, -2, 400)],
             [(0, 1, 2, 3)])
    cam = add_camera(bpy)
    s = generic_sensor(cam, "5, -1, -2, -4, -8, -15, -30", angle_resolution=2.0, max_range=100.0, **kw)
    return cam, s


def test_fog_backscatter_returns_grow_as_visibility_falls(bpy_mod, empty_scene):
    # Hahner et al. 2021: a spurious return where the fog's peak beats the hard target (or
    # there is none); denser fog (smaller MOR) beats more targets. They lie near the sensor,
    # at the shifted peak of the soft target's power times the paper's noise factor.
    cam, s = _floor_sensor(bpy_mod)
    s.weather = "fog"
    counts = []
    for mor in (1000.0, 200.0, 100.0, 60.0, 30.0, 15.0):
        s.fog_visibility = mor
        r = blensor_addon.scan(cam, axes="blensor")
        w = r.semantic == weather.WEATHER_SEMANTIC
        counts.append(int(w.sum()))
        if w.any():
            _, _, at = weather.fog_backscatter(mor, 100.0)
            assert r.range[w].min() > weather.FOG_R1
            assert r.range[w].max() <= 2.0 * at.max() + 1e-6  # noise factor R0/u <= 2
            assert np.all(r.object_id[w] == 0) and np.all(r.intensity[w] > 0)
            sky = w & (r.channel == 0)  # no target: R_0 = max range, factor within 100/110..100/90
            assert np.all(np.abs(r.range[sky] / at[-1] - 1.0) <= 0.112)
    assert counts[0] == 0
    assert all(a <= b for a, b in zip(counts, counts[1:])) and counts[-1] > counts[2] > 0
    assert counts[-1] <= len(r)


def test_fog_is_seeded(bpy_mod, empty_scene):
    cam, s = _floor_sensor(bpy_mod)
    s.weather, s.fog_visibility = "fog", 40.0
    a = blensor_addon.scan(cam, axes="blensor")
    b = blensor_addon.scan(cam, axes="blensor")
    assert a.xyz.tobytes() == b.xyz.tobytes() and a.intensity.tobytes() == b.intensity.tobytes()
    s.seed = s.seed + 1
    c = blensor_addon.scan(cam, axes="blensor")
    wa, wc = a.semantic == weather.WEATHER_SEMANTIC, c.semantic == weather.WEATHER_SEMANTIC
    assert wa.sum() > 10 and not np.array_equal(np.sort(a.range[wa]), np.sort(c.range[wc]))


def test_rain_attenuation_noise_and_drops(bpy_mod, empty_scene):
    # rain 50 mm/h on a wall 20 m below: hard returns attenuated by exp(-2 alpha r) with the
    # Marshall-Palmer alpha; their range noise has Goodin et al. 2019's sigma
    # 0.02 r (1 - exp(-R))^2 (here 2 % of the range)
    cam, s = _wall_sensor(bpy_mod, elevations="0, -10, 10")
    clear = blensor_addon.scan(cam, axes="blensor")
    s.weather, s.rain_rate = "rain", 50.0
    r = blensor_addon.scan(cam, axes="blensor")
    hard = r.semantic != weather.WEATHER_SEMANTIC
    # rays whose hard return stayed (under strongest a stronger drop replaces a few)
    common, ri, ci = np.intersect1d(r.ray_index[hard], clear.ray_index, return_indices=True)
    ri = np.flatnonzero(hard)[ri]
    assert len(common) >= len(clear) - (~hard).sum() and len(common) > 0.99 * len(clear)
    alpha = weather.rain_extinction(50.0)
    np.testing.assert_allclose(r.intensity[ri], clear.intensity[ci] * np.exp(-2 * alpha * clear.range[ci]),
                               rtol=2e-6)
    rel = (r.range_noisy[ri] - r.range[ri]) / r.range[ri]
    assert rel.std() == pytest.approx(0.02 * (1 - math.exp(-50.0)) ** 2, rel=0.1)
    assert abs(rel.mean()) < 0.003


def test_rain_drop_returns_grow_with_rain_rate(bpy_mod, empty_scene):
    cam, s = _floor_sensor(bpy_mod)
    s.weather = "rain"
    counts = []
    for rate in (0.0, 10.0, 100.0, 400.0):
        s.rain_rate = rate
        r = blensor_addon.scan(cam, axes="blensor")
        w = r.semantic == weather.WEATHER_SEMANTIC
        counts.append(int(w.sum()))
        if w.any():
            assert r.range[w].min() >= weather.FOG_R1  # no drop before the receiver's overlap
            assert np.all(r.object_id[w] == 0)
    assert counts[0] == 0 and counts[-1] > counts[1] and counts[-1] > 0


def test_particle_rain_is_scanned_as_geometry(bpy_mod, empty_scene):
    # issue 22, section 4: particles are real geometry. scenes/build_rain_particles.py
    # instances 400 spheres (r = 3 cm) by a particle system; the scan returns points on them,
    # labelled with the drop object and the emitter, each point on its particle's sphere
    import importlib.util
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("build_rain_particles",
                                                  ROOT / "scenes" / "build_rain_particles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cam = mod.build(bpy_mod)
    r = blensor_addon.scan(cam, frame_of_reference="world")
    ids = {o["name"]: o["id"] for o in r.objects}
    on_drop = r.object_id == ids["Drop"]
    assert on_drop.sum() > 100 and len(r) > on_drop.sum()  # drops and the wall behind them
    assert np.all(r.instancer_id[on_drop] == ids["RainCloud"]) and np.all(r.instance_id[on_drop] > 0)
    assert np.all(r.object_id[~on_drop] == ids["Backdrop"])
    dg = bpy_mod.context.evaluated_depsgraph_get()
    cloud = bpy_mod.data.objects["RainCloud"].evaluated_get(dg)
    centers = np.array([p.location for p in cloud.particle_systems[0].particles], dtype=np.float64)
    assert centers.shape == (mod.DROP_COUNT, 3)
    d = np.linalg.norm(r.xyz[on_drop][:, None, :].astype(np.float64) - centers[None], axis=2).min(axis=1)
    # on the sphere: 12 x 6 facets sit at most r (1 - cos(30 deg)) = 4 mm inside it
    assert np.all(d <= mod.DROP_RADIUS + 1e-4) and np.all(d >= mod.DROP_RADIUS * math.cos(math.pi / 6) - 1e-4)
    assert len(np.unique(r.instance_id[on_drop])) > 30  # many different drops


def test_demo_has_a_glass_shop_front_and_a_fog_variant(bpy_mod):
    # issue 22, "done means": the demo gains a window (a single-face Glass BSDF pane, IOR 1.5,
    # no reflectivity of its own, a counter behind it) and a foggy variant
    from conftest import CROSSING
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))
    pane = bpy_mod.data.objects["ShopGlass"]
    assert len(pane.data.polygons) == 1
    mat = pane.data.materials[0]
    glass = [n for n in mat.node_tree.nodes if n.type == "BSDF_GLASS"]
    assert len(glass) == 1 and glass[0].inputs["IOR"].default_value == pytest.approx(1.5)
    assert "ShopCounter" in bpy_mod.data.objects
    assert bpy_mod.context.scene.camera.data.blensor.weather == "none"
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING.with_name("crossing_fog.blend")))
    cam = bpy_mod.context.scene.camera
    s = cam.data.blensor
    assert s.weather == "fog" and 50.0 <= s.fog_visibility <= 100.0
    r = blensor_addon.scan(cam, frame=1)
    w = r.semantic == weather.WEATHER_SEMANTIC
    assert w.sum() > 0.1 * len(r)  # dense fog: a cloud of backscatter returns around the car
    assert np.median(r.range[w]) < 3.0 and np.all(r.object_id[w] == 0)
    assert r.range[~w].max() < 50.0  # nothing far comes back through 80 m of visibility
