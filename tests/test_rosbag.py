"""rosbag2 output read back with the ``rosbags`` library: every topic, field layouts,
stamps, and the TF chain against the sensor pose."""
from __future__ import annotations

import math

import numpy as np
import pytest

from blensor_addon.core.axes import ros_pose
from blensor_addon.core.timebase import parse_start_time
from blensor_addon.jobs.range_scan import scan_range
from conftest import add_camera, add_mesh

#: the default time base (UNIX ns of scene time 0) every stamp counts from
BASE = parse_start_time(None)


def read_bag(path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore
    out = {}
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        for conn, t, raw in reader.messages():
            out.setdefault(conn.topic, []).append((t, reader.deserialize(raw, conn.msgtype), conn.msgtype))
    return out


def quat_matrix(q):
    x, y, z, w = q.x, q.y, q.z, q.w
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_rotating_lidar_bag(bpy_mod, crossing, tmp_path, storage):
    cam = bpy_mod.data.objects["Velodyne"]
    # sweeps 1-3 (continuous time, the demo's setting): one message per revolution
    job = scan_range(cam, None, tmp_path, ("npz", "rosbag2"), options={"rosbag2.storage": storage},
                     time=(0.1, 0.4), axes="blensor")
    assert job.status == "complete"
    ext = "mcap" if storage == "mcap" else "db3"
    assert sorted(p.name for p in (tmp_path / "rosbag2").iterdir()) == ["metadata.yaml", f"rosbag2.{ext}"]
    bag = read_bag(tmp_path / "rosbag2")
    # issue 21, section 3: /clock, and a /tf at the last sweep's end (its points' times reach it)
    assert {k: len(v) for k, v in bag.items()} == {"/tf_static": 1, "/tf": 4, "/clock": 4, "/blensor/odom": 3,
                                                    "/blensor/points": 3}
    assert [t for t, _, _ in bag["/clock"]] == [BASE + round(f * 0.1 * 1e9) for f in (1, 2, 3, 4)]
    clock = bag["/clock"]
    assert [m.clock.sec * 10**9 + m.clock.nanosec for _, m, _ in clock] == [t for t, _, _ in clock]
    _, static, _ = bag["/tf_static"][0]
    assert [(tr.header.frame_id, tr.child_frame_id) for tr in static.transforms] == [
        ("base_link", "blensor_sensor"), ("blensor_sensor", "blensor_optical")]
    from blensor_addon.core.sensors.rotating_presets import preset_table
    dt = cam.data.blensor.angle_resolution / 3600  # s a column: HDL-64E S2 at 0.1728 deg (float32) and 10 Hz
    for i, f in enumerate((1, 2, 3)):
        z = np.load(tmp_path / f"scan{f:05d}.npz")
        t, msg, msgtype = bag["/blensor/points"][i]
        assert msgtype == "sensor_msgs/msg/PointCloud2"
        assert msg.header.frame_id == "blensor_sensor"
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == t
        # issue 21, section 3: velodyne_pointcloud stamps the cloud with its last data packet
        # (6 columns of an HDL-64E) and gives each point's time relative to that packet's first firing
        stamp = (t - BASE) / 1e9  # scene time
        firing = np.asarray(preset_table("hdl64e_s2").firing_s)
        last_col = round((z["timestamp"] - firing[z["channel"]]).max() / dt)
        # (to 1e-7: dt comes from the stored float32 step)
        assert math.isclose(stamp, (last_col // 6) * 6 * dt, rel_tol=1e-7), (stamp, last_col)
        assert [(fl.name, fl.offset, fl.datatype) for fl in msg.fields] == [
            ("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7), ("ring", 16, 4), ("time", 18, 7)]
        assert msg.point_step == 22 and msg.width == len(z["range"])
        rec = np.frombuffer(msg.data.tobytes(), np.dtype({"names": ["x", "y", "z", "i", "ring", "time"],
                                                          "formats": ["<f4"] * 4 + ["<u2", "<f4"],
                                                          "offsets": [0, 4, 8, 12, 16, 18], "itemsize": 22}))
        from blensor_addon.core.axes import ROS_FROM_BLENSOR
        xyz = z["xyz_noisy"].astype(np.float64) @ ROS_FROM_BLENSOR.T
        np.testing.assert_allclose(np.stack([rec["x"], rec["y"], rec["z"]], 1), xyz, atol=1e-5)
        assert np.array_equal(rec["ring"], z["ring"]) and rec["i"].max() <= 255
        np.testing.assert_allclose(rec["time"], z["timestamp"] - stamp, atol=1e-6)
        # nearly a whole sweep before the stamp; the last packet's 6 columns after it (+ 31 x 0.728 us)
        assert -0.1 < rec["time"].min() < -0.099 and 0 <= rec["time"].max() < 6 * dt + 31 * 0.728e-6
        # the TF chain odom -> base_link (-> sensor, identity by default) gives the sensor pose
        _, tf, _ = bag["/tf"][i]
        tr = tf.transforms[0]
        assert (tr.header.frame_id, tr.child_frame_id) == ("odom", "base_link")
        T = ros_pose(z["sensor_to_world"])
        got = np.eye(4)
        got[:3, :3] = quat_matrix(tr.transform.rotation)
        got[:3, 3] = [tr.transform.translation.x, tr.transform.translation.y, tr.transform.translation.z]
        np.testing.assert_allclose(got, T, atol=1e-6)
        _, odom, _ = bag["/blensor/odom"][i]
        assert (odom.header.frame_id, odom.child_frame_id) == ("odom", "base_link")
        np.testing.assert_allclose([odom.pose.pose.position.x, odom.pose.pose.position.y,
                                    odom.pose.pose.position.z], T[:3, 3], atol=1e-9)
    # the ego car drives: odometry's forward speed (REP-103 x) from the pose change
    z4, z5 = (np.load(tmp_path / f"scan{f:05d}.npz") for f in (1, 2))
    v = np.linalg.norm(z5["sensor_to_world"][:3, 3] - z4["sensor_to_world"][:3, 3]) / 0.1
    assert math.isclose(abs(bag["/blensor/odom"][1][1].twist.twist.linear.x), v, rel_tol=1e-6, abs_tol=1e-9)
    # the first message has no message before it: its speed is over its own sweep
    first = np.linalg.norm(z4["sensor_to_world_end"][:3, 3] - z4["sensor_to_world"][:3, 3]) / 0.1
    assert first > 0.5
    assert math.isclose(abs(bag["/blensor/odom"][0][1].twist.twist.linear.x), first, rel_tol=1e-6)


def test_tof_and_planar_bags(bpy_mod, empty_scene, tmp_path):
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 2
    add_mesh(bpy_mod, "Wall", [(-50, 6, -50), (50, 6, -50), (50, 6, 50), (-50, 6, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=(math.pi / 2, 0.0, 0.0))
    job = scan_range(cam, [1, 2], tmp_path / "tof", ("npz", "rosbag2"), sensor_type="tof", noise_sigma=0.0)
    assert job.status == "complete"
    bag = read_bag(tmp_path / "tof" / "rosbag2")
    assert len(bag["/blensor/depth/image"]) == len(bag["/blensor/depth/camera_info"]) == 2
    _, img, _ = bag["/blensor/depth/image"][0]
    _, info, _ = bag["/blensor/depth/camera_info"][0]
    assert (img.encoding, img.width, img.height, img.step) == ("32FC1", 176, 144, 704)
    depth = np.frombuffer(img.data.tobytes(), "<f4").reshape(144, 176)
    np.testing.assert_allclose(depth, 6.0, atol=1e-4)  # planar depth of the wall
    fx, cx = info.k[0], info.k[2]
    assert math.isclose(fx, 88 / math.tan(math.radians(43.6 / 2)), rel_tol=1e-6) and math.isclose(cx, 87.5)  # float32 FOV
    # planar scanner: LaserScan ranges = the wall's closed form, +inf where it misses
    job = scan_range(cam, [1, 2], tmp_path / "planar", ("npz", "rosbag2"), sensor_type="planar",
                     preset="pulselight3d", noise_sigma=0.0, range_resolution=0.0, time_model="frame")
    bag = read_bag(tmp_path / "planar" / "rosbag2")
    scans = [m for _, m, _ in bag["/blensor/scan"]]
    assert len(scans) >= 2
    for m in scans:
        ang = m.angle_min + m.angle_increment * np.arange(len(m.ranges))
        expect = np.where(np.abs(ang) < math.pi / 2 - 1e-9, 6.0 / np.cos(ang), np.inf)
        hit = np.isfinite(m.ranges)
        assert np.array_equal(hit, np.isfinite(expect) & (expect <= 40.0))
        np.testing.assert_allclose(m.ranges[hit], expect[hit], atol=1e-4)
        assert math.isclose(m.angle_increment, math.radians(0.5), rel_tol=1e-6)
        assert math.isclose(m.time_increment, 1 / (360 * 10.0), rel_tol=1e-6)


def test_laser_scan_comes_from_the_capabilities_not_the_settings(tmp_path):
    # a one-plane swept sensor the writer knows only by its capabilities: no settings, an
    # unknown sensor type; 8 columns a sweep of 0.8 s, column c at -0.7 + 0.2 c rad;
    # packet = scene frame 1 of 0.5 s: global columns 5..9 (sweep 0 columns 5-7, sweep 1 0-1)
    from blensor_addon.core.capabilities import Capabilities, Timing
    from blensor_addon.core.result import ScanResult
    from blensor_addon.io.formats.rosbag2 import Rosbag2Writer
    caps = Capabilities(Timing("sweep", 0.8), grid=(1, 8), max_range=25.0, column_angles=(-0.7, 0.2))
    local = np.array([0, 2, 3])  # returns in packet columns 0, 2, 3 (sweep columns 5, 7, 0)
    n = local.size
    r = ScanResult(
        timestamp=(5 + local) * 0.1, azimuth=np.zeros(n), elevation=np.zeros(n), range=[3.0, 4.0, 5.0],
        range_noisy=[3.5, 4.5, 5.5], xyz=np.ones((n, 3)), xyz_noisy=np.ones((n, 3)), object_id=np.ones(n),
        semantic=np.zeros(n), instancer_id=np.zeros(n), instance_id=np.zeros(n), channel=np.zeros(n),
        ring=np.zeros(n), ray_index=local, reflectivity=np.ones(n), intensity=[0.2, 0.4, 1.0],
        color=np.zeros((n, 3)), normal=np.ones((n, 3)), frame=1, frame_time=0.5, grid_shape=(1, 5),
        sensor_type="custom", capabilities=caps)
    w = Rosbag2Writer(tmp_path, None)
    w.append(r)
    w.close("complete")
    scans = read_bag(tmp_path / "rosbag2")["/blensor/scan"]
    assert len(scans) == 2  # the sweep ends after packet column 2
    (t0, a, _), (t1, b, _) = scans
    assert (t0, t1) == (BASE + 500_000_000, BASE + 800_000_000)
    assert math.isclose(a.angle_min, -0.7 + 5 * 0.2, rel_tol=1e-6)
    assert math.isclose(b.angle_min, -0.7, abs_tol=1e-6)
    assert math.isclose(a.angle_increment, 0.2, rel_tol=1e-6) and math.isclose(a.range_max, 25.0)
    assert math.isclose(a.scan_time, 0.8, rel_tol=1e-6) and math.isclose(a.time_increment, 0.1, rel_tol=1e-6)
    np.testing.assert_array_equal(a.ranges, np.array([3.5, np.inf, 4.5], np.float32))
    np.testing.assert_array_equal(b.ranges, np.array([5.5, np.inf], np.float32))
    np.testing.assert_array_equal(a.intensities, [51, 0, 102])
    # without column angles (a rotating head, an image sensor): no LaserScan
    import dataclasses
    (tmp_path / "none").mkdir()
    w = Rosbag2Writer(tmp_path / "none", None)
    w.append(dataclasses.replace(r, capabilities=dataclasses.replace(caps, column_angles=None)))
    w.close("complete")
    assert "/blensor/scan" not in read_bag(tmp_path / "none" / "rosbag2")
