"""What a real unit reports of a return: its reflectivity and intensity bytes (numpy only).

Under the radiometric return model a result carries ``extra["signal"]``, the received power
of each return in relative units: 1.0 for a 100 % Lambertian target at normal incidence at
1 m in clear air, so ``rho cos(theta) / r^2`` for a Lambertian target of reflectivity rho at
incidence theta and range r, times the two-way atmospheric transmission and the near-range
overlap (docs/physics.md, "Signal chain"; the lidar equation of an extended Lambertian
target, ``../shared/seeds/002``, the physical LiDAR model with material reflectance). From
it, each unit's bytes (docs/physics.md, "What each unit reports"):

- **range-compensated reflectivity** (:func:`unit_reflectivity`): ``signal x r^2``, which
  is ``rho cos(theta)`` of a Lambertian target in clear air: what the units' calibrated
  reflectivity modes measure ("independent of laser power and distance", Velodyne VLP-16
  User Manual 63-9243 Rev. E, section 6.1 "Calibrated Reflectivity"; Ouster's "scales
  measured signal photons by range and sensor sensitivity", Ouster firmware user manual,
  "Calibrated Reflectivity"), so incidence shows: a floor at 80 deg reads 17 for a 100 %
  target. r is the return's true range (the unit divides by its measured range; the
  difference, 2 sigma / r, is below the bytes' 1 % step from 2 m on), so the clean and the
  noisy clouds carry one byte.
- **Velodyne** (:func:`velodyne_full_scale`): the calibrated reflectivity byte, diffuse
  0-100 % as 0-100, retro-reflectors 101-255 (VLP-16 63-9243 Rev. E section 6.1; the
  HDL-32E's since its firmware 2.0, "HDL32E Software Version 2.0 Description"; VLP-32C
  63-9325 alike), the VLS-128's diffuse 0-100 % as 0-110, retro-reflectors 111-255 (VLS-128
  User Manual, section 6.1 "Calibrated Reflectivity"); the HDL-64E S2's byte is written on
  the VLP-16's scale (its manual defines a raw intensity that its per-laser calibration
  corrects, which BlenSor does not model).
- **Ouster**: REFLECTIVITY the range-compensated reflectivity on the calibrated scale, 0-100
  for Lambertian targets of 0-100 % (:func:`~.ouster.ouster_reflectivity`); SIGNAL the
  signal photons, :func:`ouster_signal_photons` (``signal x`` :data:`OUSTER_PHOTONS_AT_1M`,
  a per-unit scale derived from the datasheet's weakest return, falling as 1 / r^2); NEAR_IR
  the ambient photons of ``extra["near_ir"]`` where a result has them (the ambient light
  model's hook), else 0 (night, no ambient model).
- **Hesai** (:func:`hesai_reflectivity_byte`): the Reflectivity byte, "0 to 255", whose
  default Linear Mapping "linearly represents target reflectivity (0 to 255%)" (Hesai
  Pandar64 User Manual 640-en-240410, section 3.1.2.2 "Body" and Appendix D "Nonlinear
  reflectivity mapping"; PandarXT-32 User Manual, section 3.1.2 "Body": "Reflectivity, in
  percentage (0 to 255%)"): ``round(100 x`` the range-compensated reflectivity ``)``.

A result without ``signal`` (the ``limit`` and ``linear`` return models) keeps the bytes
written before: every function here gives back the material reflectivity
(``result.reflectivity``) in place of the range-compensated one, and the encoders'
SIGNAL stays ``round(100 x intensity)`` (:func:`~.ouster.ouster_signal`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from ...core.ndtypes import F32, U8, U16
    from ...core.result import ScanResult

#: the per-return field of received power (relative units, module docstring)
SIGNAL = "signal"
#: the per-return field of ambient photons the ambient light model adds (NEAR_IR); absent: 0
NEAR_IR = "near_ir"

#: Velodyne: the byte of a 100 % diffuse target in the calibrated reflectivity mode, by
#: ``Device.model``; every other model 100 (module docstring)
VELODYNE_DIFFUSE_FULL_SCALE = {"VLS-128": 110.0}

#: the lowest signal-to-noise ratio of the OS1 datasheet's range repeatability (+-10 cm at SNR 12;
#: the first OS1 datasheet, "Optical performance", as core/tables/radiometry.json's ``os1_64``
#: entry cites it; the rev06 OS0, OS1-128 and OS2 entries derive it from the OS1-64)
OUSTER_WEAKEST_SNR = 12.0
#: each Ouster model's weakest published return: (reflectivity, range m) of its datasheet's
#: lowest reflectivity at > 90 % detection (or the figure without a probability), as
#: core/tables/radiometry.json holds it (OS0-128 rev06 15 m, OS1-64 first datasheet 40 m,
#: OS1-128 rev06 45 m, OS2-128 rev06 80 m, all at 10 %)
OUSTER_WEAKEST_RETURN = {"OS0-128": (0.1, 15.0), "OS1-64": (0.1, 40.0), "OS1-128": (0.1, 45.0),
                         "OS2-128": (0.1, 80.0)}


def _photons_at_1m(reflectivity: float, range_m: float) -> float:
    return OUSTER_WEAKEST_SNR ** 2 * range_m ** 2 / reflectivity


#: Ouster signal photons of a 100 % Lambertian target at normal incidence at 1 m (``signal``
#: 1.0), by ``Device.model``. DERIVED (no photon count is published): a photon-counting receiver
#: limited by the signal's shot noise has SNR = sqrt(N), so the weakest return a datasheet names
#: (:data:`OUSTER_WEAKEST_RETURN`, read at :data:`OUSTER_WEAKEST_SNR`) holds N = 12^2 = 144
#: photons: ``144 r^2 / rho`` at 1 m (OS1-64: 144 x 40^2 / 0.1 = 2,304,000)
OUSTER_PHOTONS_AT_1M = {model: _photons_at_1m(*fig) for model, fig in OUSTER_WEAKEST_RETURN.items()}


def has_signal(result: ScanResult) -> bool:
    """The result carries ``extra["signal"]`` (the radiometric return model)."""
    return SIGNAL in result.extra


def compensated_reflectivity(signal: ArrayLike, range_m: ArrayLike) -> F32:
    """(N,) float32: range-compensated reflectivity ``signal x r^2`` (1 = a 100 % Lambertian
    target at normal incidence in clear air; ``rho cos(theta)`` of a Lambertian target) of
    received powers ``signal`` (N,) (relative, module docstring) at ranges ``range_m`` (N,)
    m, computed in float64."""
    s = np.asarray(signal, dtype=np.float64)
    r = np.asarray(range_m, dtype=np.float64)
    out: F32 = (s * r * r).astype(np.float32)
    return out


def unit_reflectivity(result: ScanResult) -> F32:
    """(N,) float32: the reflectivity a unit's calibrated mode reports of each return, 1 =
    100 % diffuse: :func:`compensated_reflectivity` of ``extra["signal"]`` at the true
    ``range`` where the result has ``signal`` (a bloom return, ``extra["bloom"]`` set, at
    its measured ``range_noisy``: its power and range are the retroreflector's echo, not its
    own surface's), else ``result.reflectivity`` itself (the material's, as written before
    the radiometric model)."""
    signal = result.extra.get(SIGNAL)
    if signal is None:
        return result.reflectivity
    r = result.range
    bloomed = result.extra.get("bloom")
    if bloomed is not None and bloomed.any():
        r = np.where(np.asarray(bloomed) > 0, result.range_noisy, r)
    return compensated_reflectivity(signal, r)


def velodyne_full_scale(model: str, radiometric: bool) -> float:
    """The calibrated reflectivity byte of a 100 % diffuse target of Velodyne ``model``:
    :data:`VELODYNE_DIFFUSE_FULL_SCALE` (VLS-128 110) under the radiometric model
    (``radiometric``), else 100 (the scale of every model before it, kept byte for byte)."""
    return VELODYNE_DIFFUSE_FULL_SCALE.get(model, 100.0) if radiometric else 100.0


def hesai_reflectivity_byte(reflectivity: ArrayLike) -> U8:
    """(N,) uint8: Hesai's Reflectivity byte (default Linear Mapping, module docstring) of
    reflectivities ``reflectivity`` (N,) float (1 = 100 %): ``round(100 x reflectivity)``
    clipped to 0..255."""
    r = np.asarray(reflectivity, dtype=np.float64)
    byte: U8 = np.clip(np.round(r * 100.0), 0, 255).astype(np.uint8)
    return byte


def ouster_photon_scale(model: str) -> float:
    """Signal photons of ``signal`` 1.0 for Ouster ``model`` (``OS0-128``, ``OS1-64``, ...):
    :data:`OUSTER_PHOTONS_AT_1M` of the model, else of the first model of its line (``OS0``,
    ``OS1``, ``OS2``: an imported unit of another beam count), else the OS1-64's."""
    if model in OUSTER_PHOTONS_AT_1M:
        return OUSTER_PHOTONS_AT_1M[model]
    line = [v for k, v in OUSTER_PHOTONS_AT_1M.items() if k[:3] == model[:3]]
    return line[0] if line else OUSTER_PHOTONS_AT_1M["OS1-64"]


