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


def ros_sensor_pose(result) -> np.ndarray:
    """(4, 4) float64 pose of ``result``'s REP-103 sensor frame in the world, whatever
    axes the result is in."""
    return ros_pose(result.sensor_to_world) if result.axes == "blensor" else np.array(result.sensor_to_world,
                                                                                       dtype=np.float64)


def sensor_points(result, noisy: bool = False, axes: str = "ros") -> np.ndarray:
    """(N, 3) float64 points of ``result`` in its sensor frame at each ray's time (as a
    sensor driver gives them), in ``axes``, whatever frame and axes the result is in: the
    same values for a world-frame scan as for the same scan in the sensor frame."""
    name = "xyz_noisy" if noisy else "xyz"
    if result.frame_of_reference == "world" and name + "_sensor" in result.extra:
        xyz = result.extra[name + "_sensor"].astype(np.float64)  # the sensor moved during the packet
    else:
        xyz = result.points(noisy)  # float64 (a far world-frame scan's float64 coordinates)
        if result.frame_of_reference == "world":  # one pose, in the result's axes
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

    def pose_in_axes(pose):  # the sensor frame's axes rotated, its position kept
        T = np.array(pose, dtype=np.float64)
        T[:3, :3] = T[:3, :3] @ M.T
        return T

    changes = {"sensor_to_world": pose_in_axes(result.sensor_to_world), "axes": axes}
    if result.sensor_to_world_end is not None:
        changes["sensor_to_world_end"] = pose_in_axes(result.sensor_to_world_end)
    extra = dict(result.extra)
    for name in ("xyz_deskewed", "xyz_noisy_deskewed", "xyz_sensor", "xyz_noisy_sensor"):  # sensor frame
        if name in extra:
            extra[name] = (extra[name].astype(np.float64) @ M.T).astype(np.float32)
    changes["extra"] = extra
    if result.frame_of_reference == "sensor":
        for name in ("xyz", "xyz_noisy", "normal"):
            changes[name] = getattr(result, name).astype(np.float64) @ M.T
    return dataclasses.replace(result, **changes)


def quaternion_xyzw(R: np.ndarray) -> tuple[float, float, float, float]:
    """(x, y, z, w) unit quaternion of a (3, 3) rotation matrix (w >= 0)."""
    R = np.asarray(R, dtype=np.float64)
    t = np.trace(R)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        v = [0.0, 0.0, 0.0]
        v[i] = 0.25 * s
        v[j] = (R[j, i] + R[i, j]) / s
        v[k] = (R[k, i] + R[i, k]) / s
        q = (*v, (R[k, j] - R[j, k]) / s)
    q = np.asarray(q) / np.linalg.norm(q)
    if q[3] < 0:
        q = -q
    return tuple(float(v) for v in q)


def rotation_vector(R: np.ndarray) -> np.ndarray:
    """(3,) axis x angle (rad) of a rotation matrix (its logarithm)."""
    R = np.asarray(R, dtype=np.float64)
    angle = float(np.arccos(np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0)))
    if angle < 1e-12:
        return np.zeros(3)
    axis = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    n = np.linalg.norm(axis)
    if n < 1e-12:  # angle ~ pi: the axis from the symmetric part
        w, v = np.linalg.eigh((R + R.T) / 2.0)
        axis = v[:, int(np.argmax(w))]
        n = 1.0
    return axis / n * angle
