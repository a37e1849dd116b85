"""Pose text: the TUM RGB-D trajectory layout, and the clean-up of every pose written as text.

``t tx ty tz qx qy qz qw``: t in s, position in m, unit quaternion (w >= 0) of the
pose's rotation; 9 decimals. Written by range scans (``trajectory.tum``) and the motion
export (``tum/<object>.tum``). :func:`zero_noise` sets values that are zero within
float64 to exactly 0 (KITTI's ``poses.txt`` uses it too), so no file holds float noise
such as ``2.8e-46`` or ``-0.000000000``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ..core.axes import quaternion_xyzw

if TYPE_CHECKING:
    from ..core.ndtypes import F64

#: a value is zero within float64 when it is below this fraction of its scale: a
#: rotation entry's scale is 1, a translation's the larger of 1 m and the pose's largest
#: translation component. float64's epsilon is 2.2e-16 and the products of a few poses
#: (KITTI's ``T0^-1 T``) err by a few epsilon, so 1e-12 (4500 epsilon) catches that noise;
#: a real rotation entry of 1e-12 is a turn of 1e-12 rad (1 pm at 1 km), and float32
#: rounding of Blender's matrices (1e-7 relative) is far above it and is kept
ZERO_TOLERANCE = 1e-12


def zero_noise(T: ArrayLike) -> F64:
    """A copy of the pose ``T`` ((3, 4) or (4, 4), rotation in ``[:3, :3]``, translation
    in m in ``[:3, 3]``) as float64, with the values that are zero within float64 (see
    :data:`ZERO_TOLERANCE`) set to 0.0, and -0.0 to 0.0."""
    T = np.array(T, dtype=np.float64)
    R, t = T[:3, :3], T[:3, 3]
    R[np.abs(R) < ZERO_TOLERANCE] = 0.0
    scale = max(1.0, float(np.max(np.abs(t)))) if np.isfinite(t).all() else 1.0
    t[np.abs(t) < ZERO_TOLERANCE * scale] = 0.0
    return T + 0.0  # -0.0 + 0.0 = 0.0


def clean_value(v: float, scale: float = 1.0) -> float:
    """``v`` as float, 0.0 if zero within float64 relative to ``scale`` (see
    :data:`ZERO_TOLERANCE`; -0.0 becomes 0.0)."""
    v = float(v)
    return 0.0 if abs(v) < ZERO_TOLERANCE * max(1.0, abs(scale)) else v + 0.0


def fixed(v: float, decimals: int = 9) -> str:
    """``v`` with ``decimals`` decimals; a value that rounds to zero is written
    without a minus sign."""
    text = f"{v:.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def tum_line(t: float, T: ArrayLike) -> str:
    """One TUM line (with its newline) of the pose ``T`` ((4, 4) float64 rigid pose,
    rotation without scale; position in m) at time ``t`` (s); values zero within
    float64 are written as 0 (:func:`zero_noise`), never as ``-0.000000000``."""
    T = zero_noise(T)
    q = [clean_value(v) for v in quaternion_xyzw(T[:3, :3])]
    return " ".join(fixed(v) for v in (t, T[0, 3], T[1, 3], T[2, 3], *q)) + "\n"


def tum_bytes(poses: Iterable[tuple[float, ArrayLike]]) -> bytes:
    """TUM text of ``poses``: an iterable of (t, T) as :func:`tum_line` takes them."""
    return "".join(tum_line(t, T) for t, T in poses).encode()
