"""The signal chain of ``return_model="radiometric"`` (docs/physics.md, "Signal chain"):
received power, signal-to-noise ratio, detection and range noise of one return, calibrated
per unit from the published figures of ``core/tables/radiometry.json``.

1. **Received power** (the laser radar equation for an extended Lambertian target: seed
   002 section II-D, Eq. 4, ``R0 cos(theta)``, with the range term of
   :func:`~.beam.power`; Winiwarter et al. 2022, Eq. 1, the form of Carlsson et al. 2001)::

       signal = E xi(r) / r^2,     E = sum_j share_j w_j^2 rho_j cos(theta_j) T(r)

   ``E`` is the return's ``energy`` (:class:`~.returns.Returns`: the footprint's sub-rays,
   the glass paths' transmission ``w^2`` and the atmosphere's two-way transmission ``T``
   of :mod:`.weather`). Normalised: a 100 % Lambertian target at normal incidence at 1 m
   in clear air gives 1.0. ``xi`` is the near-range overlap of the receiver
   (:func:`overlap`).
2. **Detection** (Gaussian-noise threshold crossing): the receiver samples signal plus
   noise at the pulse's peak and reports a return when it crosses a threshold ``tau``
   noise standard deviations high. With ``SNR = signal / N(r)`` (``N``: the unit's
   noise-equivalent power, :class:`Calibration`) and a standard normal draw ``z`` per
   return, a return is detected iff ``SNR + z >= tau``, i.e. with probability
   ``P_det = Phi(SNR - tau)``: it rises smoothly through the threshold, so returns near
   the limit drop out at random, as on real units. ``tau`` (:data:`TAU`) follows from a
   false-alarm budget (:data:`FALSE_ALARM_PER_BIN`): ``tau = Phi^-1(1 - P_fa)``.
3. **Calibration** (:func:`calibrate`): every datasheet figure "range R_i at reflectivity
   rho_i with probability p_i" (p_i = 90 % where the datasheet states none) fixes the
   noise-equivalent power at R_i, ``N(R_i) = rho_i xi(R_i) / R_i^2 / (tau + Phi^-1(p_i))``.
   Between the figures' ranges ``ln N`` is interpolated linearly in ``ln r``; outside them
   ``N`` is constant (the fit is trusted between the figures only; beyond them the received
   power's own 1/r^2 decides; one figure: ``N`` constant everywhere). The received power
   stays ``rho cos(theta) / r^2`` (SIGNAL falls as 1/r^2); only the
   threshold depends on range, standing for what a single power law cannot hold (the
   receiver's time-dependent gain and the units' processing): the HDL-64E S2's 50 m at
   10 % and 120 m at 80 % imply ``N ~ r^0.37``. These fitted thresholds are derived
   values, not a datasheet's. A unit without figures (``generic``, or a table without
   the preset) detects a 80 % target at its ``max_range`` with 90 %
   (:data:`~.weather.DETECTION_REFLECTIVITY`, the way the weather module already quotes a
   sensor's range).
4. **Range noise** (:meth:`Calibration.sigma`): the 1-sigma range noise falls with SNR
   down to the unit's floor: interpolated linearly in ``ln SNR`` / ``ln sigma`` through
   the datasheet's (SNR, sigma) figures (OS1: +-1.5 cm at SNR > 250, +-3 cm at SNR 100,
   +-10 cm at SNR 12), constant above the highest SNR, ``~ SNR^-1/2`` below the lowest (the
   shot-noise law the OS1's figures follow: slope -0.57 between SNR 12 and 100). A figure
   quoted at a range and reflectivity gets its SNR from the calibration. A unit whose
   figures give no SNR dependence: ``sigma = max(floor, A / sqrt(SNR))``, ``A``
   (:data:`SNR_NOISE_COEFF`) derived from the OS1 (its +-10 cm at SNR 12). The datasheet's
   "SNR" is read as the quantity thresholded here (signal over the noise's standard
   deviation).

Ambient light: the figures hold at the datasheet's condition (Ouster: 100 klx sunlight);
``noise_ratio`` (the noise variance relative to that condition, 1.0) follows the scene's
sun and sky (:mod:`.ambient`). Glossy coats and retroreflectors enter through ``energy`` (the
cast's ``lobes``: each hit's equivalent reflectance at its incidence, core/materials.py
``lobe_reflectance``); saturation and blooming: :mod:`.bloom`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from ..ndtypes import F64, Bool, Floating

#: the calibration table (one entry per preset name of :mod:`.rotating_presets`)
TABLE_PATH = Path(__file__).resolve().parents[1] / "tables" / "radiometry.json"
SCHEMA = 1
#: range (m) from which the receiver sees the whole beam: Hahner et al. 2021's R_2 (the
#: overlap's end, :data:`~.weather.FOG_R2`)
FULL_OVERLAP_M = 1.0
#: false-alarm probability of one range bin: with about 10^3 bins per shot and 10^6 shots
#: per second (HDL-64E S2: 1.3 M points/s), about one false return in 10 s (a design value,
#: derived, not a datasheet's)
FALSE_ALARM_PER_BIN = 1e-10
#: the detection threshold in noise standard deviations, ``Phi^-1(1 - P_fa)`` (6.36)
TAU = NormalDist().inv_cdf(1.0 - FALSE_ALARM_PER_BIN)
#: detection probability of a datasheet range that states none
DEFAULT_PROBABILITY = 0.9
#: reflectivity detected at ``max_range`` by a unit without figures
FALLBACK_REFLECTIVITY = 0.8
#: A (m) of ``sigma = A / sqrt(SNR)``: the OS1's +-10 cm at SNR 12 (derived from the OS1 for
#: units whose figures give no SNR dependence)
SNR_NOISE_COEFF = 0.10 * math.sqrt(12.0)
#: slope of ln sigma against ln SNR below a unit's lowest SNR figure (shot noise)
LOW_SNR_SLOPE = -0.5


@dataclass(frozen=True)
class RangeFigure:
    """A datasheet range: a target of ``reflectivity`` (1) is detected out to ``range_m``
    (m) with ``probability`` (None: not stated); ``condition`` and ``source`` as given."""

    reflectivity: float
    range_m: float
    probability: float | None = None
    condition: str = ""
    source: str = ""


@dataclass(frozen=True)
class PrecisionFigure:
    """A datasheet range precision: ``sigma_m`` (m, read as 1 sigma) of ``kind``, at an
    SNR ``snr`` or a range ``range_m`` (m) and ``reflectivity``, each None when not stated."""

    sigma_m: float
    kind: str = ""
    range_m: float | None = None
    snr: float | None = None
    reflectivity: float | None = None
    source: str = ""


@dataclass(frozen=True)
class UnitFigures:
    """One unit's entry of the table (``units[<preset>]``)."""

    wavelength_nm: float | None = None
    ranges: tuple[RangeFigure, ...] = ()
    precision: tuple[PrecisionFigure, ...] = ()
    ambient_klx: float | None = None
    derived: tuple[str, ...] = ()
    notes: str = ""


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


