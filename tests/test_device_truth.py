"""Device truth: the rotating LiDAR's mechanics and the shared
return physics, each against a closed form or the vendor driver's published formula.

- spin direction (cw like Velodyne and Ouster heads; scenes saved before keep ccw);
- per-laser calibration: azimuth corrections, firing offsets, Velodyne's vertical and
  horizontal beam-origin offsets as velodyne_pointcloud's rawdata.cc places the point,
  Ouster's beam origin and range convention, ring numbers;
- minimum range on the measured range; seed 002 Eq. 4-5 at the measured depth; a
  surface of reflectivity 0 never returns; the Device a rotating preset models.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import get_sensor
from blensor_addon.core.sensors.calibration import LaserTable
from blensor_addon.core.sensors.rotating import LidarSettings, firing_offsets, make_pattern, scan_columns
from conftest import CROSSING, add_camera, add_mesh, cylinder_mesh, generic_sensor, quad

ROOT = Path(__file__).resolve().parent.parent
ROT = get_sensor("rotating")


def lidar(preset, **values):
    """Validated rotating settings with the preset's values, then ``values``."""
    return ROT.settings({**ROT.preset_values(preset), **values})


def ros_points(pattern, d):
    """REP-103 points (N, 3) of the pattern's rays at path length ``d`` (m) from their
    origins: BlenSor's sensor frame (x right, y up, -z ahead) -> x ahead, y left, z up."""
    u = pattern.directions.astype(np.float64)
    o = np.zeros_like(u) if pattern.origins is None else pattern.origins.astype(np.float64)
    p = o + d * u
    return np.stack([-p[:, 2], -p[:, 0], p[:, 1]], axis=1)


# ---------------------------------------------------------------------------------------
# spin direction


@pytest.mark.parametrize("direction,sign", [("cw", -1.0), ("ccw", 1.0)])
def test_column_azimuth_turns_with_the_spin_direction(direction, sign):
    # issue 21, section 1: every preset turned counter-clockwise seen from above (psi grew
    # with time); Velodyne and Ouster heads turn clockwise: psi falls at 360 f deg/s.
    s = lidar("vlp16", rotation_direction=direction, start_angle=-30.0, end_angle=30.0, angle_resolution=0.2)
    for mode, frame in (("single", 3), ("range", 2), ("range", 4)):
        az, t = scan_columns(s, frame, 1 / 24, mode)
        assert len(az) > 20
        rate = np.diff(np.unwrap(np.deg2rad(az))) / np.diff(t)
        np.testing.assert_allclose(np.rad2deg(rate), sign * 3600.0, rtol=1e-9)
    az, t = scan_columns(s, 0, 1 / 24, "single")
    # the head enters the sector at its end (cw) or its start (ccw)
    assert az[0] == (30.0 if direction == "cw" else -30.0) and t[0] == 0.0
    assert len(az) == int(60.0 / 0.2 + 1e-9) == 300


def test_cw_range_scan_sector_and_tiling():
    s = lidar("vlp16", start_angle=0.0, end_angle=90.0, angle_resolution=0.2)  # cw by default
    assert s.rotation_direction == "cw"
    az = np.concatenate([scan_columns(s, f, 1 / 24, "range")[0] for f in range(12)])
    # a cw head keeps (start, end]: psi in (0, 90]
    assert az.size > 0 and az.min() > 0.0 and az.max() <= 90.0
    assert len(az) == 5 * 450  # 12 frames at 24 fps: 5 turns at 10 Hz, 450 columns of the sector each
    # each turn of a range scan is a single scan's sweep: same azimuths, same times
    for sector in ((0.0, 360.0), (-180.0, 180.0), (10.0, 100.0)):
        s = lidar("vlp16", start_angle=sector[0], end_angle=sector[1])
        cols = [scan_columns(s, f, 1 / 24, "range") for f in range(3)]  # 0.125 s > one turn
        az = np.concatenate([c[0] for c in cols])
        t = np.concatenate([c[1] for c in cols])
        one_az, one_t = scan_columns(s, 0, 1 / 24, "single")
        n = len(one_az)
        np.testing.assert_allclose(az[:n], np.mod(one_az, 360.0), atol=1e-9)
        np.testing.assert_allclose(t[:n], one_t, atol=1e-12)


