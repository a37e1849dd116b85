"""Instance motion within one time step: the interpolation the native library and the
BVHTree fallback share (numpy only, float64).

Within a step an instance moves from its object-to-world transform ``M0`` (step start,
``s = 0``) to ``M1`` (step end, ``s = 1``). At fraction ``s`` its transform is

* translation ``t = (1 - s) t0 + s t1``,
* rotation ``q = slerp(q0, q1, s)`` (unit quaternions, shortest arc; normalized lerp when
  the angle between them is below :data:`LERP_ANGLE`),
* the rest ``U = (1 - s) U0 + s U1``, ``A = R(q) U``,

where ``M[:3, :3] = R(q) U`` is the QR factorization of the 3x3 part (``U`` upper
triangular: scale and shear). Rigid motion is therefore exact (a turning car is not
shrunk as a linear blend of matrices would), and no mesh has to be rebuilt.

A motion record is one row of 32 float64: ``[t0(3), t1(3), q0(4), q1(4), U0(9), U1(9)]``
(quaternions ``(w, x, y, z)``, ``U`` row-major), the layout
``brt_scene_create_motion`` of the native library reads (native_patch/src/blensor_rt.h).
Quaternions of matrices come from the add-on's one routine,
:func:`blensor_addon.core.axes.matrix_to_quat`.
"""
from __future__ import annotations

import numpy as np

from ..core.axes import matrix_to_quat
from ..core.ndtypes import F64, Array, Bool

#: Quaternion angle (rad) below which slerp is replaced by a normalized lerp (as in C).
LERP_ANGLE = 1e-6
#: |det| at or below which a 3x3 part counts as singular (the native library's test).
MIN_DET = 1e-30
RECORD_SIZE = 32


def quat_to_matrix(q: Array) -> F64:
    """Rotation matrices of quaternions.

    Args:
        q: (..., 4) float64 ``(w, x, y, z)``, any nonzero length (divided by ``|q|^2``).
    Returns:
        (..., 3, 3) float64 rotation matrices.
    """
    q = np.asarray(q, dtype=np.float64)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    s = 2.0 / (w * w + x * x + y * y + z * z)
    R = np.empty(q.shape[:-1] + (3, 3))
    R[..., 0, 0] = 1.0 - s * (y * y + z * z)
    R[..., 0, 1] = s * (x * y - w * z)
    R[..., 0, 2] = s * (x * z + w * y)
    R[..., 1, 0] = s * (x * y + w * z)
    R[..., 1, 1] = 1.0 - s * (x * x + z * z)
    R[..., 1, 2] = s * (y * z - w * x)
    R[..., 2, 0] = s * (x * z - w * y)
    R[..., 2, 1] = s * (y * z + w * x)
    R[..., 2, 2] = 1.0 - s * (x * x + y * y)
    return R