def parse_table(data: Any) -> dict[str, UnitFigures]:
    """The units of a table in the schema above (docs/physics.md, "Calibration per unit"):
    preset name -> :class:`UnitFigures`.

    Raises:
        ValueError: not schema 1, or an entry without the fields the schema requires.
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("units"), dict):
        raise ValueError(f"radiometry table: schema {SCHEMA} with a 'units' object expected")
    out: dict[str, UnitFigures] = {}
    for name, u in data["units"].items():
        try:
            ranges = tuple(RangeFigure(float(f["reflectivity"]), float(f["range_m"]),
                                       _opt(f.get("probability")), str(f.get("condition", "")),
                                       str(f.get("source", ""))) for f in u.get("ranges", ()))
            prec = tuple(PrecisionFigure(float(f["sigma_m"]), str(f.get("kind", "")), _opt(f.get("range_m")),
                                         _opt(f.get("snr")), _opt(f.get("reflectivity")),
                                         str(f.get("source", ""))) for f in u.get("precision", ()))
            derived = tuple(str(d) for d in u.get("derived", ()))
            out[str(name)] = UnitFigures(_opt(u.get("wavelength_nm")), ranges, prec,
                                         _opt(u.get("ambient_klx")), derived, str(u.get("notes", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"radiometry table: unit {name!r}: {e}") from e
    return out


@lru_cache(maxsize=4)
def load_table(path: Path = TABLE_PATH) -> dict[str, UnitFigures]:
    """The table at ``path`` (default :data:`TABLE_PATH`) parsed (:func:`parse_table`),
    cached; ``{}`` when the file does not exist (every unit then detects as one without
    figures). Raises ValueError for a file that is not the schema."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return parse_table(json.loads(text))


def overlap(r: Floating) -> F64:
    """(N,) float64 near-range overlap ``xi(r) = min(1, (r / R_ov)^2)`` at ranges ``r``
    (N,) m, ``R_ov`` = :data:`FULL_OVERLAP_M`. Derived: a biaxial receiver's overlap grows
    from 0 in the near field; the square makes the received power flat below ``R_ov``
    (``rho cos(theta) / R_ov^2``) instead of growing as 1/r^2, so near returns are neither
    lost nor overweighted; ``R_ov`` is Hahner et al. 2021's full-overlap range."""
    rr = np.asarray(r, dtype=np.float64) / FULL_OVERLAP_M
    out: F64 = np.minimum(1.0, rr * rr)
    return out


