"""The rosette LiDAR (seed 003 generic_rosette, the Livox presets): the pattern against the
closed forms of the hypotrochoid and the epitrochoid, the FOV, points per packet, timing
``stream``, presets, the ray budget, analytic ranges to a plane (real bpy), and the
``blensor`` command end to end on the demo scene (files read back with laspy, pypcd4,
rosbags)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import make_settings
from blensor_addon.core.sensors.rosette import (LIVOX_H_FREQ, PRESETS, beam_directions, firing_range, firings,
                                                in_horizontal_fov, rosette_polar)
from conftest import CROSSING, add_camera, add_mesh, quad


def settings(**kw):
    return make_settings("rosette", {}, kw)[1]


def wrap(a):
    return np.mod(a + np.pi, 2 * np.pi) - np.pi


def test_the_pattern_is_the_hypotrochoid_of_its_closed_form():
    """f_v > 0: x = (R - r) cos th + d cos((R - r) / r th), y = (R - r) sin th - d sin(...),
    with R - r = d = 1/2 (polar radius 0..1) and (R - r) / r = f_v / f_h, th = 2 pi f_h t."""
    f_h, f_v = 11.0, 100.0
    t = np.linspace(0.0, 0.37, 20001) + 12.345  # away from t = 0 too
    R_minus_r = d = 0.5
    r = R_minus_r * f_h / f_v
    th = 2 * np.pi * f_h * t
    k = R_minus_r / r
    x = R_minus_r * np.cos(th) + d * np.cos(k * th)
    y = R_minus_r * np.sin(th) - d * np.sin(k * th)
    theta, rho = rosette_polar(t, f_h, f_v)
    np.testing.assert_allclose(rho, np.hypot(x, y), atol=1e-9)
    far = rho > 1e-6  # the angle is undefined at the centre
    np.testing.assert_allclose(wrap(theta - np.arctan2(y, x))[far], 0.0, atol=1e-6)
    assert rho.min() < 1e-3 and rho.max() > 1 - 1e-6 and rho.max() <= 1.0 + 1e-12  # 0..1


def test_a_negative_vertical_frequency_gives_the_epitrochoid():
    """f_v < 0: the tracing point turns with the centre: x = (R + r) cos th + d cos((R + r)
    / r th), y = (R + r) sin th + d sin(...), R + r = d = 1/2, (R + r) / r = |f_v| / f_h (the
    tracing point starting on the far side, polar radius 1 at t = 0)."""
    f_h, f_v = 7.0, -37.0
    t = np.linspace(0.0, 1.0, 50001)
    k = abs(f_v) / f_h
    th = 2 * np.pi * f_h * t
    x = 0.5 * np.cos(th) + 0.5 * np.cos(k * th)
    y = 0.5 * np.sin(th) + 0.5 * np.sin(k * th)
    theta, rho = rosette_polar(t, f_h, f_v)
    np.testing.assert_allclose(rho, np.hypot(x, y), atol=1e-9)
    far = rho > 1e-6
    np.testing.assert_allclose(wrap(theta - np.arctan2(y, x))[far], 0.0, atol=1e-6)
    # the radius still spans 0..1; the hypotrochoid of the same |f_v| is another curve
    assert not np.allclose(rosette_polar(t, f_h, -f_v)[1], rho, atol=1e-3)
    assert rho.min() < 1e-3 and rho.max() > 1 - 1e-6


def test_radial_scaling_scales_the_offset_from_the_rolling_circle_centre():
    t = np.linspace(0.0, 0.2, 4001)
    a = 2 * np.pi * np.mod(LIVOX_H_FREQ * t, 1.0)
    th1, rho1 = rosette_polar(t, LIVOX_H_FREQ, 170.0, 1.0)
    th2, rho2 = rosette_polar(t, LIVOX_H_FREQ, 170.0, 0.375)
    np.testing.assert_array_equal(rho1, rho2)
    np.testing.assert_allclose(th2 - a, 0.375 * wrap(th1 - a), atol=1e-12)
    assert np.abs(th2 - a).max() <= 0.375 * np.pi + 1e-12


def test_channels_are_the_rosette_turned_by_a_fraction_of_a_turn():
    s = settings(channels=6, points_per_second=600.0)
    n = np.arange(6000)
    f = firings(s, n)
    assert (f["channel"] == n % 6).all()
    np.testing.assert_allclose(f["time"], n / 600.0)
    th0, rho0 = rosette_polar(f["time"], s.horizontal_rotation_frequency, s.vertical_rotation_frequency)
    np.testing.assert_allclose(f["rho"], rho0, atol=1e-12)  # the same radius
    far = rho0 > 1e-3  # the angle is ill-conditioned at the centre
    np.testing.assert_allclose(wrap(f["h"] - th0 - 2 * np.pi * f["channel"] / 6)[far], 0.0, atol=1e-9)


def test_directions_follow_seed_003s_angles_and_the_vertical_fov():
    """Identity orientation: horizontal angle h clockwise from ahead, elevation e:
    BlenSor direction (cos e sin h, sin e, -cos e cos h); e = lower + rho (upper - lower)."""
    s = settings(vertical_fov_lower=-40.0, vertical_fov_upper=10.0)
    f = firings(s, np.arange(20000))
    e = np.deg2rad(-40.0 + f["rho"] * 50.0)
    np.testing.assert_allclose(f["elevation"], e, atol=1e-12)
    h = f["h"]
    want = np.stack([np.cos(e) * np.sin(h), np.sin(e), -np.cos(e) * np.cos(h)], 1)
    np.testing.assert_allclose(f["directions"], want, atol=1e-12)
    el = np.rad2deg(np.arcsin(f["directions"][:, 1]))
    assert el.min() >= -40.0 - 1e-9 and el.max() <= 10.0 + 1e-9
    # 90 deg clockwise from ahead is the sensor's right (+X)
    np.testing.assert_allclose(beam_directions(np.array([np.pi / 2]), np.zeros(1))[0], [1, 0, 0], atol=1e-15)
    # pitch 90: the down axis (elevation -90) looks ahead (-Z)
    np.testing.assert_allclose(beam_directions(np.zeros(1), np.array([-np.pi / 2]), (0, 90, 0))[0],
                               [0, 0, -1], atol=1e-15)


@pytest.mark.parametrize("start,end", [(30.0, 120.0), (300.0, 60.0), (0.0, 360.0), (90.0, 90.0)])
def test_data_only_inside_the_horizontal_fov(start, end):
    s = settings(horizontal_fov_start=start, horizontal_fov_end=end, points_per_second=20000.0,
                 report_frequency=1.0)
    sensor = make_settings("rosette", {}, {})[0]
    pat = next(sensor.patterns(s, 0, 1 / 24, "single", None))
    f = firings(s, np.arange(20000))
    h = np.mod(np.rad2deg(f["h"]), 360.0)
    span = (end - start) % 360.0
    inside = np.ones(h.shape, bool) if span == 0 else (np.mod(h - start, 360.0) <= span + 1e-9)
    assert len(pat) == int(inside.sum())
    np.testing.assert_array_equal(pat.ray_index, np.flatnonzero(inside))
    if span:
        assert 0 < len(pat) < 20000
        # the reported azimuth (psi, counter-clockwise) is minus the horizontal angle
        hp = np.mod(-np.rad2deg(pat.azimuth), 360.0)
        assert in_horizontal_fov(hp, start - 1e-6, end + 1e-6).all()
    else:
        assert len(pat) == 20000


def test_points_per_second_per_packet_and_stream_timing():
    sensor, s = make_settings("rosette", {}, {"preset": "livox_avia"})
    caps = sensor.capabilities(s)
    assert caps.timing.kind == "stream" and caps.timing.period == pytest.approx(0.1) and caps.grid is None
    stamps = []
    for k in range(3):  # packets of 0.1 s: 24,000 points, 4,000 per channel, tiling the stream
        p = next(sensor.patterns(s, k, 0.1, "range", None))
        assert len(p) == 24000 and np.bincount(p.channel).tolist() == [4000] * 6
        assert p.timestamp.min() >= 0.1 * k - 1e-12 and p.timestamp.max() < 0.1 * (k + 1)
        stamps.append(p.timestamp)
    t = np.concatenate(stamps)
    np.testing.assert_allclose(np.diff(t), 1 / 240000.0, rtol=1e-6)  # one firing every 1/240,000 s
    assert sensor.check_budget(s, 0, 0.1, "range", None) == 24000
    # below 0.5 Hz: one packet per scene frame; 100,000 points/s over 1/24 s frames
    sensor, s = make_settings("rosette", {}, {"preset": "livox_mid70", "report_frequency": 0.0})
    assert sensor.capabilities(s).timing.period is None
    counts = [len(next(sensor.patterns(s, f, 1 / 24, "range", None))) for f in range(24)]
    assert sum(counts) == 100000 and set(counts) <= {4166, 4167}
    assert firing_range(100000.0, 0.0, 1.0) == (0, 100000)


def test_the_pattern_never_repeats_and_is_deterministic():
    sensor, s = make_settings("rosette", {}, {"preset": "livox_mid70"})
    a = next(sensor.patterns(s, 0, 0.1, "range", None))
    b = next(sensor.patterns(s, 0, 0.1, "range", None))
    c = next(sensor.patterns(s, 1, 0.1, "range", None))
    for name in ("directions", "timestamp", "channel", "ray_index"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    # the next packet covers other directions: hardly any of its rays repeat one of packet 0
    key = lambda p: set(map(tuple, np.round(p.directions.astype(np.float64), 6)))  # noqa: E731
    assert len(key(a) & key(c)) < 0.01 * len(a)
    # single scan at frame f: the packet from f * frame_time
    d = next(sensor.patterns(s, 3, 1 / 24, "single", None))
    assert d.timestamp[0] == pytest.approx(3 / 24, abs=1e-5) and len(d) == 10000


def test_presets_are_valid_and_match_the_datasheets():
    for name in PRESETS:
        sensor, s = make_settings("rosette", {}, {"preset": name})
        assert s.preset == name
        p = next(sensor.patterns(s, 0, 0.1, "range", None))
        assert len(p) == int(round(s.points_per_second * 0.1))  # 360 deg FOV: every firing
    for name, pps, channels in (("livox_mid70", 100000, 1), ("livox_avia", 240000, 6)):
        sensor, s = make_settings("rosette", {}, {"preset": name})
        assert (s.points_per_second, s.channels) == (pps, channels)
        d = next(sensor.patterns(s, 0, 1.0 / s.report_frequency, "range", None)).directions.astype(np.float64)
        off_axis = np.rad2deg(np.arccos(-d[:, 2]))  # the cone looks ahead (-Z)
        assert off_axis.max() == pytest.approx(35.2, abs=0.01)  # 70.4 deg circular FOV
    sensor, s = make_settings("rosette", {}, {"preset": "livox_mid360"})
    p = next(sensor.patterns(s, 0, 0.1, "range", None))
    el = np.rad2deg(p.elevation)
    assert el.min() == pytest.approx(-7.0, abs=0.05) and el.max() == pytest.approx(52.0, abs=0.05)
    hist = np.histogram(np.rad2deg(p.azimuth), bins=36, range=(0, 360))[0]
    assert (hist > 0).all()  # 360 deg within one 0.1 s packet
    with pytest.raises(SettingsError, match="scan_orientation"):
        settings(scan_orientation=(0.0, 90.0))


def test_the_ray_budget_refuses_too_many_points_per_packet():
    sensor, s = make_settings("rosette", {}, {"points_per_second": 1e8, "report_frequency": 0.5})
    with pytest.raises(SettingsError, match=r"points_per_second must be at most .* Hz"):
        sensor.check_budget(s, 0, 1 / 24, "single", None)
    # the same rate in 0.1 s packets fits
    s = s.replace(report_frequency=10.0)
    assert sensor.check_budget(s, 0, 0.1, "range", None) == 10_000_000


def test_a_stream_without_a_period_is_planned_in_scene_frames():
    from blensor_addon.jobs.plan import plan_range
    sensor, s = make_settings("rosette", {}, {"report_frequency": 0.0})
    plan = plan_range(frame_start=1, frame_end=10, frame_time=1 / 24, caps=sensor.capabilities(s),
                      frames=range(2, 5))
    assert plan.kind == "frame" and plan.indices == [2, 3, 4]
    sensor, s = make_settings("rosette", {}, {"report_frequency": 20.0})
    plan = plan_range(frame_start=1, frame_end=10, frame_time=1 / 24, caps=sensor.capabilities(s),
                      frames=range(2, 5))  # [2/24, 5/24) s overlaps the 0.05 s packets 1..4
    assert plan.kind == "sweep" and plan.indices == [1, 2, 3, 4]


def test_a_plane_at_distance_h_gives_h_over_cos_of_the_off_axis_angle(bpy_mod, empty_scene, tmp_path):
    """Mid-70 looking down -Z (the camera unrotated) at the plane z = -H: every ray of a
    0.1 s packet returns at r = H / cos(e + 90 deg), e its elevation in the scan frame,
    computed from the ray's firing time alone (the closed form of the pattern)."""
    from blensor_addon.scene.scanner import Scanner
    H = 7.5
    add_mesh(bpy_mod, "Plane", *quad(-100, 100, -100, 100, -H))
    cam = add_camera(bpy_mod)
    sc = Scanner(cam, backend="native", axes="blensor",
                 overrides={"sensor_type": "rosette", "preset": "livox_mid70", "noise_sigma": 0.0})
    try:
        from blensor_addon.core.packets import Packet
        r, rec = sc.scan(Packet("sweep", 2))
    finally:
        sc.close()
    assert len(r) == 10000 and rec.time == pytest.approx(0.2)
    n = np.round(r.timestamp * 100000.0).astype(np.int64)
    np.testing.assert_array_equal(n, np.arange(20000, 30000))
    theta, rho = rosette_polar(n / 100000.0, LIVOX_H_FREQ, 170.0, 0.375)
    e = np.deg2rad(-90.0 + rho * 35.2)
    np.testing.assert_allclose(r.range, H / np.cos(e + np.pi / 2), rtol=1e-6)
    np.testing.assert_allclose(r.xyz[:, 2], -H, atol=1e-4)