def test_firing_offsets_turn_in_the_spin_direction():
    # a laser firing dt after its column sees the head turned 360 f dt in the spin direction
    table = LaserTable(vendor="velodyne", model="T", elevation_deg=(-1.0, 1.0, 3.0),
                       azimuth_deg=(0.5, -0.25, 0.0), firing_s=(0.0, 2.304e-6, 4.608e-6), cycle_s=55.296e-6)
    for direction, sign in (("cw", -1.0), ("ccw", 1.0)):
        s = LidarSettings(preset="generic", calibration=table.to_json(), rotation_direction=direction,
                          angle_resolution=1.0).validate()
        az, t = scan_columns(s, 0, 1 / 24, "single")
        fire = firing_offsets(s)
        np.testing.assert_array_equal(fire, table.firing_s)
        p = make_pattern(s, az, t, firing=fire)
        expect = az[:, None] - np.array(table.azimuth_deg)[None, :] + sign * 3600.0 * fire[None, :]
        got = np.rad2deg(p.azimuth).reshape(-1, 3)
        np.testing.assert_allclose(np.mod(got - expect + 180.0, 360.0) - 180.0, 0.0, atol=1e-9)
        np.testing.assert_allclose(p.timestamp.reshape(-1, 3), t[:, None] + fire[None, :], atol=1e-15)
        # and the ray points there: yaw (REP-103) of the direction = the reported azimuth
        x = ros_points(p, 1.0)
        yaw = np.arctan2(x[:, 1], x[:, 0])
        np.testing.assert_allclose(np.mod(yaw - p.azimuth + np.pi, 2 * np.pi) - np.pi, 0.0, atol=1e-6)


def test_rep103_yaw_falls_with_time_in_a_scan(bpy_mod, empty_scene):
    # issue 21, section 1: in REP-103 output yaw grew at +3600 deg/s; a real head's falls
    add_mesh(bpy_mod, "Cyl", *cylinder_mesh(6.0, -20, 20, segments=720))
    bpy_mod.data.objects["Cyl"].rotation_euler = (math.pi / 2, 0, 0)  # axis = the spin axis
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, rotation_speed=10.0)
    assert cam.data.blensor.rotation_direction == "cw"  # a new camera
    r = blensor_addon.scan(cam, axes="ros")
    order = np.argsort(r.timestamp)
    yaw = np.unwrap(np.arctan2(r.xyz[order, 1], r.xyz[order, 0]).astype(np.float64))
    slope = np.polyfit(r.timestamp[order], np.rad2deg(yaw), 1)[0]
    assert slope == pytest.approx(-3600.0, rel=1e-4)
    r2 = blensor_addon.scan(cam, axes="ros", rotation_direction="ccw")
    order = np.argsort(r2.timestamp)
    yaw = np.unwrap(np.arctan2(r2.xyz[order, 1], r2.xyz[order, 0]).astype(np.float64))
    assert np.polyfit(r2.timestamp[order], np.rad2deg(yaw), 1)[0] == pytest.approx(3600.0, rel=1e-4)


def test_scenes_saved_before_version_2_keep_ccw_and_new_cameras_spin_cw(bpy_mod, tmp_path):
    from blensor_addon.ui.props import SETTINGS_VERSION
    assert SETTINGS_VERSION == 4
    bpy_mod.ops.wm.open_mainfile(filepath=str(ROOT / "tests" / "data" / "v01_scene.blend"))  # version 0
    p = bpy_mod.data.objects["Lidar"].data.blensor
    assert (p.rotation_direction, p.axes, p.settings_version) == ("ccw", "blensor", 4)
    # the demo scene, rebuilt at version 2, spins cw; stored as a version-1 camera that
    # never stored a direction (as every file saved before version 2), it loads ccw
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))
    p = bpy_mod.data.objects["Velodyne"].data.blensor
    assert (p.rotation_direction, p.settings_version) == ("cw", 4)
    p.property_unset("rotation_direction")
    p.settings_version = 1
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "v1.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "v1.blend"))
    p = bpy_mod.data.objects["Velodyne"].data.blensor
    assert (p.rotation_direction, p.axes, p.time_model, p.settings_version) == ("ccw", "ros", "continuous", 4)
    # a new camera spins cw, kept through save and load
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    cam = add_camera(bpy_mod, "New")
    assert cam.data.blensor.rotation_direction == "cw"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "new.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "new.blend"))
    p = bpy_mod.data.objects["New"].data.blensor
    assert (p.rotation_direction, p.settings_version) == ("cw", 4)
    # a version-1 camera that stored a direction keeps it
    from blensor_addon.ui.props import upgrade_camera
    p.rotation_direction = "cw"
    p.settings_version = 1
    assert upgrade_camera(bpy_mod.data.objects["New"].data) is True
    assert (p.rotation_direction, p.settings_version) == ("cw", 4)