def received_power(energy: Floating, r: Floating) -> F64:
    """(N,) float64 ``signal``: ``energy xi(r) / r^2`` for ``energy`` (N,) (rho cos(theta)
    T over the footprint, :class:`~.returns.Returns` ``energy``) at ranges ``r`` (N,) m
    (module docstring, 1.); 0 where ``r`` is not positive. Relative units: 1.0 for a 100 %
    Lambertian target at normal incidence at 1 m in clear air."""
    e = np.asarray(energy, dtype=np.float64)
    rr = np.asarray(r, dtype=np.float64)
    out = np.zeros(e.shape[0])
    ok = rr > 0.0
    out[ok] = e[ok] * overlap(rr[ok]) / (rr[ok] * rr[ok])
    return out


def required_snr(probability: float | None) -> float:
    """The SNR at which a return is detected with ``probability`` (None:
    :data:`DEFAULT_PROBABILITY`): ``tau + Phi^-1(p)``."""
    p = DEFAULT_PROBABILITY if probability is None else float(probability)
    return TAU + NormalDist().inv_cdf(min(max(p, 1e-9), 1.0 - 1e-9))


@dataclass(frozen=True)
class Calibration:
    """A unit's detection and noise (module docstring, 3. and 4.).

    Attributes:
        log_r, log_n: (K,) float64, ln range (m) and ln noise-equivalent power (relative
            units of ``signal``) at the datasheet ranges, ascending in range, K >= 1.
        log_snr, log_sigma: (M,) float64, ln SNR and ln sigma (m) of the precision curve,
            ascending in SNR; M = 0: ``max(floor, A / sqrt(SNR))``.
        floor: m, the noise floor of a unit whose figures give no SNR dependence.
        derived: what in this calibration is derived (text).
    """

    log_r: F64
    log_n: F64
    log_snr: F64 = field(default_factory=lambda: np.zeros(0))
    log_sigma: F64 = field(default_factory=lambda: np.zeros(0))
    floor: float = 0.0
    derived: tuple[str, ...] = ()

    def noise_power(self, r: Floating) -> F64:
        """(N,) float64 noise-equivalent power ``N(r)`` at ranges ``r`` (N,) m (> 0):
        log-log interpolation between the figures' ranges, constant outside them."""
        lr = np.log(np.maximum(np.asarray(r, dtype=np.float64), 1e-6))
        out: F64 = np.exp(np.interp(lr, self.log_r, self.log_n))
        return out

    def snr(self, signal: Floating, r: Floating, noise_ratio: float | Floating = 1.0) -> F64:
        """(N,) float64 SNR of returns of ``signal`` (N,) at ranges ``r`` (N,) m:
        ``signal / (N(r) sqrt(noise_ratio))``; ``noise_ratio`` (a number or (N,)): the noise
        variance relative to the datasheet's condition (ambient light,
        :func:`~.ambient.noise_ratio`; 1.0: that condition)."""
        ratio = np.sqrt(np.asarray(noise_ratio, dtype=np.float64))
        out: F64 = np.asarray(signal, dtype=np.float64) / (self.noise_power(r) * ratio)
        return out

    def sigma(self, snr: Floating) -> F64:
        """(N,) float64 1-sigma range noise (m) at SNR ``snr`` (N,) (module docstring, 4.);
        SNR below 1e-3 is taken as 1e-3."""
        x = np.maximum(np.asarray(snr, dtype=np.float64), 1e-3)
        if self.log_snr.shape[0] == 0:
            out: F64 = np.maximum(self.floor, SNR_NOISE_COEFF / np.sqrt(x))
            return out
        lx = np.log(x)
        ls = np.interp(lx, self.log_snr, self.log_sigma)
        ls = ls + np.where(lx < self.log_snr[0], (lx - self.log_snr[0]) * LOW_SNR_SLOPE, 0.0)
        out = np.exp(ls)
        return out

    def range_at(self, reflectivity: float, probability: float | None = None) -> float:
        """m: the range at which a Lambertian target of ``reflectivity`` at normal incidence
        is detected with ``probability`` (None: 90 %), by bisection (for tests and docs)."""
        need = required_snr(probability)
        lo, hi = FULL_OVERLAP_M, 1e5
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            s = float(self.snr(received_power(np.array([reflectivity]), np.array([mid])), np.array([mid]))[0])
            lo, hi = (mid, hi) if s >= need else (lo, mid)
        return lo


