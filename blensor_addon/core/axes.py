"""Axis conventions: BlenSor's sensor frame and ROS REP-103.

BlenSor's sensor frame is the camera's (kept from the original, reference section 2):
+X right, +Y up, looking down -Z. REP-103 (ROS; KITTI's LiDAR frame too): x forward,
y left, z up. A point p in BlenSor's sensor frame is ``ROS_FROM_BLENSOR @ p`` in REP-103:
``x = -z, y = -x, z = y``. World coordinates need no change: Blender's world is
right-handed and Z-up, as REP-103's ENU world frames.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import SettingsError

AXES = ("blensor", "ros")
#: (3, 3) rotation taking BlenSor sensor-frame vectors to REP-103 sensor-frame vectors
ROS_FROM_BLENSOR = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def check_axes(axes: str) -> str:
    """Raise SettingsError (``axes``) unless one of :data:`AXES`."""
    if axes not in AXES:
        raise SettingsError("axes", "one of " + ", ".join(AXES), axes)
    return axes


def ros_pose(sensor_to_world: np.ndarray) -> np.ndarray:
    """(4, 4) float64 pose of the REP-103 sensor frame in the world (the rotation
    composed with ``ROS_FROM_BLENSOR^T``; same origin)."""
    T = np.array(sensor_to_world, dtype=np.float64)
    T[:3, :3] = T[:3, :3] @ ROS_FROM_BLENSOR.T
    return T


def sensor_points(result, noisy: bool = False, axes: str = "ros") -> np.ndarray:
    """(N, 3) float64 points of ``result`` in its sensor frame, in ``axes``, whatever
    frame and axes the result is in."""
    xyz = (result.xyz_noisy if noisy else result.xyz).astype(np.float64)
    if result.frame_of_reference == "world":  # the pose describes the frame in the result's axes
        T = np.asarray(result.sensor_to_world, dtype=np.float64)
        xyz = (xyz - T[:3, 3]) @ T[:3, :3]
    if result.axes == axes:
        return xyz
    M = ROS_FROM_BLENSOR if axes == "ros" else ROS_FROM_BLENSOR.T
    return xyz @ M.T


def to_axes(result, axes: str):
    """``result`` with sensor-frame points and normals, and the pose, in ``axes``
    (a new ScanResult; the same one if already there). World-frame points and normals
    stay as they are; ``sensor_to_world`` then describes the frame in ``axes``."""
    check_axes(axes)
    if result.axes == axes:
        return result
    M = ROS_FROM_BLENSOR if axes == "ros" else ROS_FROM_BLENSOR.T
    T = np.array(result.sensor_to_world, dtype=np.float64)
    T[:3, :3] = T[:3, :3] @ M.T
    changes = {"sensor_to_world": T, "axes": axes}
    if result.frame_of_reference == "sensor":
        for name in ("xyz", "xyz_noisy", "normal"):
            changes[name] = getattr(result, name).astype(np.float64) @ M.T
    return dataclasses.replace(result, **changes)