# ---------------------------------------------------------------------------------------
# per-laser calibration


def velodyne_driver_xyz(rotation_deg, rot_corr, vert_corr, vo, ho, distance):
    """velodyne_pointcloud rawdata.cc (RawData::unpack, without the two-point correction):
    the point the driver publishes for a raw block azimuth ``rotation_deg`` and a laser's
    corrections (rad, m), REP-103."""
    a = np.deg2rad(rotation_deg)
    cos_rot, sin_rot = np.cos(a - rot_corr), np.sin(a - rot_corr)
    xy = distance * np.cos(vert_corr) - vo * np.sin(vert_corr)
    x = xy * sin_rot - ho * cos_rot
    y = xy * cos_rot + ho * sin_rot
    z = distance * np.sin(vert_corr) + vo * np.cos(vert_corr)
    return np.stack(np.broadcast_arrays(y, -x, z), axis=-1)  # x_coord = y, y_coord = -x, z_coord = z


def test_velodyne_offsets_place_points_as_velodyne_pointcloud():
    # issue 21, section 1 (HDL-64E S2): per-laser azimuth corrections and beam-origin
    # offsets of a calibration were not applied. The driver's point for distance d equals
    # the ray's origin + d * direction, the raw azimuth a being -psi (cw: a grows with time)
    # and rot_correction = -a_k (the laser fires along psi - a_k).
    rng = np.random.default_rng(21)
    L = 8
    rc = rng.uniform(-0.15, 0.17, L)  # rad, like 64e_utexas.yaml's -8.8..+10 deg
    vc = np.deg2rad(rng.uniform(-24.0, 2.0, L))
    vo = rng.uniform(0.10, 0.22, L)
    ho = rng.uniform(-0.026, 0.026, L)
    table = LaserTable(vendor="velodyne", model="HDL-64E S2 (test)", elevation_deg=tuple(np.rad2deg(vc)),
                       azimuth_deg=tuple(-np.rad2deg(rc)), vert_offset_m=tuple(vo), horiz_offset_m=tuple(ho))
    s = LidarSettings(preset="hdl64e_s2", calibration=table.to_json(), angle_resolution=7.5).validate()
    az, t = scan_columns(s, 0, 1 / 24, "single")
    p = make_pattern(s, az, t)
    for d in (2.5, 40.0):
        got = ros_points(p, d).reshape(len(az), L, 3)
        want = velodyne_driver_xyz((-az)[:, None], rc[None, :], vc[None, :], vo[None, :], ho[None, :], d)
        np.testing.assert_allclose(got, want, atol=2e-6 * max(d, 1.0))
    # the old code dropped the offsets: the origins are 10-22 cm off the axis
    assert p.origins is not None and np.linalg.norm(p.origins, axis=1).max() > 0.1


def test_distance_correction_gives_the_raw_distance_of_the_packet():
    from blensor_addon.core.sensors.rotating import raw_distance
    table = LaserTable(vendor="velodyne", model="T", elevation_deg=(0.0, 1.0), distance_m=(1.2, 1.4))
    np.testing.assert_allclose(raw_distance(table, np.array([0, 1, 1]), np.array([10.0, 10.0, 5.0])),
                               [8.8, 8.6, 3.6])


def ouster_table(n=0.02767, ring=()):
    return LaserTable(vendor="ouster", model="OS (test)", elevation_deg=(10.0, 0.0, -10.0), beam_origin_m=n,
                      ring=ring)