def calibrate(ranges: Sequence[RangeFigure], precision: Sequence[PrecisionFigure] = (),
              floor: float = 0.0) -> Calibration:
    """The :class:`Calibration` whose detection reaches every figure of ``ranges`` with
    its probability (module docstring, 3.) and whose noise follows ``precision`` (4.;
    ``floor`` m when they give no SNR dependence and no floor of their own).

    Raises:
        ValueError: no range figure, a non-positive range or reflectivity, or figures by
            which the SNR would grow with range (a reflectivity that falls as its range
            grows faster than r^2 allows).
    """
    if not ranges:
        raise ValueError("calibrate: at least one range figure")
    by_r: dict[float, list[float]] = {}
    for f in ranges:
        if not (f.range_m > 0.0 and f.reflectivity > 0.0):
            raise ValueError(f"calibrate: range and reflectivity must be > 0, got {f}")
        p = float(received_power(np.array([f.reflectivity]), np.array([f.range_m]))[0])
        by_r.setdefault(float(f.range_m), []).append(math.log(p / required_snr(f.probability)))
    rs = sorted(by_r)
    log_r = np.log(np.array(rs))
    log_n = np.array([float(np.mean(by_r[r])) for r in rs])
    slopes = np.diff(log_n) / np.diff(log_r) if len(rs) > 1 else np.zeros(1)
    if (slopes <= -2.0).any():
        raise ValueError(f"calibrate: figures {list(ranges)} make the SNR grow with range")
    derived = [] if len(rs) < 2 else [f"threshold ~ r^{s:.3g} between the datasheet ranges (fitted)"
                                      for s in slopes]
    cal = Calibration(log_r, log_n, derived=tuple(derived))
    pts: dict[float, float] = {}
    floors = []
    for q in precision:
        if q.snr is not None:
            pts[float(q.snr)] = float(q.sigma_m)
        elif q.range_m is not None and q.reflectivity is not None:
            s = float(cal.snr(received_power(np.array([q.reflectivity]), np.array([q.range_m])),
                              np.array([q.range_m]))[0])
            pts[s] = float(q.sigma_m)
        else:
            floors.append(float(q.sigma_m))
    if pts:
        x = sorted(pts)
        return Calibration(log_r, log_n, np.log(np.array(x)),
                           np.log(np.array([pts[k] for k in x])), derived=cal.derived)
    fl = min(floors) if floors else float(floor)
    return Calibration(log_r, log_n, floor=fl,
                       derived=cal.derived + (f"sigma = max({fl:g} m, A / sqrt(SNR)), A from the OS1",))


def fallback_calibration(max_range: float, floor: float) -> Calibration:
    """A unit without figures: :data:`FALLBACK_REFLECTIVITY` detected at ``max_range`` (m)
    with 90 %, noise floor ``floor`` (m)."""
    return calibrate([RangeFigure(FALLBACK_REFLECTIVITY, float(max_range))], (), floor)


@lru_cache(maxsize=64)
def unit_calibration(preset: str, max_range: float, floor: float, path: Path = TABLE_PATH,
                     reach: float | None = None) -> Calibration:
    """The :class:`Calibration` of preset ``preset`` from the table at ``path`` (its
    ``ranges`` and ``precision``; ``floor``, m, where its figures give none), or
    :func:`fallback_calibration` (``max_range``, ``floor``) when the table has no entry
    with a range figure. ``reach`` (m): the unit's datasheet maximum range (the preset's
    ``max_range``); figures beyond it are not fitted when one within it exists (the unit
    reports nothing beyond its maximum range, so such a figure cannot be reproduced; the
    VLS-128's "10 % at 300 m" beside its 245 m range and "5 % at 180 m"). Cached."""
    unit = load_table(path).get(preset)
    if unit is None or not unit.ranges:
        return fallback_calibration(max_range, floor)
    ranges = unit.ranges
    if reach is not None and any(f.range_m <= reach for f in ranges):
        ranges = tuple(f for f in ranges if f.range_m <= reach)
    return calibrate(ranges, unit.precision, floor)


def detect(snr: Floating, z: Floating) -> Bool:
    """(N,) bool: the returns of SNR ``snr`` (N,) whose peak sample, signal plus the
    standard normal noise draw ``z`` (N,), crosses :data:`TAU` (probability
    ``Phi(SNR - tau)``)."""
    out: Bool = np.asarray(snr, dtype=np.float64) + np.asarray(z, dtype=np.float64) >= TAU
    return out


def probability(snr: Floating) -> F64:
    """(N,) float64 ``Phi(SNR - tau)``, the detection probability of :func:`detect`
    (for tests and docs)."""
    cdf = NormalDist().cdf
    out: F64 = np.array([cdf(float(v) - TAU) for v in np.asarray(snr, dtype=np.float64).ravel()])
    return out


__all__ = ["TABLE_PATH", "TAU", "FALSE_ALARM_PER_BIN", "FULL_OVERLAP_M", "SNR_NOISE_COEFF", "RangeFigure",
           "PrecisionFigure", "UnitFigures", "Calibration", "parse_table", "load_table", "overlap",
           "received_power", "required_snr", "calibrate", "fallback_calibration", "unit_calibration",
           "detect", "probability"]