def ouster_signal_photons(signal: ArrayLike, model: str) -> U16:
    """(N,) uint16: Ouster's SIGNAL (photons) of received powers ``signal`` (N,) (relative,
    module docstring): ``round(signal x`` :func:`ouster_photon_scale` ``)`` clipped to
    0..65535 (the field's 16 bits: a bright target near the unit saturates)."""
    s = np.asarray(signal, dtype=np.float64)
    photons: U16 = np.clip(np.round(s * ouster_photon_scale(model)), 0, 0xFFFF).astype(np.uint16)
    return photons


def ouster_near_ir(near_ir: ArrayLike | None, n: int) -> U16:
    """(n,) uint16: Ouster's NEAR_IR (ambient photons) of per-return ambient photon counts
    ``near_ir`` (n,) (the ambient light model's ``extra["near_ir"]``), rounded and clipped to
    0..65535; zeros for None (no ambient light model: a night scene)."""
    if near_ir is None:
        return np.zeros(n, dtype=np.uint16)
    v = np.asarray(near_ir, dtype=np.float64)
    out: U16 = np.clip(np.round(v), 0, 0xFFFF).astype(np.uint16)
    return out


__all__ = ["SIGNAL", "NEAR_IR", "VELODYNE_DIFFUSE_FULL_SCALE", "OUSTER_WEAKEST_SNR", "OUSTER_WEAKEST_RETURN",
           "OUSTER_PHOTONS_AT_1M", "has_signal",
           "compensated_reflectivity", "unit_reflectivity", "velodyne_full_scale", "hesai_reflectivity_byte",
           "ouster_photon_scale", "ouster_signal_photons", "ouster_near_ir"]
