"""Trajectories as text: the TUM RGB-D layout, one pose a line.

``t tx ty tz qx qy qz qw``: t in s, position in m, unit quaternion (w >= 0) of the
pose's rotation; 9 decimals. Written by range scans (``trajectory.tum``) and the motion
export (``tum/<object>.tum``).
"""
from __future__ import annotations

import numpy as np

from ..core.axes import quaternion_xyzw


def tum_line(t: float, T) -> str:
    """One TUM line (with its newline) of the pose ``T`` ((4, 4) float64 rigid pose,
    rotation without scale; position in m) at time ``t`` (s)."""
    T = np.asarray(T, dtype=np.float64)
    return (f"{t:.9f} {T[0, 3]:.9f} {T[1, 3]:.9f} {T[2, 3]:.9f} "
            + " ".join(f"{v:.9f}" for v in quaternion_xyzw(T[:3, :3])) + "\n")


def tum_bytes(poses) -> bytes:
    """TUM text of ``poses``: an iterable of (t, T) as :func:`tum_line` takes them."""
    return "".join(tum_line(t, T) for t, T in poses).encode()