def test_ouster_range_includes_the_beam_origin_offset(bpy_mod, empty_scene):
    # issue 21, section 1: Ouster's range-to-XYZ puts the point at n (cos th, sin th, 0) +
    # (r - n) dir: the reported range r is the path from the beam origin plus n. Inside a
    # cylinder of radius R about the axis a horizontal beam's path is R - n: r = R.
    # The old code reported R - n (and ignored an imported calibration).
    R, n = 5.0, 0.02767
    add_mesh(bpy_mod, "Cyl", *cylinder_mesh(R, -20, 20, segments=3600))
    bpy_mod.data.objects["Cyl"].rotation_euler = (math.pi / 2, 0, 0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=360 / 512)  # an Ouster table: a lidar mode's grid (512x10)
    r = blensor_addon.scan(cam, axes="ros", calibration=ouster_table(n).to_json())
    assert len(r) == 3 * 512
    mid = r.channel == 1
    np.testing.assert_allclose(r.range[mid], R, atol=2e-4)
    np.testing.assert_allclose(r.range_noisy, r.range)
    # the points stay on the cylinder: |xy| = R for the horizontal beam
    np.testing.assert_allclose(np.hypot(r.xyz[mid, 0], r.xyz[mid, 1]), R, atol=2e-4)
    # tilted beams: r - n is the path from the beam origin to the point
    xyz = r.xyz.astype(np.float64)
    yaw = np.deg2rad(np.round(np.rad2deg(r.azimuth.astype(np.float64)), 6))
    origin = n * np.stack([np.cos(yaw), np.sin(yaw), np.zeros_like(yaw)], axis=1)
    np.testing.assert_allclose(np.linalg.norm(xyz - origin, axis=1) + n, r.range, atol=2e-4)
    # ouster-ros: ring = beam index, the top beam 0 (the old code ranked elevations: 2)
    assert np.array_equal(np.unique(r.ring[r.channel == 0]), [0])
    assert np.array_equal(np.unique(r.ring[r.channel == 2]), [2])
    # the OS0-128 preset (beam azimuth offsets a_k): the origin lies on the head's azimuth
    # psi = reported beam azimuth + a_k; range - n = the path from it (the old code: range = path)
    r = blensor_addon.scan(cam, axes="ros", preset="os0_128", noise_sigma=0.0, max_range=50.0)
    s = lidar("os0_128")
    assert len(r) > 100_000 and s.beam_origin == pytest.approx(n)
    head = r.azimuth.astype(np.float64) + np.deg2rad(s.azimuth_offsets_deg[r.channel.astype(np.int64)])
    origin = n * np.stack([np.cos(head), np.sin(head), np.zeros_like(head)], axis=1)
    path = np.linalg.norm(r.xyz.astype(np.float64) - origin, axis=1)
    np.testing.assert_allclose(path + n, r.range, atol=5e-4)
    assert r.ring[np.argmax(r.elevation)] == 0


def test_rings_follow_the_vendor_driver():
    s = lidar("os0_128")
    rings = ROT.channel_rings(s)
    assert rings[np.argmax(s.elevations_deg)] == 0 and rings[np.argmin(s.elevations_deg)] == 127
    s = LidarSettings(preset="generic", calibration=ouster_table(ring=(2, 0, 1)).to_json(),
                      angle_resolution=360 / 1024).validate()
    assert list(ROT.channel_rings(s)) == [2, 0, 1]  # the table's own
    s = LidarSettings(preset="vlp16").validate()  # velodyne_pointcloud: by elevation, 0 = lowest
    assert list(ROT.channel_rings(s)[:4]) == [0, 8, 1, 9]


def test_bad_calibration_is_one_line_naming_it():
    with pytest.raises(SettingsError, match="calibration"):
        LidarSettings(calibration="{not json").validate()
    bad = json.dumps({"elevation_deg": [0.0, 1.0], "azimuth_deg": [0.0]})
    with pytest.raises(SettingsError, match="calibration.azimuth_deg"):
        LidarSettings(calibration=bad).validate()


# ---------------------------------------------------------------------------------------
# minimum range, seed 002 Eq. 4-5, reflectivity 0


def fake_hits(reflectivity, cos_inc):
    n = len(reflectivity)
    return SimpleNamespace(reflectivity=np.asarray(reflectivity, np.float32),
                           cos_incidence=np.asarray(cos_inc), range=np.zeros(n), hit=np.ones(n, bool),
                           returned=None, energy=None)


