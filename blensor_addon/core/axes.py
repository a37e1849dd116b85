"""Axis conventions and rotations: BlenSor's sensor frame and ROS REP-103, a result
converted between them (:func:`to_axes`), and the add-on's one matrix-to-quaternion
routine (:func:`matrix_to_quat`) with the rotation vector of a matrix, the add-on's one
roll-pitch-yaw pair (:func:`rpy_matrix`, :func:`matrix_rpy`) and the NED/FRD <-> REP-103
flip (:data:`NED_FROM_ROS`).

BlenSor's sensor frame is the camera's (kept from the original, reference section 2):
+X right, +Y up, looking down -Z. REP-103 (ROS; KITTI's LiDAR frame too): x forward,
y left, z up. A point p in BlenSor's sensor frame is ``ROS_FROM_BLENSOR @ p`` in REP-103:
``x = -z, y = -x, z = y``. World coordinates need no change: Blender's world is
right-handed and Z-up, as REP-103's ENU world frames.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .errors import SettingsError
from .ndtypes import F64, Array, Floating

if TYPE_CHECKING:
    from .result import ScanResult

AXES = ("blensor", "ros")
#: (3, 3) rotation taking BlenSor sensor-frame vectors to REP-103 sensor-frame vectors
ROS_FROM_BLENSOR = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

#: (3, 3) NED / FRD (x ahead, y right, z down: Project AirSim's frames, seed 003 "Lidar
#: sensor settings"; aerospace body axes) <-> REP-103 (x ahead, y left, z up); its own
#: inverse: ``v_ned = NED_FROM_ROS @ v_ros``, ``R_ned = NED_FROM_ROS @ R_ros @ NED_FROM_ROS``
NED_FROM_ROS = np.diag([1.0, -1.0, -1.0])


def rpy_matrix(roll: float, pitch: float, yaw: float) -> F64:
    """(3, 3) float64 rotation ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)`` of roll, pitch, yaw
    (rad): roll about x, then pitch about y, then yaw about z, all about the fixed parent
    axes (REP-103 and URDF/SDF ``rpy``; the aerospace yaw-pitch-roll of a body, so the
    same formula in NED/FRD axes is Project AirSim's ``ToQuaternion(roll, pitch, yaw)``).
    The one implementation of the add-on (rosbag2's ``base_to_sensor``, the config
    formats' poses, the rosette's ``scan_orientation``): the product of the three
    elementary matrices, so a pose and the bytes written from it do not depend on who
    computes it."""
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch),
                              math.cos(yaw), math.sin(yaw))
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return cast(F64, rz @ ry @ rx)


def matrix_rpy(R: Floating) -> tuple[float, float, float]:
    """(roll, pitch, yaw) rad of a (3, 3) rotation, :func:`rpy_matrix`'s inverse: pitch
    ``atan2(-R[2,0], hypot(R[0,0], R[1,0]))`` in [-pi/2, pi/2], roll and yaw in (-pi, pi];
    at gimbal lock (``hypot(R[0,0], R[1,0]) < 1e-12``: pitch +-pi/2, where roll and yaw
    turn about one axis) roll is 0 and yaw carries the turn."""
    R = np.asarray(R, dtype=np.float64)
    c = math.hypot(R[0, 0], R[1, 0])
    pitch = math.atan2(-R[2, 0], c)
    if c < 1e-12:
        return 0.0, pitch, math.atan2(-R[0, 1], R[1, 1])
    return math.atan2(R[2, 1], R[2, 2]), pitch, math.atan2(R[1, 0], R[0, 0])


def blensor_from_frd(v: Array) -> Array:
    """(N, 3) vectors in FRD axes (x ahead, y right, z down) -> BlenSor's sensor frame
    (x right, y up, -z ahead): ``ROS_FROM_BLENSOR.T @ NED_FROM_ROS @ v``, written as the
    permutation it is (``(y, -z, -x)``: no products, so a zero keeps its sign)."""
    v = np.asarray(v)
    return np.stack([v[:, 1], -v[:, 2], -v[:, 0]], axis=1)


def check_axes(axes: str) -> str:
    """Raise SettingsError (``axes``) unless one of :data:`AXES`."""
    if axes not in AXES:
        raise SettingsError("axes", "one of " + ", ".join(AXES), axes)
    return axes


def ros_pose(sensor_to_world: Floating) -> F64:
    """(4, 4) float64 pose of the REP-103 sensor frame in the world (the rotation
    composed with ``ROS_FROM_BLENSOR^T``; same origin)."""
    T = np.array(sensor_to_world, dtype=np.float64)
    T[:3, :3] = T[:3, :3] @ ROS_FROM_BLENSOR.T
    return T


def ros_sensor_pose(result: ScanResult) -> F64:
    """(4, 4) float64 pose of ``result``'s REP-103 sensor frame in the world, whatever
    axes the result is in."""
    return ros_pose(result.sensor_to_world) if result.axes == "blensor" else np.array(result.sensor_to_world,
                                                                                       dtype=np.float64)


def sensor_points(result: ScanResult, noisy: bool = False, axes: str = "ros") -> F64:
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
    return cast(F64, xyz @ M.T)


def to_axes(result: ScanResult, axes: str) -> ScanResult:
    """``result`` with sensor-frame points and normals, and the pose, in ``axes``
    (a new ScanResult; the same one if already there). World-frame points and normals
    stay as they are; ``sensor_to_world`` then describes the frame in ``axes``."""
    check_axes(axes)
    if result.axes == axes:
        return result
    M = ROS_FROM_BLENSOR if axes == "ros" else ROS_FROM_BLENSOR.T

    def pose_in_axes(pose: Floating) -> F64:  # the sensor frame's axes rotated, its position kept
        T = np.array(pose, dtype=np.float64)
        T[:3, :3] = T[:3, :3] @ M.T
        return T

    changes: dict[str, Any] = {"sensor_to_world": pose_in_axes(result.sensor_to_world), "axes": axes}
    if result.sensor_to_world_end is not None:
        changes["sensor_to_world_end"] = pose_in_axes(result.sensor_to_world_end)
    extra = dict(result.extra)
    for name in ("xyz_deskewed", "xyz_noisy_deskewed", "xyz_sensor", "xyz_noisy_sensor"):  # sensor frame
        if name in extra:
            extra[name] = axes_product(extra[name], M)
    changes["extra"] = extra
    if result.frame_of_reference == "sensor":
        for name in ("xyz", "xyz_noisy", "normal"):
            changes[name] = axes_product(getattr(result, name), M)
    return dataclasses.replace(result, **changes)


def axes_product(v: Array, M: F64) -> Array:
    """``(v @ M.T)`` of (N, 3) rows ``v`` and an axes matrix ``M`` (3, 3) (one entry of
    +-1 in each row, zeros elsewhere: :data:`ROS_FROM_BLENSOR` or its transpose), as
    float32: the float64 product rounded to float32, bit for bit, without it. Each
    product with a +-1 or a 0 is exact and each sum has at most one term that is not
    zero, so an output column is an input column times +-1, its zeros +0.0 (the float64
    product, numpy's BLAS, sums a zero and zeros to +0.0; tests/test_axes_product.py
    checks every sign of zero). Rows ``v`` that are not all finite (``0 * inf`` is NaN)
    take the float64 product itself. A float64 ``v`` is rounded to float32 first, as a
    :class:`~.result.ScanResult` holds it."""
    v32 = np.asarray(v, dtype=np.float32)
    j = np.argmax(np.abs(M), axis=1)
    sign = M[np.arange(3), j]
    if v32.ndim != 2 or v32.shape[1] != 3 or not (np.count_nonzero(M, axis=1) == 1).all() \
            or not np.isin(sign, (-1.0, 1.0)).all() or not np.isfinite(v32).all():
        return (v32.astype(np.float64) @ M.T).astype(np.float32)
    out = np.empty(v32.shape, np.float32)
    for i in range(3):
        col = out[:, i]
        np.multiply(v32[:, j[i]], np.float32(sign[i]), out=col)
        col += np.float32(0.0)  # -0.0 -> +0.0, as the float64 product's sum of zeros
    return out


def matrix_to_quat(R: Floating) -> F64:
    """Unit quaternions of rotation matrices by Shepperd's method (the largest of
    ``w, x, y, z`` is taken from the diagonal, the others from off-diagonal sums, so no
    division by a small number). The one matrix-to-quaternion routine of the add-on: the
    instance motion records (:mod:`blensor_addon.raycast.motion`) and every pose written
    to a file (:func:`quaternion_xyzw`) use it.

    Args:
        R: (..., 3, 3) float64 proper rotation matrices.
    Returns:
        (..., 4) float64 unit quaternions ``(w, x, y, z)`` with ``w >= 0``.
    """
    R = np.asarray(R, dtype=np.float64)
    shape = R.shape[:-2]
    R = R.reshape(-1, 3, 3)
    r00, r11, r22 = R[:, 0, 0], R[:, 1, 1], R[:, 2, 2]
    tr = r00 + r11 + r22
    pick = np.argmax(np.stack([tr, r00, r11, r22], 1), axis=1)
    q = np.empty((R.shape[0], 4))
    with np.errstate(invalid="ignore", divide="ignore"):
        c = [0.5 * np.sqrt(np.maximum(v, 0.0)) for v in
             (1.0 + tr, 1.0 + r00 - r11 - r22, 1.0 - r00 + r11 - r22, 1.0 - r00 - r11 + r22)]
        d21, d02, d10 = R[:, 2, 1] - R[:, 1, 2], R[:, 0, 2] - R[:, 2, 0], R[:, 1, 0] - R[:, 0, 1]
        s01, s02, s12 = R[:, 0, 1] + R[:, 1, 0], R[:, 0, 2] + R[:, 2, 0], R[:, 1, 2] + R[:, 2, 1]
        cases = [
            (c[0], d21 / (4 * c[0]), d02 / (4 * c[0]), d10 / (4 * c[0])),
            (d21 / (4 * c[1]), c[1], s01 / (4 * c[1]), s02 / (4 * c[1])),
            (d02 / (4 * c[2]), s01 / (4 * c[2]), c[2], s12 / (4 * c[2])),
            (d10 / (4 * c[3]), s02 / (4 * c[3]), s12 / (4 * c[3]), c[3]),
        ]
    for k, comps in enumerate(cases):
        sel = pick == k
        for j in range(4):
            q[sel, j] = comps[j][sel]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q *= np.where(q[:, :1] < 0, -1.0, 1.0)
    return q.reshape(shape + (4,))


#: quaternion components below this magnitude are rounding noise of a unit quaternion
#: (a few float64 epsilons) and are written as exactly 0
QUATERNION_ZERO = 4 * np.finfo(np.float64).eps


def quaternion_xyzw(R: Floating) -> tuple[float, float, float, float]:
    """(x, y, z, w) unit quaternion of a (3, 3) rotation matrix (w >= 0), as TUM
    trajectories, PCD's VIEWPOINT and ROS messages order it (:func:`matrix_to_quat`);
    a component that is zero within float64 (:data:`QUATERNION_ZERO`) is exactly 0, so a
    file shows neither ``-0.000000000`` nor ``1e-22``."""
    w, x, y, z = (0.0 if abs(v) < QUATERNION_ZERO else float(v) for v in matrix_to_quat(R))
    return x, y, z, w


def rotation_vector(R: Floating) -> F64:
    """(3,) axis x angle (rad) of a rotation matrix (its logarithm)."""
    R = np.asarray(R, dtype=np.float64)
    angle = float(np.arccos(np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0)))
    if angle < 1e-12:
        return np.zeros(3)
    axis = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    n: float | np.floating[Any] = np.linalg.norm(axis)
    if n < 1e-12:  # angle ~ pi: the axis from the symmetric part
        w, v = np.linalg.eigh((R + R.T) / 2.0)
        axis = v[:, int(np.argmax(w))]
        n = 1.0
    return cast(F64, axis / n * angle)
