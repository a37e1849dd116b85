"""Device truth for the Kinect v1 and the Ibeo LUX: analytic depths,
back-projection, disparity grid and noise of the Kinect; layer elevations, quantized
ranges, column times and minimum range of the LUX."""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.sensors import SENSORS
from conftest import add_camera, add_mesh

UP = (math.pi / 2, 0.0, 0.0)  # camera rotation: sensor +Y = world +Z, looking along world +Y


def wall(bpy, y, x0=-30.0, x1=30.0, name="Wall"):
    """A wall facing the sensor at distance ``y`` (m) ahead, from x0 to x1 (sensor X)."""
    return add_mesh(bpy, name, [(x0, y, -30), (x1, y, -30), (x1, y, 30), (x0, y, 30)], [(0, 1, 2, 3)])


# ---------------------------------------------------------------------------------------
# Kinect


def kinect_depth(r):
    """(H, W) depth image (m, NaN where invalid) of a Kinect result."""
    from blensor_addon.io.formats.depthmaps import depth_images
    return depth_images(r, noisy=True)["z"].astype(np.float64)


def test_kinect_depth_image_lies_on_the_ir_cameras_grid(bpy_mod, empty_scene):
    # issue 21, section 1 (Kinect): the old image was computed on the projector's grid,
    # 0.075 m beside the IR camera its intrinsics describe: back-projected X was off by
    # the baseline and the wall's edge came out 21 px left of where the camera sees it.
    Zw, xe = 2.0, 0.5
    wall(bpy_mod, Zw, x1=xe)
    cam = add_camera(bpy_mod, rotation=UP)
    r = blensor_addon.scan(cam, sensor_type="kinect", noise_sigma=0.0, axes="blensor", backend="native")
    s = SENSORS["kinect"].settings()
    fb = s.focal_px * s.baseline
    fx, fy, cx, cy = r.intrinsics
    assert math.isclose(fx, s.focal_px) and math.isclose(fy, s.focal_px)
    z = kinect_depth(r)
    rows, cols = np.nonzero(np.isfinite(z))
    Z = z[rows, cols]
    step = Zw * Zw / (8 * fb)  # one disparity step at the wall
    assert np.all(np.abs(Z - Zw) <= step / 2 + 1e-6)
    # back-projection with the published intrinsics gives the point the pixel saw
    x_bp = (cols - cx) * Z / fx
    y_bp = -(rows - cy) * Z / fy
    order = np.argsort(r.ray_index)
    xyz = r.xyz.astype(np.float64)[order]  # the true points, in pixel order
    tol = np.abs(cols - cx) / fx * step / 2 + 1e-4
    assert np.all(np.abs(x_bp - xyz[:, 0]) <= tol)
    assert np.all(np.abs(y_bp - xyz[:, 1]) <= np.abs(rows - cy) / fy * step / 2 + 1e-4)
    np.testing.assert_allclose(xyz[:, 2], -Zw, atol=1e-4)
    np.testing.assert_allclose(xyz[:, 0], (cols - cx) * Zw / fx, atol=1e-4)  # on the pixel's own ray
    # the wall's right edge (X = 0.5 m) is where the camera sees it: column cx + fx X / Z,
    # less the window's erosion (a few px)
    edge = cx + fx * xe / Zw
    right = [cols[rows == row].max() for row in range(200, 280)]
    assert edge - 5 <= np.median(right) <= edge, (np.median(right), edge)