def test_min_range_and_linear_model_decide_at_the_measured_range():
    # issue 21, section 1: the detection decision is taken at the noisy depth (seed 002
    # section II-D) and a return nearer than min_range is not reported
    s = lidar("os0_128", return_model="linear", ref_max=0.8, max_range=50.0, min_range=0.5)
    hits = fake_hits([0.5] * 5, [0.5] * 5)
    r_noisy = np.array([0.45, 0.55, 15.6, 15.65, 60.0])
    keep = ROT.detected(s, None, hits, r_noisy)
    assert keep.tolist() == [False, True, True, False, False]
    # the limit model: only the minimum range
    s = s.replace(return_model="limit")
    assert ROT.detected(s, None, hits, r_noisy).tolist() == [False, True, True, True, True]
    assert ROT.detected(s.replace(min_range=0.0), None, hits, r_noisy) is None
    with pytest.raises(SettingsError, match="min_range must be less than max_range"):
        LidarSettings(min_range=200.0, max_range=100.0).validate()


def test_min_range_on_every_sensor_type(bpy_mod, empty_scene):
    # issue 21, section 1: returns came back at 0.17 m; now nothing nearer than min_range
    add_mesh(bpy_mod, "Wall", *quad(-5, 5, -5, 5, -0.3))  # 0.3 m ahead (sensor looks down -Z)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-10.0, end_angle=10.0, angle_resolution=1.0)
    assert len(blensor_addon.scan(cam)) == 20
    assert len(blensor_addon.scan(cam, min_range=0.5)) == 0
    assert len(blensor_addon.scan(cam, min_range=0.29)) == 20
    for kind, extra in (("planar", {"noise_sigma": 0.0, "error_table": ""}), ("tof", {"noise_sigma": 0.0}),
                        ("depth", {})):
        near = blensor_addon.scan(cam, sensor_type=kind, **extra)
        far = blensor_addon.scan(cam, sensor_type=kind, min_range=0.5, **extra)
        assert (near.range_noisy < 0.5).sum() > 0, kind
        assert np.array_equal(far.ray_index, near.ray_index[near.range_noisy >= 0.5]), kind
        assert len(blensor_addon.scan(cam, sensor_type=kind, min_range=0.29, **extra)) == len(near), kind


def test_seed_002_eq5_at_60_deg_incidence_returns_to_15_6_m(bpy_mod, empty_scene):
    # issue 21, section 1: seed 002 Eq. 4-5 tests R0 cos(theta) against ref_max d / d_max.
    # A reflectivity-0.5 floor seen at 60 deg incidence (a beam 30 deg below the horizon)
    # returns out to 0.25 / 0.8 x 50 = 15.625 m; the old code tested R0 alone (with the
    # OS0-128's Eq. 1 line 0.016 d) and returned to 31 m.
    mat = bpy_mod.data.materials.new("Grey")
    mat.blensor.reflectivity = 0.5
    ranges = (10.0, 15.0, 15.5, 15.75, 20.0, 30.0)
    for i, rng in enumerate(ranges):  # floor patches at heights -rng/2, one per azimuth
        h, psi = rng / 2.0, math.radians(30.0 * i)
        rho = h / math.tan(math.radians(30.0))  # horizontal distance of the hit
        cx, cz = -rho * math.sin(psi), -rho * math.cos(psi)  # BlenSor frame: psi grows toward -X
        add_mesh(bpy_mod, f"Floor{i}", [(cx - 1, -h, cz - 1), (cx + 1, -h, cz - 1), (cx + 1, -h, cz + 1),
                                        (cx - 1, -h, cz + 1)], [(0, 1, 2, 3)], mat)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "-30", angle_resolution=1.0, max_range=50.0, ref_dist=0.0, ref_limit=0.0,
                   ref_slope=0.016, return_model="linear", ref_max=0.8)
    r = blensor_addon.scan(cam)
    names = {o["id"]: o["name"] for o in r.objects}
    seen = sorted({names[i] for i in np.unique(r.object_id)})
    assert seen == ["Floor0", "Floor1", "Floor2"]  # 10, 15, 15.5 m; not 15.75 m and beyond
    assert r.range.max() == pytest.approx(15.5, abs=1e-3)
    np.testing.assert_allclose(r.intensity, 0.5 * 0.5, atol=1e-4)  # intensity R0 cos(theta)
    # the limit model (seed 000 Eq. 1) with the same line keeps them to 31.25 m
    old = blensor_addon.scan(cam, return_model="limit")
    assert sorted({names[i] for i in np.unique(old.object_id)}) == [f"Floor{i}" for i in range(6)]


