"""Intensity models (docs/physics.md, "Intensity models"): stage 6 of the return physics
(:mod:`.returns`). Owns what a detected return's ``intensity`` is.

- ``lambert``: seed 002 section II-D, Eq. 4, ``R0 cos(theta)`` (summed over the beam's
  footprint: ``Returns.energy``), what the single-return model gave. Range does not
  enter: it is a calibrated reflectivity, like Velodyne's reflectivity byte and Ouster's
  REFLECTIVITY channel.
- ``radar``: the received power of the laser radar equation for an extended Lambertian
  target as HELIOS++ implements it (M. Winiwarter, A. M. Esmoris Pena, H. Weiser,
  K. Anders, J. Martinez Sanchez, M. Searle, B. Hoefle, "Virtual laser scanning with
  HELIOS++: A novel take on ray tracing-based simulation of topographic full-waveform 3D
  laser scanning", Remote Sensing of Environment 269, 2022; the form of Carlsson et al.
  2001): ``P_R = P_T D_r^2 eta_sys eta_atm sigma / (4 pi R^4 B_t^2)`` with the
  cross-section of an extended Lambertian target ``sigma = pi R^2 B_t^2 rho cos(theta)``,
  i.e. ``P_R = P_T D_r^2 eta_sys eta_atm rho cos(theta) / (4 R^2)``: proportional to
  ``rho cos(theta) / R^2`` times the atmosphere's two-way transmission ``eta_atm``.
  BlenSor normalises it to the power of a 100 % Lambertian target at normal incidence at
  :data:`REFERENCE_RANGE` in clear air::

      intensity = rho cos(theta) T (r_ref / r)^2 = energy (r_ref / r)^2

  (``energy`` already holds ``rho cos theta`` over the footprint, the glass paths'
  transmission and the atmosphere's ``T``, :mod:`.weather`), clipped to
  ``[0, max_intensity(device)]``.

Device units (what the writers make of it; ``device`` is ``Capabilities.device``):

- Ouster: ``radar`` stands for SIGNAL (photons, range dependent); the writers put
  ``round(100 x intensity)`` in the 16-bit ``signal`` field, so the clip is 655.35 (65535
  photons). REFLECTIVITY stays the calibrated ``round(100 x reflectivity)``.
- Velodyne: the packets and velodyne_pointcloud's ``intensity`` carry the calibrated,
  range-compensated reflectivity byte (:func:`~blensor_addon.io.packets.velodyne.
  velodyne_reflectivity_byte`, from ``reflectivity``), whatever the intensity model; the
  float ``intensity`` of npz/PCD/LAS is the model's, clipped to 1 (LAS and the 8-bit
  layouts scale 0..1).
- generic sensors: clipped to 1 as Velodyne's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from ..ndtypes import F64, Floating
from ..settings import SensorSettings, setting_value
from .returns import Returns

if TYPE_CHECKING:
    from ..capabilities import Device

#: range (m) at which a 100 % Lambertian target at normal incidence in clear air gives
#: ``radar`` intensity 1
REFERENCE_RANGE = 10.0
#: largest ``radar`` intensity for an Ouster (its 16-bit SIGNAL: 65535 / 100)
OUSTER_MAX_INTENSITY = 655.35


def max_intensity(device: Device | None) -> float:
    """The clip of ``radar`` intensity for ``device`` (a :class:`~..capabilities.Device`
    or None): :data:`OUSTER_MAX_INTENSITY` for an Ouster, else 1.0."""
    return OUSTER_MAX_INTENSITY if device is not None and device.vendor == "ouster" else 1.0


def radar_power(energy: Floating, r: Floating, r_ref: float = REFERENCE_RANGE) -> F64:
    """(K,) float64: the laser radar equation's received power, normalised:
    ``energy (r_ref / r)^2`` for ``energy`` (K,) = rho cos(theta) T over the footprint and
    ranges ``r`` (K,) m (module docstring); 0 where ``r`` is not positive."""
    e = np.asarray(energy, dtype=np.float64)
    rr = np.asarray(r, dtype=np.float64)
    out = np.zeros(e.shape[0])
    ok = rr > 0.0
    out[ok] = e[ok] * (r_ref / rr[ok]) ** 2
    return out


def intensity(s: SensorSettings, ret: Returns, r: Floating, device: Device | None = None) -> F64:
    """(K,) float64 intensity of the detected returns ``ret`` at their ranges ``r`` (K,)
    float64 m under ``s.intensity_model``; ``device``: the sensor's
    :class:`~..capabilities.Device` (or None) for the output units. ``lambert``:
    ``ret.energy`` itself (R0 cos theta summed over the footprint, seed 002 Eq. 4; the
    single-return model's values, byte for byte). ``radar``: :func:`radar_power` clipped to
    ``[0, max_intensity(device)]`` (module docstring).

    Raises ValueError for an unknown model (the settings' choices refuse it first)."""
    model = setting_value(s, "intensity_model")
    if model == "lambert":
        return ret.energy
    if model == "radar":
        return cast(F64, np.clip(radar_power(ret.energy, r), 0.0, max_intensity(device)))
    raise ValueError(f"intensity_model: unknown model {model!r}")


def received_power(intensity_values: Floating, r: Floating, model: str = "lambert") -> F64:
    """(K,) float64 relative received power of K returns from their ``intensity`` (K,)
    under ``model`` and their ranges ``r`` (K,) m: ``lambert`` intensity (energy) / r^2,
    ``radar`` intensity itself (already the power, up to its clip): the order in which a
    receiver ranks a beam's returns ("strongest"), for consumers that only have a result's
    fields (the packet writers, :func:`blensor_addon.io.packets.strongest_per_beam`), the
    same order as :func:`~.beam.power` while ``radar`` is below its clip."""
    v = np.asarray(intensity_values, dtype=np.float64)
    if model == "radar":
        return v
    rr = np.maximum(np.asarray(r, dtype=np.float64), 1e-9)
    return cast(F64, v / (rr * rr))