def test_kinect_depths_lie_on_the_disparity_grid_with_the_default_noise(bpy_mod, empty_scene):
    # issue 21, section 1 (Kinect): the default disparity noise was 0 px; the device's
    # depth is Z = f b 8 / k (integer k), quantized after the smoothing and the noise.
    Zw = 3.0
    wall(bpy_mod, Zw)
    cam = add_camera(bpy_mod, rotation=UP)
    s = SENSORS["kinect"].settings()
    assert s.noise_sigma == 0.06  # Khoshelham & Oude Elberink 2012: ~4 cm at 5 m
    r = blensor_addon.scan(cam, sensor_type="kinect", axes="blensor", backend="native", seed=5)
    fb = s.focal_px * s.baseline
    z = kinect_depth(r)
    Z = z[np.isfinite(z)]
    assert Z.size > 250_000
    k = fb * s.subpixel / Z
    assert np.max(np.abs(k - np.round(k))) < 1e-3  # every depth on the grid
    d = fb / Z  # measured disparity (px): true fb / Zw + N(0, 0.06) + quantization
    assert abs(d.mean() - fb / Zw) < 0.01
    expect = math.sqrt(0.06 ** 2 + (1 / 8) ** 2 / 12)
    assert 0.85 * expect < d.std() < 1.15 * expect, (d.std(), expect)
    assert len(np.unique(np.round(k))) >= 4
    # seeded: the same seed gives the same image, another seed another
    again = blensor_addon.scan(cam, sensor_type="kinect", axes="blensor", backend="native", seed=5)
    other = blensor_addon.scan(cam, sensor_type="kinect", axes="blensor", backend="native", seed=6)
    assert again.xyz_noisy.tobytes() == r.xyz_noisy.tobytes()
    assert not np.array_equal(kinect_depth(other), z, equal_nan=True)
    # min_range applies to the measured range along the pixel ray
    near = blensor_addon.scan(cam, sensor_type="kinect", backend="native", min_range=3.2, width=160,
                              height=120)
    rn = near.range_noisy
    assert len(near) > 1000 and rn.min() >= 3.2 and rn.max() > 3.5  # the centre (3 m) is gone


# ---------------------------------------------------------------------------------------
# Ibeo LUX


def test_lux_layers_ranges_and_resolution_on_a_wall(bpy_mod, empty_scene):
    # issue 21, section 1 (Ibeo LUX): the layers were +-0.8 and +-1.6 deg (6.4 deg, a fan
    # that rotated with the mirror), the range 90 m and not quantized; the LUX has layers
    # at -1.2, -0.4, +0.4, +1.2 deg over its whole field, 200 m and 4 cm steps.
    D = 10.0
    wall(bpy_mod, D, x0=-100.0, x1=100.0)
    cam = add_camera(bpy_mod, rotation=UP)
    r = blensor_addon.scan(cam, sensor_type="line", noise_sigma=0.0, axes="blensor", backend="native")
    s = SENSORS["line"].settings()
    assert s.max_range == 200.0 and s.range_resolution == 0.04 and s.min_range == 0.3
    assert r.grid_shape == (4, 340) and len(r) == 4 * 340
    el = np.rad2deg(r.elevation)
    for k, e in enumerate((-1.2, -0.4, 0.4, 1.2)):
        np.testing.assert_allclose(el[r.channel == k], e, atol=1e-5)
    assert np.array_equal(r.ring, r.channel)  # layer 0 is the lowest
    az = np.rad2deg(r.azimuth)
    az = np.where(az > 180, az - 360, az)
    col = 339 - r.ray_index % 340  # the grid's columns in firing order: +34.75 deg first (cw)
    np.testing.assert_allclose(az, -50 + 0.25 * col, atol=1e-4)
    # analytic range to the wall, and the reported range in 4 cm steps
    true = D / (np.cos(r.azimuth) * np.cos(r.elevation))
    np.testing.assert_allclose(r.range, true, atol=1e-4)
    steps = r.range_noisy / 0.04
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-9)
    assert np.all(np.abs(r.range_noisy - r.range) <= 0.02 + 1e-6)
    clear = np.abs(true / 0.04 - np.floor(true / 0.04) - 0.5) > 1e-3
    np.testing.assert_allclose(r.range_noisy[clear], np.round(true[clear] / 0.04) * 0.04, atol=1e-9)
    # the points sit on the wall at their layer's elevation
    xyz = r.xyz.astype(np.float64)
    np.testing.assert_allclose(xyz[:, 2], -D, atol=1e-3)
    np.testing.assert_allclose(xyz[:, 1] / np.hypot(xyz[:, 0], xyz[:, 2]), np.tan(r.elevation), atol=1e-5)


