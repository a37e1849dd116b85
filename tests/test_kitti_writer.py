"""The KITTI / SemanticKITTI writer without Blender (``io/formats/kitti.py``): labels (moving-*
classes, 16-bit instance ids), the ``.bin`` points in REP-103 axes, and the sequence's
poses.txt, times.txt and calib.txt text, checked value by value on a hand-made result."""
from __future__ import annotations

import numpy as np

from blensor_addon.core.result import FIELDS, ScanResult
from blensor_addon.io.formats._base import RunInfo
from blensor_addon.io.formats.kitti import (KittiOptions, KittiWriter, kitti_instance, kitti_labels,
                                            kitti_scan, moving_points)

IDENTITY_LINE = " ".join(f"{v:.9e}" for v in np.eye(4)[:3].ravel())
CALIB = "".join(f"{k}: 1 0 0 0 0 1 0 0 0 0 1 0\n" for k in ("P0", "P1", "P2", "P3", "Tr"))


def pose(x: float = 0.0, y: float = 0.0, z: float = 0.0) -> np.ndarray:
    """A (4, 4) pose translated by (x, y, z) m, not rotated."""
    T = np.eye(4)
    T[:3, 3] = (x, y, z)
    return T


def result(frame: int = 3, *, objects=(), axes: str = "blensor", **kw) -> ScanResult:
    """Four returns: a moving car drawn directly (object 70000), an instanced car, an
    instanced person and the road."""
    n = 4
    xyz = np.array([[1.0, 2.0, 3.0], [-4.0, 0.5, -6.0], [0.0, 0.0, -10.0], [2.0, -1.5, 0.25]])
    base = dict(timestamp=np.zeros(n), azimuth=np.zeros(n), elevation=np.zeros(n), range=np.ones(n),
                range_noisy=np.ones(n), xyz=xyz, xyz_noisy=xyz + 0.5, object_id=[70000, 3, 4, 9],
                semantic=[10, 10, 30, 40], instancer_id=[0, 5, 65600, 0], instance_id=[0, 7, 65535, 0],
                channel=np.zeros(n), ring=np.zeros(n), ray_index=np.arange(n), reflectivity=np.ones(n),
                intensity=[0.5, 0.25, 0.125, 1.0], color=np.zeros((n, 3)),
                normal=np.tile([0.0, 0.0, 1.0], (n, 1)),
                grid_shape=(1, 4), frame=frame, frame_time=0.1, axes=axes,
                objects=list(objects) or [{"id": 70000, "moving": True}, {"id": 3, "moving": True},
                                          {"id": 5}, {"id": 65600, "moving": False}])
    base.update(kw)
    return ScanResult(**base)


def test_instance_ids_are_the_object_id_or_a_hash_of_the_instance_in_16_bits():
    assert kitti_instance(result()).tolist() == [70000 & 0xFFFF, (5 * 1000003 + 7) % 65521 + 1,
                                                 (65600 * 1000003 + 65535) % 65521 + 1, 9]
    assert kitti_instance(result()).tolist() == [4464, 20427, 47447, 9]
    assert kitti_instance(result()).dtype == np.uint32


def test_moving_points_follow_the_object_or_its_instancer():
    assert moving_points(result()).tolist() == [True, False, False, False]
    assert moving_points(result()).dtype == bool
    # moving objects the packet did not hit, instancers above every object id
    assert moving_points(result(objects=[{"id": 99999, "moving": True}])).tolist() == [False] * 4
    small = result(object_id=[1, 3, 4, 9], objects=[{"id": 5, "moving": True}])
    assert moving_points(small).tolist() == [False, True, False, False]
    by_instancer = moving_points(result(objects=[{"id": 65600, "moving": True}]))
    assert by_instancer.tolist() == [False, False, True, False]
    assert moving_points(result(objects=[{"id": 9, "moving": True}])).tolist() == [False, False, False, True]
    still = moving_points(result(objects=[{"id": 70000}]))
    assert still.dtype == bool and still.tolist() == [False] * 4
    r = result()
    empty = ScanResult(**{f: np.asarray(getattr(r, f))[:0] for f in FIELDS}, grid_shape=(1, 4),
                       objects=[{"id": 70000, "moving": True}])
    assert moving_points(empty).tolist() == []


def test_labels_put_moving_things_in_their_moving_class_and_stuff_in_instance_0():
    labels = kitti_labels(result())
    assert labels.dtype == np.uint32
    assert labels.tolist() == [252 | 4464 << 16, 10 | 20427 << 16, 30 | 47447 << 16, 40]


