"""A KITTI odometry / SemanticKITTI sequence folder.

Files (scan index i = position of the frame in the run's frame list, ``%06d``, so a
sequence has no gaps whatever frames were chosen):
``velodyne/<i>.bin`` float32 (x, y, z, reflectance) per point in KITTI's LiDAR axes
(REP-103: x forward, y left, z up; reflectance = intensity 0..1); ``labels/<i>.label``
uint32 per point, the semantic class id (SemanticKITTI's) in the low 16 bits and an
instance id in the high 16, as the dataset writes them:

- points of objects that move during the scan take the moving-* class of their class
  (252 moving-car, 253 moving-bicyclist, 254 moving-person, 255 moving-motorcyclist, 256
  moving-on-rails, 257 moving-bus, 258 moving-truck, 259 moving-other-vehicle;
  :data:`~blensor_addon.core.classes.MOVING_CLASS`), from the objects' actual motion in
  the scene during the packet (the object table's ``moving`` flag:
  :meth:`blensor_addon.scene.timeline.Timeline.moving_ids`, an object whose transform
  changes by more than 1 mm over the scene frames the packet overlaps);
- only thing classes (vehicles, people: :data:`~blensor_addon.core.classes.THING_CLASSES`)
  carry an instance id: the object id for objects drawn directly, a 16-bit mix of
  instancer and index for instances; stuff classes (road, sidewalk, parking, building,
  vegetation, terrain, pole, ...) and unlabelled points have instance id 0, as in the
  dataset.

``poses.txt`` one line per scan, the 3x4 row-major pose of the LiDAR relative to the
first scan (the first is the identity, as KITTI; values zero within float64, such as
2.8e-46, are written as exactly 0: :func:`blensor_addon.io.trajectory.zero_noise`). Each
line is the pose at the scan's **start** (the packet's first firing) by default; option
``poses=end`` writes the pose at the scan's end (the packet's end in continuous time,
which odometry tools estimate for a sweep; with frozen frames the sensor holds its pose,
so both are the same). ``times.txt``: seconds of the same instants since the first
scan's. ``calib.txt`` with P0..P3 and Tr (LiDAR to camera 0) as identities: the sensor
is a LiDAR with no camera beside it, so SemanticKITTI's tools, which apply
``Tr^-1 pose Tr``, get the LiDAR poses (the file has no comment line: those tools parse
every line as ``KEY: 12 numbers``). ``poses.txt`` and ``times.txt`` are rewritten with
every finished frame (a resumed run scans every frame again).
Option ``points``: ``noisy`` (default: what a real sensor records) or ``clean``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ...core.axes import ros_pose, ros_sensor_pose, sensor_points
from ...core.classes import is_thing, moving_classes
from ...core.ndtypes import F64, U32, Bool
from ...core.result import ScanResult
from ...core.settings import setting
from ..trajectory import zero_noise
from ._base import RunInfo, Writer

IDENTITY_3X4 = "1 0 0 0 0 1 0 0 0 0 1 0"


def kitti_instance(result: ScanResult) -> U32:
    """(N,) uint32 16-bit instance ids of every point, before stuff classes are set to
    0 (:func:`kitti_labels` does): the object id for objects drawn directly, else
    ``(instancer * 1000003 + index) mod 65521 + 1``."""
    direct = result.object_id.astype(np.uint64)
    mixed = (result.instancer_id.astype(np.uint64) * 1000003 + result.instance_id) % 65521 + 1
    return np.where(result.instancer_id == 0, direct & 0xFFFF, mixed).astype(np.uint32)


def moving_points(result: ScanResult) -> Bool:
    """(N,) bool: the point's object moves during the packet: the object table's
    ``moving`` flag of its object (drawn directly) or of its instancer (instances)."""
    ids = [o["id"] for o in result.objects if o.get("moving")]
    n = len(result)
    if not ids or not n:
        return np.zeros(n, bool)
    top = max(max(ids), int(result.object_id.max()), int(result.instancer_id.max())) + 1
    flag = np.zeros(top, bool)
    flag[ids] = True
    return np.where(result.instancer_id == 0, flag[result.object_id], flag[result.instancer_id])


def kitti_labels(result: ScanResult) -> U32:
    """(N,) uint32 SemanticKITTI labels (see the module docstring): moving-* classes for
    moving things, instance id 0 for stuff."""
    sem = moving_classes(result.semantic, moving_points(result))
    inst = np.where(is_thing(sem), kitti_instance(result), 0).astype(np.uint32)
    # uint32 with Python ints stays uint32 (numpy's stubs type it as a signed integer)
    return cast("U32", (sem.astype(np.uint32) & 0xFFFF) | (inst << 16))


def kitti_scan(result: ScanResult, noisy: bool = True) -> tuple[bytes, bytes]:
    """The ``.bin`` and ``.label`` bytes of one scan."""
    pts = np.empty((len(result), 4), np.float32)
    pts[:, :3] = sensor_points(result, noisy, "ros")
    pts[:, 3] = result.intensity
    return pts.astype("<f4").tobytes(), kitti_labels(result).astype("<u4").tobytes()


@dataclass(frozen=True)
class KittiOptions:
    """Options of the KITTI writer: ``points`` = ``noisy`` or ``clean``; ``poses`` =
    ``start`` or ``end`` (the instant each line of poses.txt and times.txt describes)."""

    points: str = setting("noisy", "KITTI points", "Which points go into velodyne/*.bin",
                          choices=("noisy", "clean"))
    poses: str = setting("start", "KITTI poses", "The instant of each scan poses.txt and times.txt give: the "
                         "sweep's start or its end (what odometry tools estimate)", choices=("start", "end"))


class KittiWriter(Writer):
    """The KITTI / SemanticKITTI sequence folder (see the module docstring)."""

    name = "kitti"
    description = "KITTI odometry / SemanticKITTI sequence: velodyne/*.bin, labels/*.label, poses, times, calib"
    files = "velodyne/<i:06d>.bin, labels/<i:06d>.label, poses.txt, times.txt, calib.txt"
    outputs = (r"velodyne/\d{6}\.bin", r"labels/\d{6}\.label", r"poses\.txt", r"times\.txt", r"calib\.txt")
    Options = KittiOptions
    options: KittiOptions
    multi_frame = True  # poses.txt and times.txt list every frame

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._first: tuple[F64, float] | None = None
        self._poses: list[str] = []
        self._times: list[str] = []

    def _pose_and_time(self, result: ScanResult) -> tuple[F64, float]:
        """The REP-103 LiDAR pose (4, 4) and the time (s) of the instant ``poses``."""
        t = result.frame * result.frame_time
        if self.options.poses == "start":
            return ros_sensor_pose(result), t
        end = result.sensor_to_world_end
        if end is None:  # frozen: the sensor holds its pose over the packet
            return ros_sensor_pose(result), t + result.frame_time
        end = np.asarray(end, dtype=np.float64)
        return (ros_pose(end) if result.axes == "blensor" else end), t + result.frame_time

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        i = self.run.frames.index(result.frame) if result.frame in self.run.frames else len(self._poses)
        T, t = self._pose_and_time(result)
        if self._first is None:
            self._first = (np.linalg.inv(T), t)
        rel = zero_noise(self._first[0] @ T)
        poses = self._poses + [" ".join(f"{v:.9e}" for v in rel[:3, :].ravel())]
        times = self._times + [f"{t - self._first[1]:.9e}"]
        self._pending = (poses, times)
        bin_, label = kitti_scan(result, self.options.points == "noisy")
        calib = "".join(f"{k}: {IDENTITY_3X4}\n" for k in ("P0", "P1", "P2", "P3", "Tr"))
        return [(f"velodyne/{i:06d}.bin", bin_), (f"labels/{i:06d}.label", label),
                ("poses.txt", ("\n".join(poses) + "\n").encode()), ("times.txt", ("\n".join(times) + "\n").encode()),
                ("calib.txt", calib.encode())]

    def append(self, result: ScanResult) -> None:
        self._poses, self._times = self._pending


WRITER = KittiWriter
