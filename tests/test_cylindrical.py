"""The generic cylindrical LiDAR (seed 003 generic_cylindrical): channel elevations, the
column count and its rounding, column times, the horizontal FOV cut, analytic ranges to a
wall (real bpy), and a one-plane configuration written as ROS LaserScan (read back with
rosbags)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from blensor_addon.core.sensors import make_settings
from blensor_addon.core.sensors.cylindrical import channel_elevations_deg, columns_per_revolution, fov_columns
from conftest import add_camera, add_mesh, quad

SEED_SAMPLE = {"channels": 16, "points_per_second": 100000.0, "rotation_frequency": 10.0,
               "vertical_fov_lower": -45.0, "vertical_fov_upper": -15.0}


def make(**kw):
    return make_settings("cylindrical", {}, kw)


def test_channels_are_equally_spaced_from_the_top():
    sensor, s = make(**SEED_SAMPLE)
    np.testing.assert_allclose(sensor.channel_elevations(s), -15.0 - 2.0 * np.arange(16))
    p = next(sensor.patterns(s, 0, 1 / 24, "single", None))
    el = np.rad2deg(p.elevation).reshape(-1, 16)
    np.testing.assert_allclose(el, np.broadcast_to(-15.0 - 2.0 * np.arange(16), el.shape), atol=1e-9)
    assert channel_elevations_deg(make(channels=1, vertical_fov_upper=3.0)[1]).tolist() == [3.0]


def test_the_seed_sample_has_625_columns_per_revolution():
    """seed 003's sample: 100,000 points/s over 16 channels at 10 Hz: 625 columns a turn,
    one every 0.16 ms; the grid (16, 625), timing sweep 0.1 s."""
    sensor, s = make(**SEED_SAMPLE)
    assert columns_per_revolution(s) == 625
    caps = sensor.capabilities(s)
    assert caps.grid == (16, 625) and caps.timing.kind == "sweep" and caps.timing.period == pytest.approx(0.1)
    assert caps.column_angles is None
    # rounding: half away from zero, at least one column
    assert columns_per_revolution(make(channels=16, points_per_second=1e5, rotation_frequency=9.0)[1]) == 694
    assert columns_per_revolution(make(channels=1, points_per_second=1250.0, rotation_frequency=100.0)[1]) \
        == 13
    assert columns_per_revolution(make(channels=16, points_per_second=1.0, rotation_frequency=10.0)[1]) == 1


def test_column_times_and_angles():
    sensor, s = make(**SEED_SAMPLE)
    pos, t = sensor.column_times(s, 2, 1 / 24, "single")
    np.testing.assert_array_equal(pos, np.arange(625))
    np.testing.assert_allclose(t, 2 / 24 + np.arange(625) / 6250.0)
    p = next(sensor.patterns(s, 0, 1 / 24, "single", None))
    h = np.mod(-np.rad2deg(p.azimuth[::16]), 360.0)  # psi = -h: clockwise from ahead
    np.testing.assert_allclose(np.minimum(h, 360 - h), np.minimum(np.arange(625) * 0.576,
                                                                  360 - np.arange(625) * 0.576), atol=1e-9)
    # range frames tile the columns: 24 frames of 1/24 s = 10 revolutions, none twice
    got = [sensor.column_times(s, f, 1 / 24, "range") for f in range(24)]
    g = np.round(np.concatenate([tt for _, tt in got]) * 6250.0).astype(np.int64)
    np.testing.assert_array_equal(g, np.arange(6250))
    assert sum(sensor.grid_shape(s, f, 1 / 24, "range", None)[1] for f in range(24)) == 6250


@pytest.mark.parametrize("start,end,count", [(90.0, 180.0, 156), (270.0, 90.0, 313), (0.0, 360.0, 625)])
def test_data_only_inside_the_horizontal_fov(start, end, count):
    sensor, s = make(**SEED_SAMPLE, horizontal_fov_start=start, horizontal_fov_end=end)
    cols = fov_columns(s)
    assert cols.shape[0] == count and sensor.capabilities(s).grid == (16, count)
    p = next(sensor.patterns(s, 0, 1 / 24, "single", None))
    assert len(p) == 16 * count
    h = np.mod(-np.rad2deg(p.azimuth), 360.0)
    h = np.where(h > 360 - 1e-7, 0.0, h)
    span = (end - start) % 360.0 or 360.0
    assert (np.mod(h - start, 360.0) <= span + 1e-6).all()
    # a range frame keeps the FOV's columns only, with their own firing times
    pos, t = sensor.column_times(s, 5, 1 / 24, "range")
    j = np.round(np.mod(t * 6250.0, 625)).astype(np.int64)
    np.testing.assert_array_equal(j, cols[pos])


def test_analytic_ranges_to_a_wall(bpy_mod, empty_scene):
    """Wall z = -10 ahead of the unrotated camera; FOV -40..40 deg ahead, 4 channels over
    -10..10 deg: every ray returns at 10 / (cos e cos h)."""
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    add_mesh(bpy_mod, "Wall", *quad(-100, 100, -100, 100, -10.0))
    cam = add_camera(bpy_mod)
    sc = Scanner(cam, backend="native", axes="blensor",
                 overrides={"sensor_type": "cylindrical", "channels": 4, "points_per_second": 14400.0,
                            "rotation_frequency": 10.0, "vertical_fov_lower": -10.0,
                            "vertical_fov_upper": 10.0,
                            "horizontal_fov_start": 320.0, "horizontal_fov_end": 40.0})
    try:
        r, _ = sc.scan(Packet("single", 1))
    finally:
        sc.close()
    assert r.grid_shape == (4, 81) and len(r) == 4 * 81  # 360 columns a turn, 1 deg apart
    h = np.deg2rad(np.round(np.rad2deg(-r.azimuth)))
    e = np.deg2rad(np.array([10.0, 10 / 3, -10 / 3, -10.0]))[r.channel.astype(np.int64)]
    np.testing.assert_allclose(r.range, 10.0 / (np.cos(e) * np.cos(h)), rtol=1e-6)
    np.testing.assert_allclose(r.xyz[:, 2], -10.0, atol=1e-4)


def test_one_plane_at_elevation_0_writes_a_laser_scan(bpy_mod, empty_scene, tmp_path):
    """One channel at elevation 0 over the whole circle: column_angles (0, -1 deg) and a
    LaserScan per revolution; the wall z = -10 ahead gives 10 / cos(angle) within +-60 deg,
    inf (REP-117) where nothing returns."""
    from blensor_addon.jobs.range_scan import scan_range
    from test_rosbag import read_bag
    add_mesh(bpy_mod, "Wall", *quad(-10 * math.tan(math.radians(60.5)), 10 * math.tan(math.radians(60.5)),
                                    -5, 5, -10.0))
    cam = add_camera(bpy_mod)
    over = {"sensor_type": "cylindrical", "channels": 1, "points_per_second": 3600.0,
            "rotation_frequency": 10.0,
            "vertical_fov_lower": 0.0, "vertical_fov_upper": 0.0, "max_range": 50.0}
    sensor, s = make(**{k: v for k, v in over.items() if k != "sensor_type"})
    assert sensor.capabilities(s).column_angles == (0.0, pytest.approx(-math.pi / 180))
    assert make(channels=1, vertical_fov_upper=0.0, horizontal_fov_end=180.0)[0].capabilities(
        make(channels=1, vertical_fov_upper=0.0, horizontal_fov_end=180.0)[1]).column_angles is None
    job = scan_range(cam, range(1, 3), tmp_path, ("rosbag2",), axes="ros", **over)
    assert job.status == "complete"
    scans = [m for msgs in read_bag(tmp_path / "rosbag2").values() for _, m, kind in msgs
             if kind.endswith("LaserScan")]
    assert len(scans) == 2  # [1/24, 3/24) s overlaps revolutions 0 and 1
    m = scans[1]
    assert m.angle_min == 0.0 and m.angle_increment == pytest.approx(-math.pi / 180)
    assert len(m.ranges) == 360 and m.scan_time == pytest.approx(0.1)
    a = m.angle_min + m.angle_increment * np.arange(360)
    ranges = np.asarray(m.ranges, dtype=np.float64)
    ahead = np.abs(np.rad2deg(np.arctan2(np.sin(a), np.cos(a)))) <= 60.0
    np.testing.assert_allclose(ranges[ahead], 10.0 / np.cos(a[ahead]), rtol=1e-5)
    assert np.isinf(ranges[~ahead & (np.cos(a) < 0)]).all()