def test_the_bin_is_float32_xyz_in_rep103_axes_and_intensity():
    r = result()
    bin_, label = kitti_scan(r)
    pts = np.frombuffer(bin_, dtype="<f4").reshape(-1, 4)
    # BlenSor's sensor axes (x right, y up, -z ahead) to REP-103 (x ahead, y left, z up): (-z, -x, y)
    assert pts.tolist() == [[-3.5, -1.5, 2.5, 0.5], [5.5, 3.5, 1.0, 0.25], [9.5, -0.5, 0.5, 0.125],
                            [-0.75, -2.5, -1.0, 1.0]]
    assert label == kitti_labels(r).astype("<u4").tobytes()
    clean = np.frombuffer(kitti_scan(r, noisy=False)[0], dtype="<f4").reshape(-1, 4)
    assert clean[:, :3].tolist() == [[-3.0, -1.0, 2.0], [6.0, 4.0, 0.5], [10.0, 0.0, 0.0],
                                     [-0.25, -2.0, -1.5]]


def test_the_sequence_text_is_relative_to_the_first_scan_and_lists_appended_frames_only(tmp_path):
    w = KittiWriter(tmp_path, None, RunInfo(frames=[3, 5, 9]))
    assert w.options == KittiOptions() and w.multi_frame
    first = dict(w.frame_files(result(3, sensor_to_world=pose(1.0, 2.0, 3.0))))
    assert list(first) == ["velodyne/000000.bin", "labels/000000.label", "poses.txt", "times.txt",
                           "calib.txt"]
    assert first["poses.txt"] == (IDENTITY_LINE + "\n").encode()
    assert first["times.txt"] == b"0.000000000e+00\n"
    assert first["calib.txt"] == CALIB.encode()
    assert (first["velodyne/000000.bin"], first["labels/000000.label"]) == kitti_scan(result(3))
    w.append(result(3))
    # 2 m ahead (BlenSor's -z) is REP-103's x = 2; frame 5 is the run's second packet
    second = dict(w.frame_files(result(5, sensor_to_world=pose(1.0, 2.0, 1.0))))
    assert "velodyne/000001.bin" in second and "labels/000001.label" in second
    step = np.eye(4)[:3]
    step[0, 3] = 2.0
    step_line = " ".join(f"{v:.9e}" for v in step.ravel())
    assert second["poses.txt"].decode().splitlines() == [IDENTITY_LINE, step_line]
    assert second["times.txt"] == b"0.000000000e+00\n2.000000000e-01\n"
    # not appended (its frame failed): the next frame does not list it, and takes its place
    third = dict(w.frame_files(result(9, sensor_to_world=pose(1.0, 2.0, 3.0))))
    assert "velodyne/000002.bin" in third and len(third["poses.txt"].decode().splitlines()) == 2
    # a frame outside the run's list is numbered by the frames appended so far
    other = dict(w.frame_files(result(40)))
    assert "velodyne/000001.bin" in other and third["times.txt"] == b"0.000000000e+00\n6.000000000e-01\n"


def test_poses_at_the_packets_end_use_the_end_pose_in_rep103_axes(tmp_path):
    w = KittiWriter(tmp_path, KittiOptions(poses="end"), RunInfo(frames=[3, 4]))
    r = result(3, sensor_to_world=pose(), sensor_to_world_end=pose(0.0, 0.0, -1.0).astype(np.float32))
    assert w._pose_and_time(r)[1] == 0.4
    T, _ = w._pose_and_time(r)
    assert T.dtype == np.float64 and T[:3, 3].tolist() == [0.0, 0.0, -1.0]
    assert T[:3, :3].tolist() == [[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]]  # REP-103's
    end32 = pose(2.0, 0.0, 0.0).astype(np.float32)
    ros = result(3, axes="ros", sensor_to_world=pose(), sensor_to_world_end=end32)
    T, _ = w._pose_and_time(ros)
    assert T.dtype == np.float64 and T.tolist() == pose(2.0, 0.0, 0.0).tolist()
    frozen = result(3, sensor_to_world=pose(5.0, 0.0, 0.0))
    T, t = w._pose_and_time(frozen)
    assert t == 0.4 and T[:3, 3].tolist() == [5.0, 0.0, 0.0]
    start = KittiWriter(tmp_path, None, RunInfo(frames=[3]))
    T, t = start._pose_and_time(r)
    assert t == 3 * 0.1 and T[:3, 3].tolist() == [0.0, 0.0, 0.0]
    files = dict(w.frame_files(r))
    assert files["times.txt"] == b"0.000000000e+00\n"


def test_clean_points_option_writes_the_clean_points(tmp_path):
    w = KittiWriter(tmp_path, KittiOptions(points="clean"), RunInfo(frames=[3]))
    files = dict(w.frame_files(result(3)))
    assert files["velodyne/000000.bin"] == kitti_scan(result(3), noisy=False)[0]
