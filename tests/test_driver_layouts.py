"""Points as the vendors' drivers publish them, read back with
readers nobody here wrote (rosbags, laspy, Open3D) or byte by byte against the drivers'
published layouts: ouster-ros's Point in PointCloud2 and PCD, velodyne_pointcloud's
XYZIRT time convention, the rosbag2 clock, static TF QoS and frames, ASPRS classes in
LAS, SemanticKITTI moving classes and stuff instances on scenes/crossing.blend."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from blensor_addon.core.capabilities import Capabilities, Device, Timing
from blensor_addon.core.classes import THING_CLASSES
from blensor_addon.core.result import ScanResult
from blensor_addon.core.sensors.calibration import LaserTable
from blensor_addon.core.timebase import parse_start_time

#: the default time base (UNIX ns of scene time 0) the bags' stamps count from
BASE = parse_start_time(None)


def grid_result(rows, cols, cells, *, device, frame=1, frame_time=0.1, times=None, **kw):
    """A swept result on a rows x cols grid with returns in ``cells`` (ray indices
    ``row * cols + col``); return k at range 2 + k m along +x of the REP-103 sensor frame."""
    cells = np.asarray(cells)
    n = cells.size
    col = cells % cols
    period = 1.0 / device.rotation_speed
    ts = frame * frame_time + col * period / cols if times is None else times
    xyz = np.zeros((n, 3))
    xyz[:, 0] = 2.0 + np.arange(n)
    caps = Capabilities(Timing("sweep", period), grid=(rows, cols), device=device)
    fields = dict(timestamp=ts, azimuth=np.zeros(n), elevation=np.zeros(n), range=2.0 + np.arange(n),
                  range_noisy=2.5 + np.arange(n), xyz=xyz, xyz_noisy=xyz + [0.0, 0.0, 0.5],
                  object_id=np.arange(n) + 3, semantic=np.full(n, 10), instancer_id=np.arange(n) % 2,
                  instance_id=np.arange(n) + 1, channel=cells // cols, ring=cells // cols, ray_index=cells,
                  reflectivity=np.linspace(0.1, 0.9, n), intensity=np.linspace(0.0, 1.0, n),
                  color=np.zeros((n, 3)), normal=np.zeros((n, 3)))
    fields.update(kw)
    return ScanResult(**fields, frame=frame, frame_time=frame_time, grid_shape=(rows, cols), axes="ros",
                      capabilities=caps)


def ouster_device(rows=4, cols=8, azimuth=(45.0, 0.0, -45.0, 90.0)):
    table = LaserTable(vendor="ouster", model="OS-test", elevation_deg=np.linspace(10, -10, rows),
                       azimuth_deg=azimuth)
    return Device("ouster", "OS-test", table, rotation_speed=10.0, columns=float(cols))


def read_bag(path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore
    out, conns = {}, {}
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        for conn in reader.connections:
            conns[conn.topic] = conn
        for conn, t, raw in reader.messages():
            out.setdefault(conn.topic, []).append((t, reader.deserialize(raw, conn.msgtype)))
    return out, conns


def write_bag(folder, results, options=None):
    from blensor_addon.io.formats import make_options
    from blensor_addon.io.formats.rosbag2 import Rosbag2Writer
    folder.mkdir(exist_ok=True)
    w = Rosbag2Writer(folder, make_options(("rosbag2",), options)["rosbag2"])
    for r in results:
        w.append(r)
    w.close("complete")
    return read_bag(folder / "rosbag2")


OUSTER_FIELDS = [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 16, 7), ("t", 20, 6),
                 ("reflectivity", 24, 4), ("ring", 26, 4), ("ambient", 28, 4), ("range", 32, 6)]


def test_ouster_pointcloud2_is_ouster_ros_point_organized_and_destaggered(tmp_path):
    # issue 21, section 3: ouster-ros's Point (os_point.h, EIGEN_ALIGN16: 48 bytes), height =
    # beams, width = columns, row u = beam u, destaggered by pixel_shift_by_row, NaN where no return
    # 8 columns a turn: shifts round(az * 8 / 360) = 1, 0, -1, 2, less the smallest (as a real
    # unit's metadata: all >= 0) = 2, 1, 0, 3
    dev = ouster_device()
    cells = np.array([0 * 8 + 0, 0 * 8 + 7, 1 * 8 + 3, 2 * 8 + 0, 3 * 8 + 6])
    r = grid_result(4, 8, cells, device=dev)
    bag, conns = write_bag(tmp_path, [r])
    t, msg = bag["/blensor/points"][0]
    assert t == BASE + 100_000_000 and msg.header.frame_id == "blensor_sensor"
    assert [(f.name, f.offset, f.datatype) for f in msg.fields] == OUSTER_FIELDS
    assert (msg.height, msg.width, msg.point_step, msg.row_step, msg.is_dense) == (4, 8, 48, 384, False)
    dt = np.dtype({"names": [f[0] for f in OUSTER_FIELDS],
                   "formats": ["<f4", "<f4", "<f4", "<f4", "<u4", "<u2", "<u2", "<u2", "<u4"],
                   "offsets": [f[1] for f in OUSTER_FIELDS], "itemsize": 48})
    rec = np.frombuffer(msg.data.tobytes(), dt).reshape(4, 8)
    assert (rec["ring"] == np.arange(4)[:, None]).all() and (rec["ambient"] == 0).all()
    # measurement (row, col) -> cloud (row, (col + shift) mod 8): (0,0)->(0,2), (0,7)->(0,1),
    # (1,3)->(1,4), (2,0)->(2,0), (3,6)->(3,1)
    where = [(0, 2), (0, 1), (1, 4), (2, 0), (3, 1)]
    got = np.zeros((4, 8), bool)
    for k, (u, v) in enumerate(where):
        got[u, v] = True
        assert rec["x"][u, v] == 2.0 + k and rec["z"][u, v] == 0.5  # noisy points by default
        assert rec["range"][u, v] == round((2.5 + k) * 1000)
        # the packets' scales (ouster_reflectivity, ouster_signal): 100 x reflectivity, 100 x intensity
        assert rec["reflectivity"][u, v] == round(r.reflectivity[k] * 100)
        assert rec["intensity"][u, v] == round(r.intensity[k] * 100)
    assert np.isnan(rec["x"][~got]).all() and (rec["range"][~got] == 0).all()
    assert (rec["reflectivity"][~got] == 0).all() and np.isfinite(rec["x"][got]).all()
    # t: ns since the stamp of the measurement column shown there (column c fires at c x 12.5 ms)
    src = (np.arange(8)[None, :] - np.array([2, 1, 0, 3])[:, None]) % 8
    assert np.array_equal(rec["t"], np.round(src * 0.1 / 8 * 1e9).astype(np.uint32))
    # labels on request, appended after the 48 bytes
    bag, _ = write_bag(tmp_path / "labels", [r], {"rosbag2.labels": "true", "rosbag2.points": "clean"})
    msg = bag["/blensor/points"][0][1]
    assert [(f.name, f.offset, f.datatype) for f in msg.fields][9:] == [
        ("object_id", 48, 6), ("instancer_id", 52, 6), ("instance_id", 56, 6), ("semantic", 60, 4)]
    assert msg.point_step == 64
    lab_dtype = np.dtype({"names": ["z", "object_id", "semantic"], "formats": ["<f4", "<u4", "<u2"],
                          "offsets": [8, 48, 60], "itemsize": 64})
    lab = np.frombuffer(msg.data.tobytes(), lab_dtype).reshape(4, 8)
    assert [int(lab["object_id"][u, v]) for u, v in where] == [3, 4, 5, 6, 7]
    assert lab["object_id"][~got].max() == 0 and lab["semantic"][0, 2] == 10 and lab["z"][0, 2] == 0.0


def test_a_partial_turn_is_not_destaggered_and_metadata_shifts_win(tmp_path):
    from blensor_addon.io.formats._layouts import pixel_shifts
    dev = ouster_device()
    r = grid_result(4, 5, [0, 9], device=dev)  # 5 of 8 columns: no whole turn
    assert pixel_shifts(r) is None
    r = grid_result(4, 8, [0], device=dev)
    # round(az * 8 / 360) less the smallest (issue 21 review: the shifts scan.json holds), clockwise head
    assert list(pixel_shifts(r)) == [2, 1, 0, 3]
    r = grid_result(4, 8, [0], device=dataclasses.replace(dev, direction="ccw"))
    assert list(pixel_shifts(r)) == [1, 2, 3, 0]  # the encoder angle grows with the column
    table = dataclasses.replace(dev.table, extra={"pixel_shift_by_row": [3, 2, 1, 0]})
    r = grid_result(4, 8, [0], device=dataclasses.replace(dev, table=table))
    assert list(pixel_shifts(r)) == [3, 2, 1, 0]
    # shifts measured for another column count (the table's columns_per_frame) do not apply
    table = dataclasses.replace(dev.table, extra={"pixel_shift_by_row": [3, 2, 1, 0],
                                                  "columns_per_frame": 16})
    r = grid_result(4, 8, [0], device=dataclasses.replace(dev, table=table))
    assert list(pixel_shifts(r)) == [2, 1, 0, 3]


def test_ouster_pcd_is_the_ouster_point_organized(tmp_path):
    import open3d as o3d

    from blensor_addon.io.formats.pcd import pcd_bytes
    dev = ouster_device()
    cells = np.array([0 * 8 + 0, 1 * 8 + 3, 3 * 8 + 6])
    r = grid_result(4, 8, cells, device=dev)
    for binary in (True, False):
        data = pcd_bytes(r, noisy=False, binary=binary)
        head, body = data.split(b"DATA " + (b"binary" if binary else b"ascii") + b"\n")
        assert head.decode().splitlines()[2:8] == [
            "FIELDS x y z intensity t reflectivity ring ambient range label semantic",
            "SIZE 4 4 4 4 4 2 2 2 4 4 2", "TYPE F F F F U U U U U U U", "COUNT 1 1 1 1 1 1 1 1 1 1 1",
            "WIDTH 8", "HEIGHT 4"]
        (tmp_path / "o.pcd").write_bytes(data)
        pc = o3d.t.io.read_point_cloud(str(tmp_path / "o.pcd"))  # Open3D's PCD reader, every field
        pos = pc.point.positions.numpy()
        assert pos.shape == (32, 3)
        # (0,0)->(0,2), (1,3)->(1,4), (3,6)->(3,1): clean points, row-major
        idx = [0 * 8 + 2, 1 * 8 + 4, 3 * 8 + 1]
        np.testing.assert_array_equal(pos[idx, 0], [2.0, 3.0, 4.0])
        assert np.isnan(np.delete(pos, idx, 0)).all()
        assert np.array_equal(pc.point["ring"].numpy().ravel(), np.repeat(np.arange(4), 8))
        assert np.array_equal(pc.point["range"].numpy().ravel()[idx], [2000, 3000, 4000])
        assert np.array_equal(pc.point["label"].numpy().ravel()[idx], [3, 4, 5])


def test_velodyne_time_is_relative_to_the_first_firing_of_the_last_packet(tmp_path):
    # issue 21, section 3: velodyne_pointcloud stamps the cloud with the scan's last data
    # packet (driver.cpp: packets.back().stamp) and times each point from it (rawdata.cpp:
    # timing_offsets + packet stamp - scan stamp). VLP-16: 24 columns a data packet.
    table = LaserTable(vendor="velodyne", model="VLP-16", elevation_deg=np.linspace(-15, 15, 16))
    dev = Device("velodyne", "VLP-16", table, rotation_speed=10.0, columns=1800.0)
    dt = 0.1 / 1800
    # sweep 1: columns 1800..3599; returns in columns 0 and 1799 (the sweep's last)
    cells = np.array([0, 5 * 1800 + 1799])
    r = grid_result(16, 1800, cells, device=dev)
    bag, _ = write_bag(tmp_path, [r])
    t, msg = bag["/blensor/points"][0]
    last_packet_first = (3599 // 24) * 24  # column 3576 = sweep column 1776
    assert t == BASE + round(last_packet_first * dt * 1e9) and t == BASE + 198_666_667
    rec = np.frombuffer(msg.data.tobytes(), np.dtype({"names": ["ring", "time"], "formats": ["<u2", "<f4"],
                                                      "offsets": [16, 18], "itemsize": 22}))
    np.testing.assert_allclose(rec["time"], [-1776 * dt, 23 * dt], rtol=1e-6)
    assert msg.height == 1 and msg.point_step == 22 and list(rec["ring"]) == [0, 5]
    # labels on request: appended after the 22 bytes
    bag, _ = write_bag(tmp_path / "labels", [r], {"rosbag2.labels": "1"})
    msg = bag["/blensor/points"][0][1]
    assert [(f.name, f.offset, f.datatype) for f in msg.fields][6:] == [
        ("object_id", 22, 6), ("instancer_id", 26, 6), ("instance_id", 30, 6), ("semantic", 34, 4)]
    lab = np.frombuffer(msg.data.tobytes(), np.dtype({"names": ["object_id", "instancer_id", "semantic"],
                                                      "formats": ["<u4", "<u4", "<u2"], "offsets": [22, 26, 34],
                                                      "itemsize": 36}))
    assert msg.point_step == 36 and list(lab["object_id"]) == [3, 4] and list(lab["instancer_id"]) == [0, 1]
    assert list(lab["semantic"]) == [10, 10]
    # a generic sensor keeps the packet's start and times >= 0
    gen = grid_result(16, 1800, cells, device=dataclasses.replace(dev, vendor="generic"))
    bag, _ = write_bag(tmp_path / "generic", [gen])
    t, msg = bag["/blensor/points"][0]
    assert t == BASE + 100_000_000
    rec = np.frombuffer(msg.data.tobytes(), np.dtype({"names": ["time"], "formats": ["<f4"], "offsets": [18],
                                                      "itemsize": 22}))
    np.testing.assert_allclose(rec["time"], [0.0, 1799 * dt], rtol=1e-6, atol=1e-9)


def test_bag_clock_static_tf_qos_and_frames(tmp_path):
    # issue 21, section 3: /clock, /tf_static offered transient-local (late subscribers get
    # it on replay), odom -> base_link -> sensor with settable names and the sensor's mount
    from rosbags.interfaces import QosDurability, QosHistory, QosReliability

    from blensor_addon.core.errors import SettingsError
    dev = ouster_device()
    pose = np.eye(4)
    pose[:3, 3] = (10.0, -2.0, 1.5)
    rs = [dataclasses.replace(grid_result(4, 8, [0, 9], device=dev, frame=f), sensor_to_world=pose)
          for f in (1, 2)]
    opts = {"rosbag2.odom_frame": "world_odom", "rosbag2.base_frame": "car",
            "rosbag2.sensor_frame": "os_lidar",
            "rosbag2.base_to_sensor": "1.0, 0, 2.0, 0, 0, 90"}
    bag, conns = write_bag(tmp_path, rs, opts)
    assert [t for t, _ in bag["/clock"]] == [BASE + 100_000_000, BASE + 200_000_000]
    assert [(m.clock.sec, m.clock.nanosec) for _, m in bag["/clock"]] == [(BASE // 10**9, 100_000_000),
                                                                         (BASE // 10**9, 200_000_000)]
    (qos,) = conns["/tf_static"].ext.offered_qos_profiles
    assert (qos.durability, qos.reliability, qos.history, qos.depth) == (
        QosDurability.TRANSIENT_LOCAL, QosReliability.RELIABLE, QosHistory.KEEP_LAST, 1)
    assert conns["/tf"].ext.offered_qos_profiles == []
    meta = (tmp_path / "rosbag2" / "metadata.yaml").read_text()
    assert "durability: 1" in meta  # rosbag2 v8 metadata: transient local
    (_, static), = bag["/tf_static"]
    mount, optical = static.transforms
    assert (mount.header.frame_id, mount.child_frame_id) == ("car", "os_lidar")
    assert (optical.header.frame_id, optical.child_frame_id) == ("os_lidar", "blensor_optical")
    assert (mount.transform.translation.x, mount.transform.translation.z) == (1.0, 2.0)
    q = mount.transform.rotation
    s45 = math.sin(math.pi / 4)
    np.testing.assert_allclose([q.x, q.y, q.z, q.w], [0, 0, s45, s45], atol=1e-12)
    # odom -> car composed with car -> os_lidar is the sensor pose
    _, tf = bag["/tf"][0]
    (tr,) = tf.transforms
    assert (tr.header.frame_id, tr.child_frame_id) == ("world_odom", "car")
    base = np.eye(4)
    base[:3, 3] = [tr.transform.translation.x, tr.transform.translation.y, tr.transform.translation.z]
    rq = tr.transform.rotation
    assert math.isclose(abs(rq.z), math.sin(math.pi / 4), abs_tol=1e-12)
    yaw = 2 * math.atan2(rq.z, rq.w)
    base[:2, :2] = [[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]]
    mnt = np.eye(4)
    mnt[:3, 3] = (1.0, 0.0, 2.0)
    mnt[:2, :2] = [[0, -1], [1, 0]]
    np.testing.assert_allclose(base @ mnt, pose, atol=1e-9)
    assert bag["/blensor/points"][0][1].header.frame_id == "os_lidar"
    _, odom = bag["/blensor/odom"][0]
    assert (odom.header.frame_id, odom.child_frame_id) == ("world_odom", "car")
    for bad, name in (({"rosbag2.base_frame": "odom"}, "rosbag2.base_frame"),
                      ({"rosbag2.sensor_frame": "my lidar"}, "rosbag2.sensor_frame"),
                      ({"rosbag2.odom_frame": "/odom"}, "rosbag2.odom_frame")):
        with pytest.raises(SettingsError, match=f"^{name} must be a tf frame id"):
            write_bag(tmp_path / "bad", rs, bad)


def test_las_classification_is_asprs_with_wkt_bit_and_generator(tmp_path):
    # issue 21, section 3: ASPRS classes (LAS 1.4 R15 Table 17), the SemanticKITTI id in the
    # extra dimension, global encoding bit 4 (WKT) for point format 7, BlenSor as generator
    import laspy

    from blensor_addon import __version__
    from blensor_addon.core.classes import ASPRS_OF_SEMANTIC_KITTI, SEMANTIC_KITTI
    from blensor_addon.io.formats.las import las_bytes
    names = ["unlabeled", "outlier", "road", "parking", "sidewalk", "terrain", "vegetation", "trunk",
             "building", "car", "moving-car", "person", "pole", "lane-marking"]
    expect = [1, 7, 11, 11, 2, 3, 5, 5, 6, 64, 64, 71, 76, 11]
    n = len(names)
    sem = np.array([SEMANTIC_KITTI[k] for k in names])
    dev = ouster_device()
    r = grid_result(4, 8, np.arange(n), device=dev, semantic=sem, ring=np.zeros(n), channel=np.zeros(n))
    for compress in (False, True):
        path = tmp_path / f"c.{'laz' if compress else 'las'}"
        path.write_bytes(las_bytes(r, compress=compress))
        las = laspy.read(path)
        assert list(las.classification) == expect
        assert list(las.semantic) == list(sem)  # 252 moving-car kept exactly
        assert las.header.global_encoding.wkt and las.header.global_encoding.value & 0x10
        assert las.header.generating_software == f"BlenSor {__version__}"
        (vlr,) = [v for v in las.header.vlrs if v.user_id == "LASF_Spec" and v.record_id == 0]
        table = vlr.lookups  # laspy parses the Classification Lookup VLR
        assert table[2] == "Ground" and table[64] == "Car" and table[70] == "Other vehicle"
        assert set(table) == set(ASPRS_OF_SEMANTIC_KITTI.values())
    with open(tmp_path / "c.las", "rb") as f:
        raw = f.read(8)
    assert int.from_bytes(raw[6:8], "little") & 0x10  # the global encoding field itself


@pytest.fixture
def crossing_kitti(bpy_mod, crossing, tmp_path):
    """The demo's Velodyne on scenes/crossing.blend with Car.3 parked (its animation
    cleared): the other cars and the ego car drive."""
    car = bpy_mod.data.objects["Car.3"]
    car.animation_data_clear()
    car.location = (2.5, 6.0, 0.0)  # parked on the southbound lane, ahead of the sensor
    return bpy_mod.data.objects["Velodyne"]


def _kitti_labels(folder, i):
    lab = np.fromfile(folder / "labels" / f"{i:06d}.label", np.uint32)
    return lab & 0xFFFF, lab >> 16


@pytest.mark.parametrize("time_model", ["continuous", "frame"])
def test_kitti_moving_cars_take_moving_classes_and_stuff_has_no_instance(crossing_kitti, tmp_path,
                                                                         time_model):
    # issue 21, section 3: moving objects take the moving-* classes from their motion in the
    # scene during the scan; stuff classes (road, sidewalk, building, vegetation, ...) get
    # instance id 0, as SemanticKITTI
    from blensor_addon.jobs.range_scan import scan_range
    cam = crossing_kitti
    cam.data.blensor.time_model = time_model
    args = dict(time=(0.1, 0.2)) if time_model == "continuous" else dict(frames=[4])
    job = scan_range(cam, args.pop("frames", None), tmp_path, ("npz", "kitti"), **args)
    assert job.status == "complete"
    (npz,) = sorted(tmp_path.glob("scan*.npz"))
    z = np.load(npz)
    sem, inst = _kitti_labels(tmp_path, 0)
    import bpy
    ids = {o.name: i + 1 for i, o in enumerate(sorted(
        (o for o in bpy.data.objects if not o.get("blensor_scan")), key=lambda o: o.name_full))}
    parked, driving = ids["Car.3"], [ids[f"Car.{k}"] for k in (1, 2, 4)]
    on_parked = z["object_id"] == parked
    on_driving = np.isin(z["object_id"], driving)
    assert on_parked.sum() > 50 and on_driving.sum() > 50
    assert (sem[on_parked] == 10).all() and (inst[on_parked] == parked).all()  # car, its instance
    assert (sem[on_driving] == 252).all()  # moving-car
    assert np.array_equal(inst[on_driving], z["object_id"][on_driving])
    assert (z["semantic"][on_driving] == 10).all()  # the npz keeps the object's own class
    stuff = ~np.isin(sem, sorted(THING_CLASSES))  # road, sidewalk, building, other-structure, ...
    assert stuff.sum() > 0.9 * len(sem) and (inst[stuff] == 0).all()
    assert (inst[~stuff] > 0).all()  # every thing point has an instance


def test_kitti_poses_at_the_sweep_start_or_end(bpy_mod, crossing, tmp_path):
    from blensor_addon.core.axes import ros_pose
    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    for instant in ("start", "end"):
        out = tmp_path / instant
        scan_range(cam, None, out, ("npz", "kitti"), time=(0.1, 0.3), options={"kitti.poses": instant})
        zs = [np.load(out / f"scan{f:05d}.npz") for f in (1, 2)]
        key = "sensor_to_world" if instant == "start" else "sensor_to_world_end"
        T = [ros_pose(z[key]) if z["axes"] == "blensor" else z[key] for z in zs]
        poses = np.loadtxt(out / "poses.txt").reshape(-1, 3, 4)
        np.testing.assert_allclose(poses[1], (np.linalg.inv(T[0]) @ T[1])[:3], atol=1e-6)
        np.testing.assert_allclose(poses[0], np.eye(4)[:3], atol=1e-12)
        np.testing.assert_allclose(np.loadtxt(out / "times.txt"), [0.0, 0.1], atol=1e-9)
    start = np.loadtxt(tmp_path / "start" / "poses.txt").reshape(-1, 3, 4)
    end = np.loadtxt(tmp_path / "end" / "poses.txt").reshape(-1, 3, 4)
    # the ego car drives (and speeds up from its first keyframe): the instants differ by cm
    assert abs(end[1, 0, 3] - start[1, 0, 3]) > 0.05


def test_os0_128_sweep_in_the_bag_and_pcd_is_128_rows_by_1024(bpy_mod, crossing, tmp_path):
    # the rotating preset of a real Ouster unit, whole sweeps: the organized ouster-ros cloud
    import open3d as o3d

    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, None, tmp_path, ("npz", "rosbag2", "pcd"), time=(0.1, 0.2), preset="os0_128",
                     angle_resolution=360.0 / 1024, rotation_speed=10.0, max_range=50.0, start_angle=0.0,
                     end_angle=360.0)
    assert job.status == "complete"
    z = np.load(tmp_path / "scan00001.npz")
    bag, _ = read_bag(tmp_path / "rosbag2")
    t, msg = bag["/blensor/points"][0]
    assert (msg.height, msg.width, msg.point_step) == (128, 1024, 48) and t == BASE + 100_000_000
    rec = np.frombuffer(msg.data.tobytes(), np.dtype({"names": ["x", "t", "ring", "range"],
                                                      "formats": ["<f4", "<u4", "<u2", "<u4"],
                                                      "offsets": [0, 20, 26, 32], "itemsize": 48}))
    hit = np.isfinite(rec["x"])
    assert hit.sum() == len(z["range"]) > 10_000
    # round(1000 x range) of the stored float32 range, in float64: the packets' (ouster_range_mm)
    mm = np.round(z["range_noisy"].astype(np.float64) * 1000).astype(np.uint32)
    assert np.array_equal(np.sort(rec["range"][hit]), np.sort(mm))
    assert np.array_equal(rec["ring"].reshape(128, 1024), np.repeat(np.arange(128), 1024).reshape(128, 1024))
    assert rec["t"].min() == 0 and rec["t"].max() == round(1023 * 0.1 / 1024 * 1e9)
    pc = o3d.t.io.read_point_cloud(str(tmp_path / "noisy" / "scan00001.pcd"))
    assert pc.point.positions.shape == (128 * 1024, 3)
    assert np.isfinite(pc.point.positions.numpy()[:, 0]).sum() == len(z["range"])
