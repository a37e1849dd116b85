"""Continuous time: every ray at its own firing time while the sensor and the
scene move, sweeps as packets, datasheet firing offsets, deskewed points.

The sensor frame of an unrotated camera is the world frame (+X right, +Y up, looking
down -Z); the head spins about +Y, azimuth psi growing toward -X (seed 000 section 3.2).
A ray at azimuth psi and elevation e points along
``(-cos e sin psi, sin e, -cos e cos psi)``.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from conftest import add_camera, add_mesh, cylinder_mesh, generic_sensor, quad

BACKENDS = ["native", "bvhtree"]


def drive(obj, path, index, expression):
    """Animate ``obj.path[index]`` (or ``obj.path`` if index is None) by a driver
    expression of ``frame`` (exact at subframes: constant velocities without keyframe
    easing)."""
    fc = obj.driver_add(path) if index is None else obj.driver_add(path, index)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = expression
    return fc


def key(obj, path, frame, value):
    setattr(obj, path, value)
    obj.keyframe_insert(path, frame=frame)


def direction(psi, e):
    return np.stack([-np.cos(e) * np.sin(psi), np.sin(e) * np.ones_like(psi), -np.cos(e) * np.cos(psi)], 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sensor_moving_along_a_wall(bpy_mod, empty_scene, backend):
    # sensor at v m/s along +X, parallel to the wall z = -H: each point lies where the
    # ray fired at its time meets the wall, so a sweep is skewed along the wall by v (t - t0)
    H, v = 10.0, 20.0
    add_mesh(bpy_mod, "Wall", *quad(-300, 300, -50, 50, -H))
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0,-10,10", angle_resolution=0.5, max_range=60.0, start_angle=-60.0, end_angle=60.0,
                   rotation_speed=2.0)
    drive(cam, "location", 0, f"{v} * frame / 24")  # 24 fps
    assert cam.data.blensor.time_model == "continuous"
    r = blensor_addon.scan(cam, axes="blensor", frame=6, backend=backend, frame_of_reference="world")
    assert len(r) == 240 * 3
    t = r.timestamp
    t0 = 6 / 24
    assert t.min() == pytest.approx(t0) and t.max() > t0 + 0.16  # a 120 deg sector at 2 Hz: 1/6 s
    e = r.elevation.astype(np.float64)
    d = direction(np.deg2rad(np.round(np.rad2deg(r.azimuth.astype(np.float64)) / 0.5) * 0.5), e)
    rng = H / -d[:, 2]
    np.testing.assert_allclose(r.range, rng, atol=1e-4, rtol=0)
    np.testing.assert_allclose(r.xyz[:, 0], v * t + d[:, 0] * rng, atol=1e-4, rtol=0)
    np.testing.assert_allclose(r.xyz[:, 2], -H, atol=1e-4)
    # frozen frames: the whole sector from the frame's one position (error up to v x 1/6 s)
    rf = blensor_addon.scan(cam, axes="blensor", frame=6, backend=backend, frame_of_reference="world",
                            time_model="frame")
    assert np.abs(rf.xyz[:, 0] - (v * t0 + d[:, 0] * rng)).max() < 1e-4
    assert np.abs(rf.xyz[:, 0] - r.xyz[:, 0]).max() > 3.0
    # sensor frame + deskew: the points in the sensor frame at the sweep start
    rs = blensor_addon.scan(cam, axes="blensor", frame=6, backend=backend, deskew=True)
    np.testing.assert_allclose(rs.xyz[:, 0], d[:, 0] * rng, atol=1e-4)
    np.testing.assert_allclose(rs.extra["xyz_deskewed"][:, 0], v * (t - t0) + d[:, 0] * rng, atol=2e-4)
    np.testing.assert_allclose(rs.sensor_to_world[:3, 3], [v * t0, 0, 0], atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_crossing_the_view_appears_where_it_was_at_each_column(bpy_mod, empty_scene,
                                                                       backend):
    # a 2 m wide plate 8 m ahead crosses from right to left at 30 m/s; the head sweeps
    # against it, so every return is where the plate was at that column's time
    H, v, w = 8.0, 30.0, 2.0
    plate = add_mesh(bpy_mod, "Plate", *quad(-w / 2, w / 2, -3, 3, 0.0))
    plate.location = (0.0, 0.0, -H)
    drive(plate, "location", 0, f"6 - {v} * frame / 24")
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.1, max_range=60.0, start_angle=-80.0, end_angle=80.0,
                   rotation_speed=5.0)
    r = blensor_addon.scan(cam, frame=3, backend=backend, frame_of_reference="world")
    assert len(r) > 20
    x_plate = 6.0 - v * r.timestamp  # plate centre at each return's time
    tol = 1e-4 if backend == "native" else 2e-3  # BVHTree slices time (<= 1 mm of motion a slice)
    assert np.all(np.abs(r.xyz[:, 0] - x_plate) <= w / 2 + tol)
    np.testing.assert_allclose(r.xyz[:, 2], -H, atol=1e-4)
    # every column whose ray meets the plate at its time returns (none missing); the head
    # turns clockwise (issue 21, section 1): column k looks at psi = 80 - 0.1 k deg
    psi = np.deg2rad(80.0 - 0.1 * np.arange(1600))
    tcol = 3 / 24 + (80.0 - np.rad2deg(psi)) / (360.0 * 5.0)
    x_ray = -np.tan(psi) * H
    inside = np.abs(x_ray - (6.0 - v * tcol)) < w / 2 - 1e-3
    assert len(r) >= inside.sum() and len(r) <= inside.sum() + 2
    # frozen frame: the plate stays where it was at the frame start
    rf = blensor_addon.scan(cam, frame=3, backend=backend, frame_of_reference="world", time_model="frame")
    assert np.all(np.abs(rf.xyz[:, 0] - (6.0 - v * 3 / 24)) <= w / 2 + tol)


def test_turning_sensor_shifts_azimuths(bpy_mod, empty_scene):
    # the body yaws at omega about the spin axis while the head turns: a pole at world
    # azimuth alpha is seen at reported azimuth alpha - omega (t - t0)
    omega = math.radians(180.0)  # rad/s
    alpha = math.radians(150.0)
    R = 10.0
    px, pz = -R * math.sin(alpha), -R * math.cos(alpha)
    add_mesh(bpy_mod, "Pole", *cylinder_mesh(0.05, -2, 2, segments=32), location=(px, pz, 0))
    pole = bpy_mod.data.objects["Pole"]
    pole.rotation_euler = (math.pi / 2, 0, 0)  # cylinder axis (local z) along world y
    pole.location = (px, 0.0, pz)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.05, max_range=60.0, rotation_speed=2.0)
    drive(cam, "rotation_euler", 1, f"{omega} * frame / 24")
    r = blensor_addon.scan(cam, frame=0)
    assert len(r) > 0
    t = r.timestamp
    seen = np.mod(r.azimuth.astype(np.float64), 2 * np.pi)
    # the pole's centre is at reported azimuth alpha - omega t, within its angular radius
    assert np.abs(seen.mean() - (alpha - omega * t.mean())) < 0.05 / R + math.radians(0.05)
    shift = alpha - seen.mean()
    assert shift == pytest.approx(omega * t.mean(), rel=0.01)  # about 0.52 rad here
    # frozen: no shift
    rf = blensor_addon.scan(cam, frame=0, time_model="frame")
    assert abs(np.mod(rf.azimuth.astype(np.float64), 2 * np.pi).mean() - alpha) < 0.05 / R + math.radians(0.05)


def test_vlp16_firing_offsets_against_a_cylinder(bpy_mod, empty_scene):
    # VLP-16 user manual: laser k fires k x 2.304 us after its sequence starts, so at
    # 10 Hz its azimuth is 360 deg x 10 Hz x k x 2.304 us after the column's
    add_mesh(bpy_mod, "Cyl", *cylinder_mesh(5.0, -20, 20, segments=3600))
    cyl = bpy_mod.data.objects["Cyl"]
    cyl.rotation_euler = (math.pi / 2, 0, 0)  # axis along +Y (the spin axis)
    cam = add_camera(bpy_mod)
    cam.data.blensor.preset = "vlp16"
    cam.data.blensor.noise_sigma = 0.0
    cam.data.blensor.bias_distribution = "gaussian"
    cam.data.blensor.bias_sigma = 0.0
    r = blensor_addon.scan(cam, axes="blensor", frame=0)
    res = float(cam.data.blensor.angle_resolution)  # as stored (float32); issue 21: 0.1990656 deg, not 0.2
    col = r.ray_index.astype(np.int64) % r.grid_shape[1]
    k = r.channel.astype(np.int64)
    dt = k * 2.304e-6
    np.testing.assert_allclose(r.timestamp - col * res / 3600.0, dt, atol=1e-9)
    # the point's own azimuth (from xyz) - the column's azimuth = spin x firing offset; the
    # head turns clockwise (issue 21, section 1): column c at psi = 360 - c res, and a later
    # laser fires at a smaller azimuth
    d = r.xyz.astype(np.float64)
    az = np.mod(np.arctan2(-d[:, 0], -d[:, 2]), 2 * np.pi)
    offset = np.rad2deg(np.mod(az - np.deg2rad(360.0 - col * res) + np.pi, 2 * np.pi) - np.pi)
    np.testing.assert_allclose(offset, -3600.0 * dt, atol=2e-4)
    assert offset[k == 15].mean() == pytest.approx(-3600.0 * 15 * 2.304e-6, abs=1e-4)  # 0.124 deg
    # the reported azimuth is the laser's own
    wrap = np.mod(r.azimuth.astype(np.float64) - az + np.pi, 2 * np.pi) - np.pi
    assert np.abs(np.rad2deg(wrap)).max() < 1e-3
    # frozen frames keep the original's columns (every laser at the column's azimuth)
    rf = blensor_addon.scan(cam, axes="blensor", frame=0, time_model="frame")
    assert np.array_equal(rf.timestamp, np.repeat(rf.timestamp[::16], 16))


def test_range_scan_writes_one_file_per_sweep(bpy_mod, empty_scene, tmp_path):
    add_mesh(bpy_mod, "Cyl", *cylinder_mesh(6.0, -20, 20, segments=360))
    bpy_mod.data.objects["Cyl"].rotation_euler = (math.pi / 2, 0, 0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0,5", angle_resolution=1.0, max_range=60.0, rotation_speed=10.0)
    drive(cam, "location", 0, "(frame - 1) / 24")
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 48
    job = blensor_addon.scan_range(cam, range(3, 25), tmp_path / "a", ("npz", "ply"), axes="blensor")
    # frames 3-24 span [3/24, 25/24) s: the 10 Hz sweeps 1..10 overlap it (the last ends after)
    assert job.packets == "sweep" and job.plan.indices == list(range(1, 11))
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["packets"] == "sweep" and m["packet_time"] == pytest.approx(0.1) and m["status"] == "complete"
    assert [e["frame"] for e in m["frames"]] == list(range(1, 11))
    assert [e["time"] for e in m["frames"]] == pytest.approx([0.1 * k for k in range(1, 11)])
    with np.load(tmp_path / "a" / "scan00003.npz") as z:
        assert z["frame"] == 3 and z["frame_time"] == pytest.approx(0.1)
        assert z["xyz"].shape == (720, 3)  # one full turn: 360 columns x 2 lasers
        t = z["timestamp"]
        assert t.min() == pytest.approx(0.3) and t.max() == pytest.approx(0.4 - 0.1 / 360)
        # the pose at the start and at the end (1 m per 24 frames = 1 m/s)
        assert z["sensor_to_world"][0, 3] == pytest.approx(0.3 - 1 / 24, abs=1e-6)
        assert z["sensor_to_world_end"][0, 3] == pytest.approx(0.4 - 1 / 24, abs=1e-6)
    assert m["frames"][2]["pose_end"][3] == pytest.approx(0.4 - 1 / 24, abs=1e-6)
    tum = (tmp_path / "a" / "trajectory.tum").read_text().splitlines()
    assert len(tum) == 10 and float(tum[0].split()[0]) == pytest.approx(0.1)
    # the same run again gives the same bytes (every file)
    job2 = blensor_addon.scan_range(cam, range(3, 25), tmp_path / "b", ("npz", "ply"), axes="blensor")
    assert job2.status == "complete"
    files = sorted(p for p in (tmp_path / "a").rglob("*") if p.is_file() and p.name != "manifest.json")
    assert len(files) == 10 + 10 * 2 + 1  # npz, PLY clean and noisy, trajectory.tum
    for p in files:
        assert p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes(), p.name
    # a run killed after its manifest listed sweeps 1-4 resumes with the rest: same bytes
    man = json.loads((tmp_path / "b" / "manifest.json").read_text())
    man["frames"], man["status"] = man["frames"][:4], "running"
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(man))
    for p in (tmp_path / "b").rglob("scan0000[5-9].*"):
        p.unlink()
    job5 = blensor_addon.scan_range(cam, range(3, 25), tmp_path / "b", ("npz", "ply"), resume=True,
                                    axes="blensor")
    assert job5.reused == 4 and job5.status == "complete"
    for p in files:
        assert p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes(), p.name
    # a time interval instead of frames: the sweeps that start within it
    job3 = blensor_addon.scan_range(cam, None, tmp_path / "c", ("npz",), time=(0.25, 0.65))
    assert job3.plan.indices == [3, 4, 5, 6] and job3.frames is None
    # EVD alone: auto packets are frames; beside formats that would get sweeps: refused,
    # naming the setting that reconciles them
    job4 = blensor_addon.scan_range(cam, range(1, 4), tmp_path / "d", ("evd",))
    assert job4.packets == "frame" and job4.plan.indices == [1, 2, 3]
    with pytest.raises(SettingsError, match="packets must be frame to write evd beside npz"):
        blensor_addon.scan_range(cam, range(1, 4), tmp_path / "d2", ("npz", "evd"))
    assert not (tmp_path / "d2").exists()
    # frame packets take the frames that start within a time interval, as sweeps do:
    # 0.05-0.15 s at 24 fps holds the starts of frames 2 (0.083 s) and 3 (0.125 s)
    job6 = blensor_addon.scan_range(cam, None, tmp_path / "e", ("npz", "evd"), time=(0.05, 0.15),
                                    packets="frame")
    assert job6.packets == "frame" and job6.plan.indices == [2, 3]


def test_deforming_mesh_is_reevaluated_every_time_step(bpy_mod, empty_scene):
    # a wall moved by a shape key (a deforming mesh: no transform to interpolate) at
    # 24 m/s toward the sensor: re-evaluated every time_step, so the error <= v x step
    verts, faces = quad(-50, 50, -20, 20, -10.0)
    wall = add_mesh(bpy_mod, "Wall", verts, faces)
    wall.shape_key_add(name="Basis")
    sk = wall.shape_key_add(name="Near")
    for p in sk.data:
        p.co.z += 24.0 * 0.25  # 6 m closer at value 1
    drive(sk, "value", None, "frame / 6")  # 24 m/s
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.25, max_range=60.0, start_angle=-30.0, end_angle=30.0,
                   rotation_speed=1.0, time_step=0.001)
    r = blensor_addon.scan(cam, axes="blensor", frame=1)
    z_true = -10.0 + 24.0 * r.timestamp  # wall position at each ray's time
    err = np.abs(r.xyz[:, 2] - z_true)
    assert err.max() <= 24.0 * 0.001 + 1e-4
    assert err.max() > 1e-3  # held between steps, not interpolated
    with pytest.raises(SettingsError, match="time_step must be in"):
        blensor_addon.scan(cam, axes="blensor", frame=1, time_step=0.1)  # longer than a frame (1/24 s)
    with pytest.raises(SettingsError, match="time_step must be in"):
        blensor_addon.scan(cam, axes="blensor", frame=1, time_step=0.0)


def test_non_finite_transform_during_a_sweep_is_refused_before_writing(bpy_mod, empty_scene,
                                                                         tmp_path):
    add_mesh(bpy_mod, "Wall", *quad(-50, 50, -20, 20, -10.0))
    box = add_mesh(bpy_mod, "Box", *quad(-1, 1, -1, 1, -5.0))
    key(box, "scale", 1, (1.0, 1.0, 1.0))
    key(box, "scale", 30, (1.0, 1.0, 1.0))
    key(box, "scale", 40, (float("nan"), 1.0, 1.0))  # NaN from frame 31 on
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, max_range=60.0)
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 48
    scene.frame_set(5)
    with pytest.raises(SettingsError, match="transform of object 'Box' must be finite at every time scanned"):
        blensor_addon.scan_range(cam, range(1, 48), tmp_path / "o", ("npz",))
    assert not any((tmp_path / "o").glob("scan*"))
    assert scene.frame_current == 5  # the check evaluated other frames and went back


def test_bad_time_intervals_are_named(bpy_mod, empty_scene, tmp_path):
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, max_range=60.0)
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 24
    cases = [((0.0, 0.5), "time must be an interval t0-t1"), ((0.5, 0.2), "time must be an interval"),
             ((0.5, float("nan")), "time must be an interval"), ((0.11, 0.15), "time must be an interval in which a sweep starts")]
    for interval, msg in cases:
        with pytest.raises(SettingsError, match=msg):
            blensor_addon.scan_range(cam, None, tmp_path / "t", ("npz",), time=interval)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_new_cameras_store_continuous_and_old_files_read_frame(bpy_mod, empty_scene, tmp_path):
    from blensor_addon import ui
    cam = add_camera(bpy_mod)
    assert cam.data.blensor.time_model == "continuous"
    path = tmp_path / "new.blend"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(path))
    bpy_mod.ops.wm.open_mainfile(filepath=str(path))
    assert bpy_mod.data.objects["Sensor"].data.blensor.time_model == "continuous"
    # a file saved without the add-on's save handler (as v0.1 saved them) reads frame
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    add_camera(bpy_mod, "Old")
    bpy_mod.app.handlers.save_pre.remove(ui._stamp_settings)
    try:
        bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "old.blend"))
    finally:
        bpy_mod.app.handlers.save_pre.append(ui._stamp_settings)
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "old.blend"))
    assert bpy_mod.data.objects["Old"].data.blensor.time_model == "frame"
    # File > New is not an old file: its camera scans in continuous time
    bpy_mod.ops.wm.read_homefile()
    assert bpy_mod.data.cameras[0].blensor.time_model == "continuous"


def test_rolling_readout_of_a_tof_camera_moving_toward_a_wall(bpy_mod, empty_scene):
    # rows read out top first over readout_time while the camera approaches the wall at
    # v: row r sees the wall at depth H - v t_r, t_r = t0 + readout * r / rows
    H, v, readout = 8.0, 20.0, 0.05
    add_mesh(bpy_mod, "Wall", *quad(-50, 50, -50, 50, -H))
    cam = add_camera(bpy_mod)
    drive(cam, "location", 2, f"-{v} * frame / 24")
    t0 = 2 / 24
    r = blensor_addon.scan(cam, axes="blensor", frame=2, sensor_type="tof", noise_sigma=0.0,
                           readout_time=readout)
    row = r.ray_index.astype(np.int64) // 176
    np.testing.assert_allclose(r.timestamp, t0 + readout * row / 144, atol=1e-12)
    np.testing.assert_allclose(r.xyz[:, 2], -(H - v * r.timestamp), atol=1e-4)
    np.testing.assert_allclose(r.sensor_to_world_end[2, 3], -v * (t0 + readout), atol=1e-9)
    g = blensor_addon.scan(cam, axes="blensor", frame=2, sensor_type="tof", noise_sigma=0.0)  # global shutter
    np.testing.assert_allclose(g.xyz[:, 2], -(H - v * t0), atol=1e-4)
    assert np.all(g.timestamp == t0)


def test_cli_refuses_bad_time_input_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    blensor = str(Path(sys.executable).parent / "blensor")
    crossing = str(Path(__file__).resolve().parent.parent / "scenes" / "crossing.blend")
    cases = [(["--time", "5-6"], "time must be an interval t0-t1 (s) with t0 < t1 within the scene's frames"),
             (["--time", "0.5-x"], "--time must be T0-T1 with times in seconds"),
             (["--time", "0.5-1", "--frames", "2-4"], "--time must be either --time or --frames"),
             (["--set", "time_step=0.1"], "time_step must be in [4.17e-06, 0.0416667] s"),
             # 1e-300 gave an OverflowError traceback, 1e-9 a run that never ended
             (["--set", "time_step=1e-300"], "time_step must be in [4.17e-06, 0.0416667] s"),
             (["--set", "time_step=1e-9"], "at least 1/10000 of one"),
             (["--set", "time_step=0"], "time_step must be in (0, 1] s")]
    for extra, needle in cases:
        out = tmp_path / "o"
        res = subprocess.run([blensor, "scan", crossing, "--out", str(out), "--quiet", *extra], capture_output=True,
                             text=True)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], (extra, res.stderr)
        assert not out.exists() or not any(out.iterdir())


def test_frozen_frame_sweeps_take_each_ray_from_the_frame_that_cast_it(bpy_mod, empty_scene, tmp_path):
    # time_model=frame with packets=sweep at 25 fps (sweep ends fall inside frames): every
    # world point is where the sensor stood in the frame whose snapshot cast its ray, also
    # for the columns that fire at a frame boundary (to float rounding)
    R, v = 5.0, 20.0
    cam = add_camera(bpy_mod)
    add_mesh(bpy_mod, "Cyl", *cylinder_mesh(R, -20, 20, segments=3600))
    cyl = bpy_mod.data.objects["Cyl"]
    cyl.parent = cam  # rides with the sensor: the same ranges in every frame
    cyl.rotation_euler = (math.pi / 2, 0, 0)  # axis along the spin axis
    # 0.25 deg (exact in float32): a column fires at every frame boundary m / 25 s; at
    # 1.4, 1.64, 1.88 and 2.28 s its time rounds to just below the boundary
    generic_sensor(cam, "0", angle_resolution=0.25, max_range=60.0)
    scene = bpy_mod.context.scene
    scene.render.fps, scene.frame_start, scene.frame_end = 25, 1, 75
    drive(cam, "location", 0, f"{v} * frame / 25")
    job = blensor_addon.scan_range(cam, range(30, 60), tmp_path / "s", ("npz",), time_model="frame",
                                   packets="sweep", frame_of_reference="world", deskew=True, axes="blensor")
    assert job.packets == "sweep" and job.plan.indices == list(range(12, 24))
    for k in job.plan.indices:
        with np.load(tmp_path / "s" / f"scan{k:05d}.npz") as z:
            t, xyz = z["timestamp"], z["xyz"].astype(np.float64)
            assert len(t) == 1440
            frame = np.floor(t * 25 + 1e-9)  # the frame whose snapshot cast the ray
            d = z["xyz_deskewed"].astype(np.float64)
            # deskewed (sensor frame at the sweep start) + the start frame's position = world
            start = v * np.floor(k * 0.1 * 25 + 1e-9) / 25
            np.testing.assert_allclose(d[:, 0] + start, xyz[:, 0], atol=2e-4)
            # every point lies on the cylinder around where the sensor stood in its frame
            np.testing.assert_allclose(np.hypot(xyz[:, 0] - v * frame / 25, xyz[:, 2]), R, atol=2e-3)


def test_static_scene_keeps_its_top_level_across_the_frames_of_a_sweep(bpy_mod, empty_scene):
    # a 5 Hz sweep at 24 fps spans 5 scene frames; nothing moves, so the native backend
    # builds its top level once, and the returns equal those of a frozen-frame scan
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    add_mesh(bpy_mod, "Floor", *quad(-50, 50, -50, 50, 0.0))
    # the box at -X: the clockwise head (issue 21, section 1) reaches it 0.15 s into the
    # sweep, after it starts moving at frame 3 (at +X it was seen at 0.05 s, before)
    add_mesh(bpy_mod, "Box", *quad(-1, 1, -1, 1, 0.5), location=(-5.0, 0.0, 0.0))
    cam = add_camera(bpy_mod, location=(0.0, 0.0, 2.0), rotation=(math.pi / 2, 0.0, 0.0))
    generic_sensor(cam, "-10,-20", angle_resolution=1.0, max_range=60.0, rotation_speed=5.0)
    sc = Scanner(cam, backend="native")
    r = sc.scan(Packet("single", 1))[0]
    assert sc.backend.scene_builds == 1 and len(r) == 720
    # the box moves from frame 3 on: the frames after it change, so the top level is rebuilt
    box = bpy_mod.data.objects["Box"]
    key(box, "location", 3, (-5.0, 0.0, 0.0))
    key(box, "location", 4, (-5.0, 3.0, 0.0))
    sc2 = Scanner(cam, backend="native")
    r2 = sc2.scan(Packet("single", 1))[0]
    assert sc2.backend.scene_builds > 1 and len(r2) == 720
    assert not np.array_equal(r2.xyz, r.xyz)
    sc.close()
    sc2.close()


@pytest.mark.parametrize("rows_of", ["jitter", "shuffled", "runs"])
def test_lazily_scattered_hits_equal_the_eager_scatter(rows_of):
    # the steps of a sweep overlap at their ends (firing offsets): rows interleave there
    # ("jitter"; "runs": a few rays swapped at each step end, as a real sweep's steps,
    # moved as slices); "shuffled" interleaves them everywhere (moved by index arrays)
    from blensor_addon.scene import context
    from blensor_addon.scene.context import CastHits
    rng = np.random.default_rng(5)
    n = 5000
    if rows_of == "jitter":
        order = np.argsort(np.arange(n) + rng.integers(0, 30, n), kind="stable")
    elif rows_of == "shuffled":
        order = rng.permutation(n)
    else:
        order = np.arange(n)
        for c in (2100, 4300):
            order[c - 4:c + 4] = order[c - 4:c + 4][[0, 1, 4, 2, 3, 5, 6, 7]]
    rows = [np.sort(order[a:b]) for a, b in ((0, 2100), (2100, 4300), (4300, n))]
    runs = [context._runs(r) for r in rows]
    if rows_of == "shuffled":
        assert all(x is None for x in runs)
    elif rows_of == "runs":
        assert all(x is not None for x in runs) and max(len(x) for x in runs) > 1

    def part(m):
        return CastHits(range=rng.random(m), hit=rng.random(m) < 0.9, reflectivity=rng.random(m).astype(np.float32),
                         normal=rng.random((m, 3)).astype(np.float32), last_dir=rng.random((m, 3)).astype(np.float32),
                         color=rng.integers(0, 255, (m, 3)).astype(np.uint8),
                         object_id=rng.integers(0, 9, m).astype(np.uint32), instancer_id=np.zeros(m, np.uint32),
                         instance_id=rng.integers(0, 9, m).astype(np.uint32), semantic=np.ones(m, np.uint16),
                         time=rng.random(m), segment=rng.integers(0, 3, m).astype(np.int32),
                         ray=rng.integers(0, 9, m), weight=rng.random(m).astype(np.float32),
                         bounces=rng.integers(0, 3, m).astype(np.uint8))

    parts = [part(len(r)) for r in rows]
    eager = {}
    for k in CastHits.FIELDS:
        a = getattr(parts[0], k)
        eager[k] = np.empty((n, *a.shape[1:]), a.dtype)
        for p, r in zip(parts, rows):
            eager[k][r] = getattr(p, k)
    lazy = CastHits.scatter(parts, rows, n)
    keep = lazy.hit & (lazy.range < 0.8)  # a sensor reads a few fields, then takes its returns
    for idx in (keep, np.zeros(n, bool), np.ones(n, bool), np.flatnonzero(keep)[::-1], np.arange(0, n, 7)):
        got = CastHits.scatter(parts, rows, n).take(idx) if idx is not keep else lazy.take(idx)
        for k in CastHits.FIELDS:
            want = eager[k][idx]
            assert getattr(got, k).dtype == want.dtype and np.array_equal(getattr(got, k), want), k


def test_scan_of_the_current_frame_after_a_keyframe_edit_follows_the_edited_animation(bpy_mod, empty_scene):
    # keyframe_insert at another frame leaves the object's location at the typed value while the
    # scene stays at frame 6; a scan of frame 6 must evaluate the edited animation there and along
    # the sweep (it took the typed 96 m at the start and the animation after: 345 m/s in one sweep)
    H = 10.0
    add_mesh(bpy_mod, "Wall", *quad(-300, 300, -50, 50, -H))
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.5, max_range=60.0, start_angle=-60.0, end_angle=60.0,
                   rotation_speed=2.0)
    scene = bpy_mod.context.scene
    for f in (1, 49):
        cam.location = (0.0, 0.0, 0.0)
        cam.keyframe_insert("location", frame=f)
    scene.frame_set(6)
    cam.location = (96.0, 0.0, 0.0)  # the edit: x = 96 m at frame 49
    cam.keyframe_insert("location", frame=49)
    assert scene.frame_current == 6 and cam.location.x == 96.0
    r = blensor_addon.scan(cam, axes="blensor", frame=6, frame_of_reference="world")
    t0, t1 = float(r.timestamp.min()), float(r.timestamp.max())
    x = {}
    for t in (t0, t1):  # the edited animation at the sweep's first and last column (24 fps)
        scene.frame_set(int(t * 24), subframe=t * 24 - int(t * 24))
        x[t] = cam.matrix_world.translation.x
    scene.frame_set(6)
    assert 0.5 < x[t0] < 10.0 and x[t0] < x[t1] < 20.0
    np.testing.assert_allclose(r.sensor_to_world[:3, 3], [x[t0], 0.0, 0.0], atol=1e-6)
    # the ray at azimuth psi meets the wall x_sensor - tan(psi) H away (camera axes, looking down -Z)
    psi = r.azimuth.astype(np.float64)
    x_sensor = r.xyz[:, 0] + np.tan(psi) * H
    first, last = r.timestamp == r.timestamp.min(), r.timestamp == r.timestamp.max()
    np.testing.assert_allclose(x_sensor[first], x[t0], atol=1e-3)
    np.testing.assert_allclose(x_sensor[last], x[t1], atol=0.01)  # (the pose is linear between time steps)