@pytest.mark.parametrize("model", ["limit", "linear"])
def test_a_surface_of_reflectivity_0_never_returns(bpy_mod, empty_scene, model):
    # issue 21, section 1: below ref_dist seed 000 Eq. 1's limit is -1 and 0 > -1 returned
    black = bpy_mod.data.materials.new("Black")
    black.blensor.reflectivity = 0.0
    grey = bpy_mod.data.materials.new("Grey")
    grey.blensor.reflectivity = 0.3
    add_mesh(bpy_mod, "Black", *quad(-10, 0, -5, 5, -5.0), black)
    add_mesh(bpy_mod, "Grey", *quad(0, 10, -5, 5, -5.0), grey)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-20.5, end_angle=19.5, angle_resolution=1.0, return_model=model)
    r = blensor_addon.scan(cam)
    names = {o["id"]: o["name"] for o in r.objects}
    assert {names[i] for i in np.unique(r.object_id)} == {"Grey"}
    for kind in ("planar",):
        r = blensor_addon.scan(cam, sensor_type=kind, start_angle=-20.5, end_angle=19.5, angle_resolution=1.0,
                               error_table="")
        assert {names[i] for i in np.unique(r.object_id)} == {"Grey"}, kind


# ---------------------------------------------------------------------------------------
# the real unit a preset models


def test_capabilities_name_the_device():
    caps = ROT.capabilities(lidar("vlp16", min_range=0.5))
    d = caps.device
    assert (d.vendor, d.direction, d.rotation_speed) == ("velodyne", "cw", 10.0)
    assert (d.min_range, d.max_range) == (0.5, 100.0)
    assert d.table.lasers == 16 and d.table is LidarSettings(preset="vlp16").table
    # the grid cast: 360 / angle_resolution columns a turn (the preset's step is one 55.296 us cycle)
    assert d.columns == 360.0 / lidar("vlp16").angle_resolution == pytest.approx(1e6 / 552.96, rel=1e-6)
    d = ROT.capabilities(lidar("os0_128", rotation_direction="ccw")).device
    assert (d.vendor, d.direction) == ("ouster", "ccw") and d.columns == 1024.0
    assert ROT.capabilities(LidarSettings(preset="generic").validate()).device is None
    # issue 21 review: columns were 1 / (rotation_speed cycle_s) whatever the step cast (2170.14 here)
    t = LaserTable(vendor="velodyne", model="X", elevation_deg=(0.0,), cycle_s=46.08e-6)
    d = ROT.capabilities(LidarSettings(preset="generic", calibration=t.to_json()).validate()).device
    assert d.model == "X" and d.columns == pytest.approx(360.0 / 0.1728)  # 2083.33: the default step
    d = ROT.capabilities(lidar("hdl32e", angle_resolution=0.5)).device
    assert d.columns == 720.0 and ROT.capabilities(lidar("hdl32e")).device.columns == pytest.approx(2170.1389)


def test_ouster_points_sit_at_the_lidar_origin_in_the_sensor_frames_axes(bpy_mod, empty_scene):
    # the frame docs/formats.md gives Ouster output: the camera's origin is Ouster's lidar origin
    # (no lidar_to_sensor_transform shift: ouster-sdk's and ouster-ros's os_sensor points are 36.18 mm
    # higher), the axes REP-103's of the camera (Ouster's sensor frame, not os_lidar turned 180 deg)
    from blensor_addon.core.sensors.rotating_presets import preset_table
    from blensor_addon.io.packets.ouster import DEFAULT_LIDAR_TO_SENSOR
    add_mesh(bpy_mod, "Floor", *quad(-100, 100, -100, 100, 0.0))
    cam = add_camera(bpy_mod, location=(0.0, 0.0, 2.0), rotation=(math.pi / 2, 0.0, 0.0))  # sensor +Y = up
    cam.data.blensor.preset = "os1_64"
    r = blensor_addon.scan(cam, axes="ros", noise_sigma=0.0, time_model="frame")
    assert len(r) > 1000
    np.testing.assert_allclose(r.xyz[:, 2], -2.0, atol=1e-5)  # the floor 2 m below the camera's origin
    assert DEFAULT_LIDAR_TO_SENSOR[11] == 36.18
    l2s = preset_table("os1_64").extra.get("lidar_to_sensor_transform", DEFAULT_LIDAR_TO_SENSOR)
    assert (l2s[0], l2s[5], l2s[11]) == (-1.0, -1.0, 36.18)  # what ouster-sdk adds to reach os_sensor