def decompose(M: Array) -> tuple[F64, F64, F64]:
    """Split transforms into translation, rotation and an upper-triangular rest.

    ``A = M[:3, :3] = R(q) @ U`` by Gram-Schmidt QR (columns of ``Q`` orthonormal,
    diagonal of ``U`` positive); where ``det(A) < 0`` the third column of ``Q`` and the
    third row of ``U`` change sign, so ``Q`` is a proper rotation (``U[2, 2] < 0``
    then carries the mirroring).

    Args:
        M: (I, 4, 4) (or (4, 4)) object-to-world matrices, row-major; last row ignored.
    Returns:
        t (I, 3) float64 translation [m]; q (I, 4) float64 unit quaternions ``(w, x, y, z)``
        with ``w >= 0``; U (I, 3, 3) float64 upper triangular. Singular or non-finite
        matrices give NaN in q and U (see :func:`motion_records`).
    """
    M = np.asarray(M, dtype=np.float64)
    single = M.ndim == 2
    M = M.reshape(-1, 4, 4)
    A = M[:, :3, :3]
    a0, a1, a2 = A[:, :, 0], A[:, :, 1], A[:, :, 2]
    U = np.zeros((M.shape[0], 3, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        u00 = np.linalg.norm(a0, axis=1)
        q0 = a0 / u00[:, None]
        u01 = (q0 * a1).sum(1)
        v1 = a1 - u01[:, None] * q0
        u11 = np.linalg.norm(v1, axis=1)
        q1 = v1 / u11[:, None]
        u02 = (q0 * a2).sum(1)
        v2 = a2 - u02[:, None] * q0  # modified Gram-Schmidt: project out one at a time
        u12 = (q1 * v2).sum(1)
        v2 = v2 - u12[:, None] * q1
        u22 = np.linalg.norm(v2, axis=1)
        q2 = v2 / u22[:, None]
    Q = np.stack([q0, q1, q2], axis=2)
    U[:, 0, 0], U[:, 0, 1], U[:, 0, 2] = u00, u01, u02
    U[:, 1, 1], U[:, 1, 2] = u11, u12
    U[:, 2, 2] = u22
    mirrored = np.linalg.det(np.where(np.isfinite(A), A, 0.0)) < 0
    Q[mirrored, :, 2] *= -1.0
    U[mirrored, 2, :] *= -1.0
    bad = ~np.isfinite(Q).all(axis=(1, 2))
    Q[bad] = np.eye(3)
    q = matrix_to_quat(Q)
    q[bad] = np.nan
    U[bad] = np.nan
    t = M[:, :3, 3].copy()
    if single:
        return t[0], q[0], U[0]
    return t, q, U


def det3(M: Array) -> F64:
    """(I,) float64 determinant of the 3x3 parts of transforms ``M`` (I, 4, 4) (any
    float dtype), expanded along the first row with the native library's operations in
    its order (``invert_affine`` in ``blensor_rt.c``, compiled without FMA), so both
    give the same bits; non-finite where ``M`` is. Element-wise: no LAPACK call per
    matrix (np.linalg.det took 95 ms for 10^6 transforms)."""
    M = np.asarray(M).reshape(-1, 4, 4)
    a, b, c, d, e, f, g, h, i = (M[:, r, k].astype(np.float64) for r in range(3) for k in range(3))
    with np.errstate(invalid="ignore", over="ignore"):
        det: F64 = a * (e * i - f * h) + b * -(d * i - f * g) + c * (d * h - e * g)
        return det


def regular(M: Array) -> Bool:
    """(I,) bool: transforms (I, 4, 4) that are finite with a finite ``|det M[:3, :3]| >
    1e-30`` (float64, :func:`det3`), i.e. usable to move rays into the object's frame."""
    M = np.asarray(M).reshape(-1, 4, 4)
    finite = np.isfinite(M).all(axis=(1, 2))
    det = det3(M)
    ok: Bool = finite & np.isfinite(det) & (np.abs(det) > MIN_DET)
    return ok


def motion_records(M0: Array, M1: Array) -> tuple[F64, Bool]:
    """Motion records of instances moving from ``M0`` to ``M1`` within the step.

    Args:
        M0, M1: (I, 4, 4) object-to-world matrices at the step start and end (any float
            dtype; evaluated in float64).
    Returns:
        records (I, 32) float64 ``[t0, t1, q0, q1, U0 (row-major), U1]`` with q1's sign
        chosen so that ``dot(q0, q1) >= 0`` (shortest arc); moving (I,) bool: some element
        of M0 differs from M1 (exact comparison) and both are finite and regular
        (:func:`regular`). An instance that is not moving has the record of M0 at both
        ends (so :func:`interpolate` gives M0 at every s), NaN where M0 itself is not
        finite and regular: such an instance stays at M0 (callers drop or bake it as
        before; motion cannot be interpolated through a singular end).
    Raises:
        ValueError: M0 and M1 are not both (I, 4, 4).
    """
    M0 = np.asarray(M0, dtype=np.float64)
    M1 = np.asarray(M1, dtype=np.float64)
    if M0.ndim != 3 or M0.shape[1:] != (4, 4) or M1.shape != M0.shape:
        raise ValueError(f"M0 and M1 must both be (I, 4, 4), got {M0.shape} and {M1.shape}")
    moving = (M0 != M1).any(axis=(1, 2)) & regular(M0) & regular(M1)
    M1 = np.where(moving[:, None, None], M1, M0)
    t0, q0, U0 = decompose(M0)
    t1, q1, U1 = decompose(M1)
    flip = (q0 * q1).sum(1) < 0
    q1[flip] *= -1.0
    n = M0.shape[0]
    rec = np.concatenate([t0, t1, q0, q1, U0.reshape(n, 9), U1.reshape(n, 9)], axis=1)
    return rec, moving


def interpolate(records: Array, s: Array | float) -> F64:
    """Transforms at time fractions ``s`` (the definition the native library follows).

    Args:
        records: (N, 32) or (32,) float64 motion records (:func:`motion_records`).
        s: (N,) or scalar fraction of the step in [0, 1] (not clamped here); records and
            s broadcast against each other.
    Returns:
        (N, 4, 4) float64 object-to-world matrices (last row 0 0 0 1).
    """
    rec = np.asarray(records, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    rec, s = np.broadcast_arrays(rec.reshape(-1, RECORD_SIZE), s.reshape(-1)[:, None])
    s = s[:, 0]
    t0, t1 = rec[:, 0:3], rec[:, 3:6]
    q0, q1 = rec[:, 6:10], rec[:, 10:14].copy()
    U0, U1 = rec[:, 14:23].reshape(-1, 3, 3), rec[:, 23:32].reshape(-1, 3, 3)
    q0 = q0 / np.linalg.norm(q0, axis=1, keepdims=True)
    q1 = q1 / np.linalg.norm(q1, axis=1, keepdims=True)
    dot = (q0 * q1).sum(1)
    q1[dot < 0] *= -1.0
    theta = np.arccos(np.clip(np.abs(dot), -1.0, 1.0))
    lerp = theta < LERP_ANGLE
    with np.errstate(invalid="ignore", divide="ignore"):
        inv_sin = np.where(lerp, 0.0, 1.0 / np.sin(theta))
        w0 = np.where(lerp, 1.0 - s, np.sin((1.0 - s) * theta) * inv_sin)
        w1 = np.where(lerp, s, np.sin(s * theta) * inv_sin)
    q = w0[:, None] * q0 + w1[:, None] * q1
    U = (1.0 - s)[:, None, None] * U0 + s[:, None, None] * U1
    out = np.zeros((rec.shape[0], 4, 4))
    out[:, :3, :3] = quat_to_matrix(q) @ U
    out[:, :3, 3] = (1.0 - s)[:, None] * t0 + s[:, None] * t1
    out[:, 3, 3] = 1.0
    return out


def interpolate_matrices(M0: Array, M1: Array, s: Array | float) -> F64:
    """:func:`interpolate` of :func:`motion_records` ``(M0, M1)`` at ``s``.

    Args:
        M0, M1: (I, 4, 4) start and end transforms; s: (I,) or scalar (or (N,) with I = 1).
    Returns:
        (max(I, N), 4, 4) float64.
    """
    return interpolate(motion_records(M0, M1)[0], s)


def max_speed(records: Array, radius: Array) -> F64:
    """Upper bound of how fast (m per unit s) any point of an instance moves.

    A point p of the mesh (|p| <= radius in object space) is at ``A(s) p + t(s)``; its
    speed is at most ``2 theta max(|U0|_F, |U1|_F) radius + |U1 - U0|_F radius + |t1 - t0|``
    (slerp turns at ``2 theta`` rad per unit s about a fixed axis; the normalized lerp,
    used only below 1e-6 rad, negligibly faster: covered by a factor 1.001).

    Args:
        records: (I, 32) float64; radius: (I,) float64 largest vertex norm (m, object space).
    Returns:
        (I,) float64 m per unit of s (NaN for NaN records).
    """
    rec = np.asarray(records, dtype=np.float64).reshape(-1, RECORD_SIZE)
    q0, q1 = rec[:, 6:10], rec[:, 10:14]
    with np.errstate(invalid="ignore", divide="ignore"):
        dot = np.abs((q0 * q1).sum(1)) / (np.linalg.norm(q0, axis=1) * np.linalg.norm(q1, axis=1))
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    U0, U1 = rec[:, 14:23], rec[:, 23:32]
    umax = np.maximum(np.linalg.norm(U0, axis=1), np.linalg.norm(U1, axis=1))
    du = np.linalg.norm(U1 - U0, axis=1)
    dt = np.linalg.norm(rec[:, 3:6] - rec[:, 0:3], axis=1)
    r = np.asarray(radius, dtype=np.float64)
    speed: F64 = 2.0 * 1.001 * theta * umax * r + du * r + dt
    return speed
