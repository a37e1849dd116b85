"""The one scan pipeline (docs/architecture.md): ``Scanner.scan(packet)`` over a Timeline,
frozen time as one held step, the packet record, the one hits type, the one
matrix-to-quaternion routine, and REP-103 as the default axes.

Scene: a wall at z = -10 m in front of an unrotated camera (BlenSor axes: looking down
-Z), so a ray at azimuth psi in the horizontal plane hits at range 10 / cos(psi).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.packets import Packet
from conftest import add_camera, add_mesh, generic_sensor, quad


def wall_scene(bpy_mod, v=0.0):
    """Wall z = -10; the camera moves along +X at ``v`` m/s (24 fps) if v."""
    add_mesh(bpy_mod, "Wall", *quad(-300, 300, -50, 50, -10.0))
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.5, max_range=60.0, start_angle=-60.0, end_angle=60.0,
                   rotation_speed=10.0)
    if v:
        fc = cam.driver_add("location", 0)
        fc.driver.type = "SCRIPTED"
        fc.driver.expression = f"{v} * frame / 24"
    return cam


def test_scan_returns_the_packet_record_and_its_hash(bpy_mod, empty_scene):
    from blensor_addon.scene.scanner import Scanner
    cam = wall_scene(bpy_mod, v=12.0)
    sc = Scanner(cam, backend="native", packet_hashes=True, axes="blensor")
    try:
        packets = ((Packet("single", 3), 3 / 24), (Packet("frame", 4), 4 / 24), (Packet("sweep", 2), 0.2))
        for packet, t0 in packets:
            want_hash = sc.packet_hash(packet)
            r, rec = sc.scan(packet)
            assert rec.packet == packet and rec.time == pytest.approx(t0, abs=1e-12)
            assert rec.geometry_hash == want_hash == sc.packet_hash(packet)
            assert len(rec.geometry_hash) == 64
            np.testing.assert_array_equal(rec.pose, r.sensor_to_world)
            np.testing.assert_array_equal(rec.pose_end, r.sensor_to_world_end)
            # continuous time: the pose at the packet's start and end, the camera at 12 m/s
            end = t0 + (0.1 if packet.kind != "frame" else 1 / 24)
            assert rec.pose[0, 3] == pytest.approx(12.0 * t0, abs=1e-9)
            assert rec.pose_end[0, 3] == pytest.approx(12.0 * end, abs=1e-9)
        # a frame packet lists the rays of its frame (a 10 Hz head turns 150 deg in 1/24 s)
        assert r.frame == 2 and r.frame_time == pytest.approx(0.1)
        _, rec = Scanner(cam, backend="native").scan(Packet("sweep", 2))
        assert rec.geometry_hash is None
    finally:
        sc.close()


def test_frozen_packet_is_one_held_step(bpy_mod, empty_scene):
    # time_model=frame: a single packet is its scene frame held still, every ray cast there
    # whatever its firing time; the pose is the frame's, with no end pose, and the ranges
    # are the wall's 10 / cos(psi) in the frame's pose
    from blensor_addon.scene.scanner import Scanner
    cam = wall_scene(bpy_mod, v=12.0)
    sc = Scanner(cam, backend="native", packet_hashes=True, axes="blensor",
                 overrides={"time_model": "frame", "rotation_speed": 5.0})  # 120 deg in 1/15 s
    try:
        r, rec = sc.scan(Packet("single", 5))
        assert r.timestamp.max() - r.timestamp.min() > 1 / 24  # the rays span more than the frame
        assert rec.pose_end is None and r.sensor_to_world_end is None and rec.time == pytest.approx(5 / 24)
        assert rec.pose[0, 3] == 12.0 * 5 / 24
        np.testing.assert_allclose(r.range, 10.0 / np.cos(r.azimuth.astype(np.float64)), atol=1e-4)
        np.testing.assert_allclose(r.xyz[:, 2], -10.0, atol=1e-4)
        # its geometry hash is its snapshot's, and the same on a rescan of the scene as it is
        from blensor_addon.scene.extract import SceneExtractor
        assert rec.geometry_hash == sc.packet_hash(Packet("single", 5))
        snap = SceneExtractor().extract(bpy_mod.context.evaluated_depsgraph_get(), cam, False)
        assert rec.geometry_hash == snap.geometry.hash()
        bpy_mod.data.objects["Wall"].location.z = -2.0  # a later scan sees the scene as it is then
        r2, rec2 = sc.scan(Packet("single", 5))
        assert rec2.geometry_hash != rec.geometry_hash
        np.testing.assert_allclose(r2.xyz[:, 2], -12.0, atol=1e-4)
    finally:
        sc.close()


def test_scan_refuses_bad_packets(bpy_mod, empty_scene):
    from blensor_addon.scene.scanner import Scanner
    cam = wall_scene(bpy_mod)
    sc = Scanner(cam, backend="native")
    with pytest.raises(SettingsError, match="packet must be a blensor_addon.core.packets.Packet"):
        sc.scan(3)
    tof = Scanner(cam, backend="native", overrides={"sensor_type": "tof"})
    with pytest.raises(SettingsError, match="packets must be frame for sensor type 'tof'"):
        tof.scan(Packet("sweep", 0))
    with pytest.raises(ValueError, match="packet kind must be one of single, frame, sweep"):
        Packet("range", 1)
    sc.close()
    tof.close()


def test_rep103_is_the_default_axes(bpy_mod, empty_scene):
    # REP-103: x forward (the camera's -Z), y left (-X), z up (+Y); the wall 10 m ahead
    cam = wall_scene(bpy_mod)
    ros = blensor_addon.scan(cam, frame=1)
    cam_axes = blensor_addon.scan(cam, frame=1, axes="blensor")
    assert ros.axes == "ros" and cam_axes.axes == "blensor"
    np.testing.assert_allclose(ros.xyz[:, 0], 10.0, atol=1e-4)
    b = cam_axes.xyz
    np.testing.assert_allclose(ros.xyz, np.stack([-b[:, 2], -b[:, 0], b[:, 1]], 1), atol=1e-9)
    np.testing.assert_allclose(ros.normal[:, 0], -1.0, atol=1e-6)  # facing the sensor
    from blensor_addon.scene.scanner import Scanner
    assert Scanner(cam, backend="native").axes == "ros"


def test_one_hits_type_implements_the_protocol(bpy_mod, empty_scene):
    # every packet kind and time model returns CastHits: the fields a sensor reads (range,
    # hit, reflectivity), take and concat
    from blensor_addon.scene import context
    from blensor_addon.scene.scanner import Scanner
    cam = wall_scene(bpy_mod, v=3.0)
    seen = []
    real = context.TimelineContext.cast

    def spy(self, *a, **kw):
        h = real(self, *a, **kw)
        seen.append(h)
        return h

    context.TimelineContext.cast = spy
    try:
        for model in ("frame", "continuous"):
            sc = Scanner(cam, backend="native", overrides={"time_model": model})
            for p in (Packet("single", 1), Packet("frame", 2), Packet("sweep", 1)):
                sc.scan(p)
            sc.close()
    finally:
        context.TimelineContext.cast = real
    assert len(seen) == 6 and {type(h) for h in seen} == {context.CastHits}
    h = seen[0]
    assert h.range.dtype == np.float64 and h.hit.dtype == bool and h.reflectivity.dtype == np.float32
    both = context.CastHits.concat([h.take(h.hit), h.take(~h.hit)])
    assert len(both.range) == len(h.range) and both.hit[:int(h.hit.sum())].all()


def test_one_quaternion_routine():
    # Shepperd's method for every branch, against the rotation it came from; components
    # that are zero within float64 are written as exactly 0
    from blensor_addon.core.axes import matrix_to_quat, quaternion_xyzw
    from blensor_addon.raycast import motion
    assert motion.matrix_to_quat is matrix_to_quat
    rng = np.random.default_rng(3)
    cases = [((1, 0, 0), 0.3), ((0, 1, 0), 3.1), ((0, 0, 1), math.pi), ((1, 1, 0), 2.9), ((0, 1, 1), math.pi)]
    cases += [(tuple(rng.normal(size=3)), rng.uniform(0, math.pi)) for _ in range(20)]
    for axis, angle in cases:
        u = np.asarray(axis, float) / np.linalg.norm(axis)
        K = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
        R = np.eye(3) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K
        x, y, z, w = quaternion_xyzw(R)
        np.testing.assert_allclose(motion.quat_to_matrix(np.array([w, x, y, z])), R, atol=1e-12)
        assert w >= 0 and abs(math.hypot(x, y, z, w) - 1) < 1e-12
    # a quarter turn about X with float noise off the axis: exactly (sin 45, 0, 0, cos 45)
    c = -4.371138828673789e-08
    R = np.array([[1.0, -2.1e-22, 0.0], [0.0, c, -1.0], [0.0, 1.0, c]])
    q = quaternion_xyzw(R)
    assert q[1] == 0.0 and q[2] == 0.0 and math.copysign(1, q[1]) == 1.0
    assert q[0] == pytest.approx(math.sqrt(0.5)) and q[3] == pytest.approx(math.sqrt(0.5))


def test_a_stream_sensor_is_planned_and_scanned_by_its_declared_timing(bpy_mod, empty_scene, tmp_path):
    """A pattern that never repeats (timing ``stream``, no grid, no ``sweep_period``) is
    cut into packets of its declared period and every ray is cast at its own firing time:
    the camera moves at 12 m/s along +X in front of the wall z = -10, so a ray
    fired at time t straight ahead returns from x = 12 t (continuous time)."""
    import dataclasses

    from blensor_addon.core.capabilities import Capabilities, Timing
    from blensor_addon.core.result import FIELDS
    from blensor_addon.core.sensors import Sensor
    from blensor_addon.core.sensors.raypattern import RayPattern
    from blensor_addon.core.settings import SensorSettings, setting
    from blensor_addon.scene.scanner import Scanner

    @dataclasses.dataclass(frozen=True)
    class StreamSettings(SensorSettings):
        max_range: float = setting(60.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)

    class Stream(Sensor):
        name, label, description, Settings = "stream_probe", "Stream probe", "A test stream", StreamSettings
        period, rays = 0.05, 50

        def capabilities(self, s, camera=None):
            return Capabilities(timing=Timing("stream", self.period), grid=None, fields=tuple(FIELDS))

        def grid_shape(self, s, frame, frame_time, mode, camera):
            return ()

        def check_budget(self, s, frame, frame_time, mode, camera):
            return self.rays

        def patterns(self, s, frame, frame_time, mode, camera):
            n = self.rays
            d = np.tile(np.array([[0.0, 0.0, -1.0]], np.float32), (n, 1))  # straight ahead, BlenSor axes
            yield RayPattern(directions=d, azimuth=np.zeros(n), elevation=np.zeros(n),
                             channel=np.zeros(n, np.uint16), ray_index=np.arange(n, dtype=np.int64),
                             timestamp=frame * frame_time + np.arange(n) / n * frame_time)

    cam = wall_scene(bpy_mod, v=12.0)
    sensor = Stream()
    assert sensor.sweep_period(sensor.settings()) is None  # nothing but the declaration says "stream"
    from blensor_addon.core import sensors as registry
    registry.register_sensor(sensor)
    try:
        sc = Scanner(cam, backend="native", axes="blensor", overrides={"sensor_type": "stream_probe"})
        try:
            assert sc.sweep_period == pytest.approx(0.05) and sc.continuous
            r, rec = sc.scan(Packet("sweep", 3))  # rays fired in [0.15, 0.2) s
            assert rec.time == pytest.approx(0.15) and len(r) == 50
            t = r.timestamp
            assert t.min() == pytest.approx(0.15) and t.max() < 0.2
            # sensor frame at each ray's time: straight ahead 10 m; world: x follows the camera
            np.testing.assert_allclose(r.range, 10.0, atol=1e-4)
        finally:
            sc.close()
        job = blensor_addon.scan_range(cam, range(1, 3), tmp_path, ("npz",), axes="blensor",
                                       sensor_type="stream_probe", frame_of_reference="world")
        # frames 1-2 (1/24 to 3/24 s) overlap the 0.05 s packets 0, 1 and 2
        assert job.status == "complete" and job.plan.indices == [0, 1, 2]
        z = np.load(tmp_path / "scan00002.npz")
        np.testing.assert_allclose(z["xyz"][:, 0], 12.0 * z["timestamp"], atol=1e-4)
    finally:
        del registry.SENSORS["stream_probe"]


def test_detection_decides_at_the_measured_range_near_min_range(bpy_mod, empty_scene):
    """``min_range`` applies to the measured range (noise included), not the clean one: with
    1 m of range noise and ``min_range`` 12 m on the wall's 10..20 m ranges, every point kept
    measures at least 12 m, some were nearer than 12 m before the noise (kept) and some
    farther measure nearer (dropped); the same seed gives the same points."""
    cam = wall_scene(bpy_mod)
    clean = blensor_addon.scan(cam, axes="blensor")
    assert len(clean) == 240 and float(clean.range.min()) == pytest.approx(10.0)
    r = blensor_addon.scan(cam, axes="blensor", seed=5, min_range=12.0, noise_sigma=1.0)
    assert len(r) and float(r.range_noisy.min()) >= 12.0
    assert (r.range < 12.0).any()  # nearer than min_range before the noise: detected at its measured range
    farther = int((clean.range >= 12.0).sum())
    assert len(r) - int((r.range < 12.0).sum()) < farther  # farther ones that measure nearer: dropped
    again = blensor_addon.scan(cam, axes="blensor", seed=5, min_range=12.0, noise_sigma=1.0)
    np.testing.assert_array_equal(again.range_noisy, r.range_noisy)
