"""A KITTI odometry / SemanticKITTI sequence folder.

Files (scan index i = position of the frame in the run's frame list, ``%06d``, so a
sequence has no gaps whatever frames were chosen):
``velodyne/<i>.bin`` float32 (x, y, z, reflectance) per point in KITTI's LiDAR axes
(REP-103: x forward, y left, z up; reflectance = intensity 0..1); ``labels/<i>.label``
uint32 per point, semantic class id (SemanticKITTI's) in the low 16 bits and an instance
id in the high 16 (the object id for objects drawn directly, a 16-bit mix of instancer
and index for instances; 0 with the class for unlabelled points); ``poses.txt`` one line
per scan, the 3x4 row-major pose of the LiDAR relative to the first scan (the first is
the identity, as KITTI; values zero within float64, such as 2.8e-46, are written as
exactly 0: :func:`blensor_addon.io.trajectory.zero_noise`); ``times.txt`` seconds
since the first scan; ``calib.txt`` with
P0..P3 and Tr (LiDAR to "camera") as identities, so SemanticKITTI's tools, which apply
``Tr^-1 pose Tr``, get the LiDAR poses. ``poses.txt`` and ``times.txt`` are rewritten
with every finished frame (a resumed run scans every frame again).
Option ``points``: ``noisy`` (default: what a real sensor records) or ``clean``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.axes import ros_sensor_pose, sensor_points
from ...core.result import ScanResult
from ...core.settings import setting
from ..trajectory import zero_noise
from ._base import Writer

IDENTITY_3X4 = "1 0 0 0 0 1 0 0 0 0 1 0"


def kitti_instance(result: ScanResult) -> np.ndarray:
    """(N,) uint32 16-bit instance ids (see the module docstring)."""
    direct = result.object_id.astype(np.uint64)
    mixed = (result.instancer_id.astype(np.uint64) * 1000003 + result.instance_id) % 65521 + 1
    return np.where(result.instancer_id == 0, direct & 0xFFFF, mixed).astype(np.uint32)


def kitti_scan(result: ScanResult, noisy: bool = True) -> tuple[bytes, bytes]:
    """The ``.bin`` and ``.label`` bytes of one scan."""
    pts = np.empty((len(result), 4), np.float32)
    pts[:, :3] = sensor_points(result, noisy, "ros")
    pts[:, 3] = result.intensity
    labels = (result.semantic.astype(np.uint32) & 0xFFFF) | (kitti_instance(result) << 16)
    return pts.astype("<f4").tobytes(), labels.astype("<u4").tobytes()


@dataclass(frozen=True)
class KittiOptions:
    """Options of the KITTI writer: ``points`` = ``noisy`` or ``clean``."""

    points: str = setting("noisy", "KITTI points", "Which points go into velodyne/*.bin",
                          choices=("noisy", "clean"))


class KittiWriter(Writer):
    """The KITTI / SemanticKITTI sequence folder (see the module docstring)."""

    name = "kitti"
    description = "KITTI odometry / SemanticKITTI sequence: velodyne/*.bin, labels/*.label, poses, times, calib"
    files = "velodyne/<i:06d>.bin, labels/<i:06d>.label, poses.txt, times.txt, calib.txt"
    outputs = (r"velodyne/\d{6}\.bin", r"labels/\d{6}\.label", r"poses\.txt", r"times\.txt", r"calib\.txt")
    Options = KittiOptions
    multi_frame = True  # poses.txt and times.txt list every frame

    def __init__(self, folder, options=None, run=None) -> None:
        super().__init__(folder, options, run)
        self._first = None
        self._poses: list[str] = []
        self._times: list[str] = []

    def frame_files(self, result):
        i = self.run.frames.index(result.frame) if result.frame in self.run.frames else len(self._poses)
        T = ros_sensor_pose(result)
        if self._first is None:
            self._first = (np.linalg.inv(T), result.frame * result.frame_time)
        rel = zero_noise(self._first[0] @ T)
        poses = self._poses + [" ".join(f"{v:.9e}" for v in rel[:3, :].ravel())]
        times = self._times + [f"{result.frame * result.frame_time - self._first[1]:.9e}"]
        self._pending = (poses, times)
        bin_, label = kitti_scan(result, self.options.points == "noisy")
        calib = "".join(f"{k}: {IDENTITY_3X4}\n" for k in ("P0", "P1", "P2", "P3", "Tr"))
        return [(f"velodyne/{i:06d}.bin", bin_), (f"labels/{i:06d}.label", label),
                ("poses.txt", ("\n".join(poses) + "\n").encode()), ("times.txt", ("\n".join(times) + "\n").encode()),
                ("calib.txt", calib.encode())]

    def append(self, result):
        self._poses, self._times = self._pending


WRITER = KittiWriter
