"""Intensity models (issue 22, section 1): seed 002 Eq. 4 (``lambert``) and the laser
radar equation's received power (``radar``) in the device's output units.

CONTRACT STUB: lambert only.
"""
from __future__ import annotations

import numpy as np

from .returns import Returns


def intensity(s, ret: Returns, r: np.ndarray, device=None) -> np.ndarray:
    """(K,) float64 intensity of the detected returns ``ret`` at their ranges ``r`` (K,)
    float64 m under ``s.intensity_model``; ``device``: the sensor's
    :class:`~..capabilities.Device` (or None) for the output units. ``lambert``:
    ``ret.energy`` (R0 cos theta summed over the footprint, seed 002 Eq. 4)."""
    return ret.energy