BLENSOR = str(Path(sys.executable).parent / "blensor")


def test_blensor_scan_with_a_livox_preset_on_the_demo_scene(tmp_path):
    """``blensor scan --set sensor_type=rosette --set preset=livox_mid70`` on the demo: 0.1 s
    packets (auto in continuous time), npz, PCD, LAS and an unorganized PointCloud2 per
    packet, the same points in each, read back with pypcd4, laspy and rosbags."""
    out = tmp_path / "o"
    res = subprocess.run([BLENSOR, "scan", str(CROSSING), "--frames", "1-3", "--out", str(out), "--formats",
                          "npz,pcd,las,rosbag2", "--set", "sensor_type=rosette", "--set",
                          "preset=livox_mid70"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["packets"] == "sweep" and [e["frame"] for e in man["frames"]] == [0, 1]  # [1/24, 4/24) s
    import laspy
    from pypcd4 import PointCloud
    from test_rosbag import read_bag
    bag = read_bag(out / "rosbag2")
    clouds = [m for topic, msgs in bag.items() for _, m, kind in msgs if kind.endswith("PointCloud2")]
    assert len(clouds) == 2
    for k in (0, 1):
        z = np.load(out / f"scan{k:05d}.npz")
        t = z["timestamp"]
        assert 0.5 * 10000 < len(t) <= 10000 and t.min() >= 0.1 * k and t.max() < 0.1 * (k + 1)
        d = z["xyz"] / np.linalg.norm(z["xyz"], axis=1)[:, None]  # ROS axes: the cone around +x
        assert np.rad2deg(np.arccos(d[:, 0])).max() <= 35.2 + 1e-3
        pc = PointCloud.from_path(out / "clean" / f"scan{k:05d}.pcd")
        np.testing.assert_allclose(pc.numpy(("x", "y", "z")), z["xyz"], atol=1e-5)
        las = laspy.read(out / "clean" / f"scan{k:05d}.las")
        assert len(las.points) == len(t)
        np.testing.assert_allclose(np.stack([las.x, las.y, las.z], 1), z["xyz"], atol=2e-3)
        msg = clouds[k]
        assert msg.height == 1 and msg.width == len(t)  # unorganized


def test_report_frequency_0_gives_one_packet_per_scene_frame_in_continuous_time(bpy_mod, empty_scene,
                                                                                 tmp_path):
    """report_frequency < 0.5 (seed 003: "as often as possible"): a packet per scene frame,
    every ray cast at its own time: the camera moves at 6 m/s along +X above the plane
    z = -H, so a ray fired at t lands at x = 6 t + its offset in the sensor frame."""
    from blensor_addon.jobs.range_scan import scan_range
    H, v = 5.0, 6.0
    add_mesh(bpy_mod, "Plane", *quad(-100, 100, -100, 100, -H))
    cam = add_camera(bpy_mod)
    fc = cam.driver_add("location", 0)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = f"{v} * frame / 24"
    job = scan_range(cam, range(1, 3), tmp_path, ("npz",), axes="blensor", frame_of_reference="world",
                     sensor_type="rosette", preset="livox_mid70", report_frequency=0.0, noise_sigma=0.0)
    assert job.status == "complete" and job.plan.kind == "frame" and job.plan.indices == [1, 2]
    for f in (1, 2):
        z = np.load(tmp_path / f"scan{f:05d}.npz")
        n = np.round(z["timestamp"] * 100000.0).astype(np.int64)
        np.testing.assert_array_equal(n, np.arange(*firing_range(100000.0, f / 24, (f + 1) / 24)))
        s = settings(preset="livox_mid70")
        d = firings(s, n)["directions"]
        local = d * (H / -d[:, 2])[:, None]  # the ray from the sensor to the plane
        np.testing.assert_allclose(z["xyz"][:, 0], v * z["timestamp"] + local[:, 0], atol=1e-4)
        np.testing.assert_allclose(z["xyz"][:, 2], -H, atol=1e-4)