def test_lux_columns_fire_within_a_quarter_turn(bpy_mod, empty_scene):
    # issue 21, section 1 (Ibeo LUX): the 85 deg field took the whole 80 ms period (79.8
    # ms); the beam turns once per period, so it takes 85/360 of it (18.9 ms), right to
    # left... the LUX sweeps clockwise: from +35 deg (left) down to -50 deg.
    wall(bpy_mod, 10.0, x0=-100.0, x1=100.0)
    cam = add_camera(bpy_mod, rotation=UP)
    r = blensor_addon.scan(cam, sensor_type="line", noise_sigma=0.0, axes="blensor", backend="native",
                           frame=1)
    t0 = r.frame * r.frame_time
    az = np.rad2deg(r.azimuth)
    az = np.where(az > 180, az - 360, az)
    dt = 0.25 / (360 * 12.5)  # 55.6 us a column
    np.testing.assert_allclose(r.timestamp - t0, (34.75 - az) / 0.25 * dt, atol=1e-7)  # az: float32
    np.testing.assert_allclose(r.timestamp - t0, r.ray_index % 340 * dt, atol=1e-12)
    assert math.isclose(np.ptp(r.timestamp), 339 * dt) and np.ptp(r.timestamp) < 0.0189
    assert r.capabilities.timing.period == 0.08  # still one sweep output per 80 ms
    # range scans: a second at 24 frames/s holds the sweeps starting at 0, 0.08, .. 0.96 s
    # (13 x 340 columns; the last ends at 0.979 s), each column in the frame its time falls in
    sensor = SENSORS["line"]
    s = sensor.settings()
    from blensor_addon.core.sensors.line import line_columns
    ft, total = 1 / 24, 0
    for f in range(24):
        col, t = line_columns(s, 340, f, ft, "range")
        assert sensor.grid_shape(s, f, ft, "range", None) == (4, col.size)
        assert np.all((t >= f * ft - 1e-12) & (t < (f + 1) * ft))
        phase = t - np.floor(t * 12.5 + 1e-9) / 12.5  # within the sweep: only the first 18.9 ms of each 80 ms
        assert np.all(phase < 0.0189)
        np.testing.assert_allclose(phase / dt, 339 - col, atol=1e-6)
        total += col.size
    assert total == 13 * 340


def test_lux_minimum_range_and_the_2011_preset(bpy_mod, empty_scene):
    # issue 21, section 1 (minimum range): returns came back at any range; the LUX
    # reports 0.3..200 m (MRPT's Ibeo LUX driver drops 30 cm and less)
    wall(bpy_mod, 0.15)
    cam = add_camera(bpy_mod, rotation=UP)
    r = blensor_addon.scan(cam, sensor_type="line", noise_sigma=0.0, backend="native")
    assert len(r) == 0
    r = blensor_addon.scan(cam, sensor_type="line", noise_sigma=0.0, min_range=0.0, backend="native")
    assert len(r) == 4 * 340 and r.range_noisy.min() >= 0.13
    # the original's numbers stay available as a preset (index 1; ibeo_lux keeps 0)
    sensor = SENSORS["line"]
    assert list(sensor.presets) == ["ibeo_lux", "ibeo_lux_2011"]
    old = sensor.settings(sensor.preset_values("ibeo_lux_2011"))
    assert old.max_range == 90.0 and old.mirror == "inclined" and old.sweep_timing == "period"
    assert tuple(old.pitch_deg) == (1.6, 0.8, -0.8, -1.6) and old.min_range == 0.0
    assert math.isclose(old.column_interval * 340, 0.08)
    from blensor_addon.core.sensors.line import line_columns
    col, t = line_columns(old, 340, 3, 1 / 24, "single")  # the original's column times, bit for bit
    assert np.array_equal(col, np.arange(340)) and np.array_equal(t, 3 / 24 + np.arange(340) / (340 * 12.5))
    col, t = line_columns(old, 340, 5, 1 / 24, "range")
    g = np.arange(math.ceil(5 / 24 * 4250 - 1e-9), math.ceil(6 / 24 * 4250 - 1e-9))
    assert np.array_equal(col, g % 340) and np.array_equal(t, g / 4250.0)


@pytest.mark.parametrize("preset", ["ibeo_lux", "ibeo_lux_2011"])
def test_lux_presets_validate_and_keep_their_indices(preset):
    sensor = SENSORS["line"]
    s = sensor.settings(sensor.preset_values(preset))
    assert list(sensor.presets).index(preset) == {"ibeo_lux": 0, "ibeo_lux_2011": 1}[preset]
    assert s.preset == preset and len(s.pitch_deg) == len(s.bias_m) == 4
