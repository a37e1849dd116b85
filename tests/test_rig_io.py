"""The io-layer of rigs (docs/formats.md, "Rig outputs"): one rosbag2 for several sensors (RigBag:
topics, frame ids, /tf_static = the extrinsics, one base pose per stamp, deterministic
bytes; each sensor's messages the single-sensor bag's), and the extrinsics files
(calib_rig.txt, extrinsics.json) read back."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from blensor_addon.core.axes import ros_sensor_pose
from blensor_addon.core.errors import SettingsError
from blensor_addon.io.extrinsics import read_calib_rig, rig_calibration_files, rpy_deg
from blensor_addon.io.formats.rosbag2 import (Rosbag2Options, Rosbag2Writer, RigBag, mount_matrix,
                                              ros_name_ok, ros_names)
from blensor_addon.core.timebase import parse_start_time
from conftest import add_camera
from test_rosbag import quat_matrix, read_bag

#: the default time base (UNIX ns of scene time 0) of the bags' stamps
BASE = parse_start_time(None)

#: camera name -> (scanner overrides, location on the ego car (m), rotation (rad))
RIG = {"Velodyne": ({}, None, None),
       "Scan Front": ({"sensor_type": "planar", "preset": "utm30lx"}, (2.0, 0.0, 0.5),
                      (math.pi / 2, 0, -math.pi / 2)),
       "Kinect Left": ({"sensor_type": "tof"}, (0.5, 0.8, 1.2), (math.pi / 2, 0, 0))}


@pytest.fixture(scope="module")
def rig(bpy_mod):
    """The demo's HDL-64E on the ego car with a planar scanner ahead and a ToF camera looking
    left, parented to the car; frames 1-3 scanned per scene frame (continuous time).
    Returns (names, extrinsics [(name, base_to_sensor)], {name: [results]}, {frame: car pose})."""
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    bpy = bpy_mod
    from conftest import CROSSING
    bpy.ops.wm.open_mainfile(filepath=str(CROSSING))
    car = bpy.data.objects["EgoCar"]
    names = ros_names(RIG)
    results, cams = {}, {}
    for cam_name, (ov, loc, rot) in RIG.items():
        cam = bpy.data.objects.get(cam_name) or add_camera(bpy, cam_name, loc, rot)
        cam.parent = car
        cams[cam_name] = cam
    for (cam_name, (ov, _, _)), name in zip(RIG.items(), names):
        sc = Scanner(cams[cam_name], overrides=ov, axes="ros")
        try:
            results[name] = [sc.scan(Packet("frame", f))[0] for f in (1, 2, 3)]
        finally:
            sc.close()
    car_pose = {}
    for f in (1, 2, 3, 4):
        bpy.context.scene.frame_set(f)
        car_pose[f] = np.array(car.matrix_world, dtype=np.float64)
    # the car's axes are REP-103 (x ahead: it drives along its x): the base frame
    extr = [(n, np.linalg.inv(car_pose[1]) @ ros_sensor_pose(results[n][0])) for n in names]
    return names, extr, results, car_pose


def write_rig(folder, extr, results, storage="mcap"):
    folder.mkdir(parents=True, exist_ok=True)
    bag = RigBag(folder, Rosbag2Options(storage=storage), extr)
    writers = {n: bag.writer(n) for n, _ in extr}
    for k in range(3):  # packet by packet, sensor by sensor, as a rig's writer thread calls them
        for n, w in writers.items():
            assert w.frame_files(results[n][k]) == []
            w.append(results[n][k])
    for w in writers.values():
        w.close("complete")  # the sensors' writers leave the bag open
    assert not (folder / "rosbag2").exists()
    bag.close("complete")
    return read_bag(folder / "rosbag2")


def test_rig_bag_topics_frames_tf_static_and_bytes(rig, tmp_path):
    names, extr, results, car_pose = rig
    assert names == ["velodyne", "scan_front", "kinect_left"]
    bag = write_rig(tmp_path / "a", extr, results)
    # the planar scanner: 40 Hz, 1080 columns a sweep, 1800 a frame of 1/24 s: sweeps start at global
    # columns 2160, 3240 (frame 1), 4320 (frame 2), 5400, 6480 (frame 3): 3 + 2 + 2 LaserScans
    assert {k: len(v) for k, v in bag.items()} == {
        "/tf_static": 1, "/clock": 4, "/tf": 4, "/blensor/odom": 3,
        "/blensor/velodyne/points": 3, "/blensor/scan_front/points": 3, "/blensor/scan_front/scan": 7,
        "/blensor/kinect_left/points": 3, "/blensor/kinect_left/depth/image": 3,
        "/blensor/kinect_left/depth/camera_info": 3}
    for n in names:
        assert all(m.header.frame_id == n for _, m, _ in bag[f"/blensor/{n}/points"])
    assert all(m.header.frame_id == "scan_front" for _, m, _ in bag["/blensor/scan_front/scan"])
    for topic in ("depth/image", "depth/camera_info"):
        frames = {m.header.frame_id for _, m, _ in bag[f"/blensor/kinect_left/{topic}"]}
        assert frames == {"kinect_left_optical"}
    # /tf_static: base_link -> each sensor = its extrinsics, sensor -> its optical frame
    t, static, _ = bag["/tf_static"][0]
    assert t == BASE + round(1 / 24 * 1e9)
    pairs = [(tr.header.frame_id, tr.child_frame_id) for tr in static.transforms]
    assert pairs == [p for n in names for p in (("base_link", n), (n, n + "_optical"))]
    for (n, T), tr in zip(extr, static.transforms[::2]):
        q = tr.transform.rotation
        np.testing.assert_allclose(quat_matrix(q), T[:3, :3], atol=1e-12)
        assert [tr.transform.translation.x, tr.transform.translation.y, tr.transform.translation.z] == \
            T[:3, 3].tolist()
    opt = quat_matrix(static.transforms[1].transform.rotation)  # optical: x right, y down, z ahead
    np.testing.assert_allclose(opt, [[0, 0, 1], [-1, 0, 0], [0, -1, 0]], atol=1e-12)
    # the ToF camera looks left: 0.8 m left of the car's axis, 1.2 m up
    kin = dict(extr)["kinect_left"]
    np.testing.assert_allclose(kin[:3, 3], [0.5, 0.8, 1.2], atol=1e-5)
    np.testing.assert_allclose(kin[:3, 0], [0, 1, 0], atol=1e-6)  # its x (ahead) = the car's y (left)
    # one base pose per frame: odom -> base_link = the car's pose, whichever sensor gave it
    stamps = [BASE + round(f / 24 * 1e9) for f in (1, 2, 3)]
    # + the last packet's end
    assert [t for t, _, _ in bag["/clock"]] == stamps + [BASE + round(4 / 24 * 1e9)]
    for f, (t, tf, _) in zip((1, 2, 3, 4), bag["/tf"]):
        tr = tf.transforms[0]
        assert (tr.header.frame_id, tr.child_frame_id) == ("odom", "base_link")
        assert t == BASE + round(f / 24 * 1e9)
        np.testing.assert_allclose(quat_matrix(tr.transform.rotation), car_pose[f][:3, :3], atol=1e-6)
        np.testing.assert_allclose([tr.transform.translation.x, tr.transform.translation.y,
                                    tr.transform.translation.z], car_pose[f][:3, 3], atol=1e-5)
    # every sensor reports the same base pose (the one of the first sensor written)
    for n, T in extr:
        for k in range(3):
            np.testing.assert_allclose(ros_sensor_pose(results[n][k]) @ np.linalg.inv(T), car_pose[k + 1],
                                       atol=1e-5)
    v = np.linalg.norm(car_pose[2][:3, 3] - car_pose[1][:3, 3]) * 24
    assert v > 0.3 and math.isclose(bag["/blensor/odom"][1][1].twist.twist.linear.x, v, rel_tol=1e-5)
    # the same calls give the same bytes
    write_rig(tmp_path / "b", extr, results)
    for f in ("metadata.yaml", "rosbag2.mcap"):
        assert (tmp_path / "a" / "rosbag2" / f).read_bytes() == (tmp_path / "b" / "rosbag2" / f).read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["rosbag2"]  # no temporary folder left


def test_rig_sensor_messages_are_the_single_sensor_bags_but_the_frame(rig, tmp_path):
    from rosbags.typesys import Stores, get_typestore
    ts = get_typestore(Stores.ROS2_HUMBLE)
    names, extr, results, _ = rig
    write_rig(tmp_path / "rig", extr, results, storage="sqlite3")
    from rosbags.highlevel import AnyReader

    def raw(folder):
        with AnyReader([folder], default_typestore=ts) as rd:
            return [(c.topic, c.msgtype, t, bytes(m)) for c, t, m in rd.messages()]

    rig_msgs = raw(tmp_path / "rig" / "rosbag2")
    assert (tmp_path / "rig" / "rosbag2" / "rosbag2.db3").exists()
    checked = 0
    for n in names:
        (tmp_path / n).mkdir()
        w = Rosbag2Writer(tmp_path / n, Rosbag2Options(storage="sqlite3"))
        for r in results[n]:
            w.append(r)
        w.close("complete")
        single = [m for m in raw(tmp_path / n / "rosbag2")
                  if m[0].startswith("/blensor/") and m[0] != "/blensor/odom"]
        mine = [m for m in rig_msgs if m[0].startswith(f"/blensor/{n}/")]
        renamed = [(t.replace("/blensor/", f"/blensor/{n}/"), y, s) for t, y, s, _ in single]
        assert renamed == [m[:3] for m in mine]
        for (_, msgtype, _, a), (_, _, _, b) in zip(single, mine):
            x = ts.deserialize_cdr(b, msgtype)
            x.header.frame_id = {n: "blensor_sensor", n + "_optical": "blensor_optical"}[x.header.frame_id]
            assert ts.serialize_cdr(x, msgtype).tobytes() == a
            checked += 1
    assert checked == 3 + 3 + 7 + 3 * 3


def test_rig_bag_refuses_bad_names_and_transforms_in_one_line(tmp_path):
    T = np.eye(4)
    cases = [
        ([("Scan Front", T)], "rig.Scan Front must be a ROS name"),
        ([("2d", T)], "rig.2d must be a ROS name"),
        ([("a__b", T)], "rig.a__b must be a ROS name"),
        ([("a", T), ("a", T)], "rig.a must be a name whose frame a is not already a sensor's frame"),
        ([("base_link", T)], "rig.base_link must be a name whose frame base_link is not already the base "),
        (
            [("x", T), ("x_optical", T)],
            "rig.x_optical must be a name whose frame x_optical is not already an optical frame",
        ),
        ([("a", np.diag([2.0, 1, 1, 1]))], "rig.a.base_to_sensor must be a rigid transform"),
        ([("a", np.eye(3))], "rig.a.base_to_sensor must be a finite (4, 4) matrix"),
        ([("a", np.diag([1.0, 1, -1, 1]))], "rig.a.base_to_sensor must be a rigid transform"),
        ([], "rig.sensors must be at least one"),
    ]
    for sensors, needle in cases:
        with pytest.raises(SettingsError) as err:
            RigBag(tmp_path, None, sensors)
        assert str(err.value).startswith(needle) and "\n" not in str(err.value), str(err.value)
    assert list(tmp_path.iterdir()) == []  # refused before anything was created
    assert ros_names(["VLP-16 Left", "VLP-16 Left", "3D", "", "odom", "a__b_", "x", "X_optical"]) == [
        "vlp_16_left", "vlp_16_left_2", "sensor_3d", "sensor", "odom_2", "a_b", "x", "x_optical_2"]
    assert all(ros_name_ok(n) for n in ros_names(["Kinect.001", "ÜberScan", "_"]))
    bag = RigBag(tmp_path, None, [("a", T)])
    with pytest.raises(SettingsError, match=r"rig.sensor must be one of the rig's sensors \(a\)"):
        bag.writer("b")
    bag.discard()
    assert list(tmp_path.iterdir()) == []


def random_rig(seed=3):
    rng = np.random.default_rng(seed)
    out = [("base_copy", np.eye(4))]
    for name in ("velodyne", "scan_front", "kinect_left"):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        x, y, z, w = q
        T = np.eye(4)
        T[:3, :3] = [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]
        T[:3, 3] = rng.uniform(-3, 3, 3)
        out.append((name, T))
    out.append(("pitched_up", mount_matrix((0.1, -0.2, 1.5, 10.0, 90.0, 30.0))))  # gimbal lock
    return out


def test_extrinsics_files_round_trip(tmp_path):
    sensors = random_rig()
    files = rig_calibration_files("EgoCar", sensors)
    assert [n for n, _ in files] == ["calib_rig.txt", "extrinsics.json"]
    assert files == rig_calibration_files("EgoCar", sensors)  # deterministic bytes
    for name, data in files:
        (tmp_path / name).write_bytes(data)
    text = (tmp_path / "calib_rig.txt").read_text()
    # KITTI's layout: every line KEY: 12 numbers (KITTI's tools parse every line so)
    lines = text.splitlines()
    assert len(lines) == len(sensors)
    assert all(re.fullmatch(r"Tr_\w+_to_base:( \S+){12}", ln) for ln in lines)
    assert lines[0] == "Tr_base_copy_to_base: 1.0 0.0 0.0 0.0 0.0 1.0 0.0 0.0 0.0 0.0 1.0 0.0"
    for path in (tmp_path / "calib_rig.txt", tmp_path / "extrinsics.json"):
        got = read_calib_rig(path)
        assert list(got) == [n for n, _ in sensors]
        for n, T in sensors:
            assert np.abs(got[n] - T).max() <= 1e-9, (path.name, n)
    doc = json.loads((tmp_path / "extrinsics.json").read_text())
    assert doc["base"] == "EgoCar" and doc["axes"].startswith("REP-103")
    for s, (n, T) in zip(doc["sensors"], sensors):
        assert s["name"] == s["frame_id"] == n
        assert np.abs(np.array(s["translation"]) - T[:3, 3]).max() <= 1e-9
        x, y, z, w = s["quaternion_xyzw"]
        assert w >= 0 and math.isclose(x * x + y * y + z * z + w * w, 1.0, rel_tol=1e-12)
        q = type("Q", (), {"x": x, "y": y, "z": z, "w": w})
        assert np.abs(quat_matrix(q) - T[:3, :3]).max() <= 1e-9
        # roll, pitch, yaw (REP-103 fixed axes) give the matrix back through rosbag2's mount
        assert np.abs(mount_matrix((*T[:3, 3], *s["rpy_deg"])) - T).max() <= 1e-9, n
    assert doc["sensors"][-1]["rpy_deg"][1] == pytest.approx(90.0)
    np.testing.assert_allclose(rpy_deg(mount_matrix((0, 0, 0, 10.0, -20.0, 30.0))[:3, :3]), (10, -20, 30),
                               atol=1e-12)
    # a damaged file: one line naming the file and line
    (tmp_path / "bad.txt").write_text(lines[0] + "\n" + lines[1].rsplit(" ", 1)[0] + "\n")
    with pytest.raises(SettingsError) as err:
        read_calib_rig(tmp_path / "bad.txt")
    assert str(err.value).startswith("calib must be 12 numbers after 'Tr_velodyne_to_base:' (") and \
        "bad.txt line 2" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SettingsError, match="rig.a b must be a sensor name without spaces"):
        rig_calibration_files("EgoCar", [("a b", np.eye(4))])
    with pytest.raises(SettingsError, match="rig.a.base_to_sensor must be a rigid transform"):
        rig_calibration_files("EgoCar", [("a", np.diag([1.0, 1.0, 1.0, 2.0]))])


def test_rig_tf_static_equals_the_calibration_files(rig, tmp_path):
    names, extr, results, _ = rig
    bag = write_rig(tmp_path, extr, results)
    for name, data in rig_calibration_files("EgoCar", extr):
        (tmp_path / name).write_bytes(data)
    calib = read_calib_rig(tmp_path / "calib_rig.txt")
    _, static, _ = bag["/tf_static"][0]
    for tr in static.transforms[::2]:
        T = calib[tr.child_frame_id]
        np.testing.assert_allclose(quat_matrix(tr.transform.rotation), T[:3, :3], atol=1e-12)
        np.testing.assert_allclose([tr.transform.translation.x, tr.transform.translation.y,
                                    tr.transform.translation.z], T[:3, 3], rtol=0, atol=1e-12)
