"""Weather between the sensor and the scene (docs/physics.md, "Weather"): stage 4 of the return
physics (:mod:`.returns`). Owns the atmosphere's two-way transmission of every return,
its range noise, and the returns the atmosphere makes itself (fog backscatter, rain
drops).

Units: every power here is the normalised received power of the laser radar equation,
``P = rho cos(theta) T^2 / r^2`` (1/m^2): the peak power of a Lambertian hard target of
reflectivity ``rho`` at range ``r`` divided by ``C_A (2/c) P_0 / pi`` (Hahner et al. 2021,
Eq. 1-5 with ``H_T = beta_0 delta(R - R_0)``, ``beta_0 = rho / pi``). A return's
``energy`` (``rho cos theta`` over its footprint, times ``T^2`` once attenuated) divided
by ``r^2`` is its power; a weather return's ``returned`` and ``energy`` are the
reflectivity a hard target at its range would need to give its power, ``P r^2``.

Detection of the atmosphere's own returns: a weather return is made only when its power
reaches :func:`detection_power` (a target of :data:`DETECTION_REFLECTIVITY` at the
sensor's ``max_range``, the way datasheets quote range: HDL-64E S2, 120 m for 80 %);
the sensor's detection model then judges it as it judges every return.

**Fog** (``weather = fog``; M. Hahner, C. Sakaridis, D. Dai, L. Van Gool, "Fog Simulation
on Real LiDAR Point Clouds for 3D Object Detection in Adverse Weather", ICCV 2021):

- extinction ``alpha = -ln(0.05) / MOR`` (MOR = ``fog_visibility``); every return's
  ``transmission`` is ``exp(-2 alpha r)`` and its ``returned`` and ``energy`` are scaled by
  it (the paper's hard target in fog, ``P_R,fog^hard = exp(-2 alpha R_0) P_R,clear``);
- backscatter: the fog is a soft target, ``H_T(R) = beta U(R_0 - R)`` with
  ``beta = 0.046 / MOR`` (1/(m sr), the paper's value); the received power is the paper's
  integral of the transmitted pulse ``P_T(t) = P_0 sin^2(pi t / (2 tau_H))`` over the soft
  target, with the receiver's overlap ``xi(R)`` (0 below ``R_1``, linear to 1 at ``R_2``)
  and ``T^2(R) / R^2``. In range (``x = R - c t / 2``), normalised as above::

      S(R; R_0) = pi beta int_{max(R - c tau_H, 0)}^{min(R, R_0)}
                      sin^2(pi (R - x) / (c tau_H)) xi(x) exp(-2 alpha x) / x^2 dx

  evaluated on a 1 cm grid for every ``R_0`` at once (:func:`fog_backscatter`); its peak
  over ``R`` is the fog's return, at ``R - c tau_H / 2`` (the paper's shift, so that a hard
  target's peak sits at ``R_0``). ``tau_H`` = 20 ns, ``R_1`` = 0.9 m, ``R_2`` = 1.0 m: the
  paper's defaults. ``R_0``: the beam's nearest return (the fog behind it is hidden), or
  ``max_range`` on a beam without one.
- a spurious return where the fog's peak power, times :data:`FOG_SOFT_GAIN`, exceeds the
  hard target's power (or the beam has none) and reaches :func:`detection_power`; its range
  gets the paper's noise (its released code, variant "v1"): the range times
  ``R_0 / u``, ``u`` uniform in ``[max(R_0 - 10, R_0 / 2), R_0 + 10]`` m (the lower bound
  keeps ``u`` positive for near targets; the paper's is ``R_0 - 10``); a noisy range
  outside ``(R_1, R_0)`` (before the receiver's overlap, or behind the target) drops the
  spurious return.

**Rain** (``weather = rain``, ``rain_rate`` R in mm/h):

- drops: the Marshall-Palmer size distribution ``N(D) = N_0 exp(-Lambda D)``,
  ``N_0 = 8000 m^-3 mm^-1``, ``Lambda = 4.1 R^-0.21 mm^-1`` (Marshall and Palmer 1948, the
  distribution LISA uses: V. Kilic et al., "Lidar Light Scattering Augmentation (LISA):
  Physics-based Simulation of Adverse Weather Conditions for 3D Object Detection", 2021,
  section 3);
- extinction: LISA's ``alpha = int sigma_ext(D) N(D) dD`` with the large-drop limit of
  Mie extinction, ``Q_ext = 2`` (``sigma_ext = pi D^2 / 2``; drops of 0.1-6 mm are 100-7000
  wavelengths across), which integrates in closed form to
  ``alpha = pi N_0 / Lambda^3 = 3.65e-4 R^0.63 m^-1`` (:func:`rain_extinction`; 1.56 /km at
  10 mm/h). Returns are attenuated by ``exp(-2 alpha r)`` like fog's; the sensor's detection
  model drops those that fall below its limit (the drop-outs);
- range noise: C. Goodin, D. Carruth, M. Doude, C. Hudson, "Predicting the Influence of Rain
  on LIDAR in ADAS", Electronics 8(1):89, 2019, section 2: Gaussian with
  ``sigma = 0.02 r (1 - exp(-R))^2`` m (:func:`rain_range_sigma`), in ``range_noise``;
- returns from drops (LISA's per-beam Monte Carlo): the drops in the beam's cone
  (diameter ``a_0 + b r``, from the receiver's overlap range ``R_1`` on; ``a_0`` =
  :data:`APERTURE` m, ``b`` the beam divergence or :data:`RAIN_DIVERGENCE` when the
  sensor has none) in front of its first return are a
  Poisson draw of mean ``n V`` (``n = N_0 / Lambda`` drops per m^3, ``V`` the cone's volume
  to where a drop of :data:`MAX_DROP` could still be detected), at ranges drawn uniformly
  in the cone's volume and diameters from ``N(D)``; a drop of diameter ``D`` at ``r``
  returns ``rho_w min(1, D^2 / (a_0 + b r)^2)`` (its share of the beam times the water
  surface's normal reflectance, ``rho_w = ((1.328 - 1) / (1.328 + 1))^2 = 0.0198``), times
  ``exp(-2 alpha r)`` and the receiver's overlap ``xi(r)`` (the fog model's). Of the
  detectable drops (power at least :func:`detection_power`) the beam reports the
  strongest (the nearest under ``returns = first``).

A weather return replaces the beam's hard return or stands beside it by ``returns``:
``strongest`` keeps the stronger, ``first`` the nearer, ``last`` the farther (a weather
return only on a beam without one); ``dual`` reports the weather return and the beam's
last, ``dual_ouster`` the weather return and the strongest, ``all`` the nearest
``max_returns``. Weather rows have ``weather`` True, ``row`` the beam's first cast row,
``reflectivity`` 0 and are relabelled by :func:`~.sensor.echo_hits`
(:data:`WEATHER_SEMANTIC`).

``weather = none`` returns its input object unchanged. Every draw comes from the ``rng``
given to :func:`apply` (the chunk's :data:`~.returns.STAGE_WEATHER` stream).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from ..ndtypes import F64, I64, Floating, Integer
from .beam import rank_returns, run_starts
from ..settings import SensorSettings, setting_value
from .returns import Returns, ReturnSettings

if TYPE_CHECKING:
    from .beam import SubRays

#: (beam (C,) int64, range (C,) float64 m, power (C,) float64 1/m^2, transmission (C,)
#: float64): the weather returns a chunk's beams would give, one per beam at most
Candidates = tuple[I64, F64, F64, F64]

#: semantic class id of a return from the atmosphere: SemanticKITTI ``outlier`` (1), the
#: class it gives points that lie on no surface (reflections, noise), so they are told
#: from points nobody labelled (``unlabeled``, 0) and still left out of evaluation as both are
WEATHER_SEMANTIC = 1

SPEED_OF_LIGHT = 299_792_458.0
#: -ln(0.05): the contrast threshold 5 % that defines the meteorological optical range
MOR_CONTRAST = -math.log(0.05)
#: fog's backscattering coefficient times MOR (1/sr; Hahner et al. 2021: beta = 0.046 / MOR)
FOG_BETA_MOR = 0.046
#: half-power pulse width (s), Hahner et al. 2021's default
FOG_TAU_H = 20e-9
#: receiver overlap (crossover) ranges R_1, R_2 (m), Hahner et al. 2021's defaults
FOG_R1, FOG_R2 = 0.9, 1.0
#: the fog's soft-target power relative to BlenSor's Lambertian hard targets. 1 is the lidar
#: equation as written above; the paper's released code balances the two through the hard
#: target's Gamma = 1e-6 in a power without the delta target's 2/c, i.e. 1/150 in these units.
#: 0.1 puts the onset of fog returns on beams without a target at MOR = 150 m for the
#: HDL-64E S2 (detection power 0.8 / 120^2) and on 0.3-reflectivity ground at 20 m at
#: MOR = 80 m: dense fog gives clutter near the sensor, light fog (MOR 1 km) none
FOG_SOFT_GAIN = 0.1
#: the paper's range noise half-width (m), its released code's ``noise = 10``
FOG_RANGE_NOISE = 10.0
#: integration step of :func:`fog_backscatter` (m)
FOG_STEP = 0.01

#: reflectivity of the target a sensor detects at its ``max_range`` (datasheets' range
#: spec: HDL-64E S2 120 m for 80 %); see :func:`detection_power`
DETECTION_REFLECTIVITY = 0.8

#: Marshall-Palmer N_0 (m^-3 mm^-1) and Lambda = MP_LAMBDA R^MP_EXP (mm^-1)
MP_N0, MP_LAMBDA, MP_EXP = 8000.0, 4.1, -0.21
#: largest raindrop diameter drawn (m): drops break up above about 6 mm
MAX_DROP = 6e-3
#: water's refractive index near 900 nm (LISA's m = 1.328)
WATER_IOR = 1.328
#: normal-incidence reflectance of a drop's surface, ((n - 1) / (n + 1))^2
DROP_REFLECTANCE = ((WATER_IOR - 1.0) / (WATER_IOR + 1.0)) ** 2
#: beam diameter at the aperture (m)
APERTURE = 0.01
#: full divergence (rad) used for the drops' cone when the sensor's is 0 (LISA's default)
RAIN_DIVERGENCE = 3e-3
#: Goodin et al. 2019's range-noise coefficient (sigma = 0.02 r (1 - exp(-R))^2)
RAIN_SIGMA_COEFF = 0.02


def fog_alpha(mor: float) -> float:
    """Extinction coefficient (1/m) of fog of meteorological optical range ``mor`` (m):
    ``-ln(0.05) / MOR`` (Hahner et al. 2021; Koschmieder's 5 % contrast)."""
    return MOR_CONTRAST / float(mor)


def rain_extinction(rain_rate: ArrayLike) -> F64:
    """Extinction coefficient (1/m) of rain of rate ``rain_rate`` (mm/h, scalar or array):
    ``pi N_0 / Lambda^3`` (Marshall-Palmer drops, ``Q_ext = 2``; module docstring), i.e.
    ``3.65e-4 R^0.63``; 0 at R = 0."""
    r = np.asarray(rain_rate, dtype=np.float64)
    lam_per_m = MP_LAMBDA * np.power(np.maximum(r, 1e-300), MP_EXP) * 1e3  # 1/m
    n0 = MP_N0 * 1e3  # m^-3 per m of diameter
    return np.where(r > 0.0, math.pi * n0 / lam_per_m ** 3, 0.0)


def rain_range_sigma(r: Floating, rain_rate: float) -> F64:
    """(N,) float64 m: Goodin et al. 2019's range-error standard deviation
    ``0.02 r (1 - exp(-R))^2`` at ranges ``r`` (N,) m and rain rate R (mm/h)."""
    sigma = RAIN_SIGMA_COEFF * np.asarray(r, dtype=np.float64) * (1.0 - math.exp(-float(rain_rate))) ** 2
    return cast(F64, sigma)


def detection_power(s: SensorSettings) -> float:
    """Normalised power (1/m^2) of the weakest return the sensor detects:
    ``DETECTION_REFLECTIVITY / max_range^2`` (``max_range`` of ``s``, 100 m if it has none)."""
    mr = float(setting_value(s, "max_range") or 100.0)
    return DETECTION_REFLECTIVITY / (mr * mr)


@lru_cache(maxsize=16)
def fog_backscatter(mor: float, r0_max: float) -> tuple[F64, F64, F64]:
    """The fog's backscatter peak for every hard-target range on a :data:`FOG_STEP` grid.

    Returns ``(r0, power, at)``, three (G,) float64 arrays: hard-target ranges ``R_0`` (m,
    0, 0.01, ... up to ``min(r0_max, R_2 + c tau_H)`` beyond which nothing changes), the
    peak of ``S(R; R_0)`` over R (normalised power, 1/m^2; module docstring) and where it
    lies after the paper's shift (m; 0 where the power is 0). Cached per (MOR, r0_max)."""
    alpha = fog_alpha(mor)
    beta = FOG_BETA_MOR / float(mor)
    width = SPEED_OF_LIGHT * FOG_TAU_H  # c tau_H: the pulse's extent in R
    top = min(float(r0_max), FOG_R2 + width) + FOG_STEP
    n = int(math.ceil(top / FOG_STEP)) + 1
    x = np.arange(n, dtype=np.float64) * FOG_STEP
    xi = np.clip((x - FOG_R1) / (FOG_R2 - FOG_R1), 0.0, 1.0)
    f = np.zeros(n)
    ok = x > 0
    f[ok] = xi[ok] * np.exp(-2.0 * alpha * x[ok]) / (x[ok] * x[ok])
    # R (rows) up to the farthest R_0 plus the pulse; kernel sin^2 over 0 <= R - x <= c tau_H
    nr = n + int(math.ceil(width / FOG_STEP))
    k = np.arange(nr)[:, None] - np.arange(n)[None, :]  # (R index) - (x index)
    u = k * FOG_STEP
    kern = np.where((k >= 0) & (u <= width), np.sin(np.pi * u / width) ** 2, 0.0)
    # C[R, j0] = sum_{x <= x_j0} kern * f dx: the integral with U(R_0 - x) for every R_0
    cum = np.cumsum(kern * f[None, :], axis=1) * (math.pi * beta * FOG_STEP)
    j = np.argmax(cum, axis=0)
    power = cum[j, np.arange(n)]
    at = np.where(power > 0.0, j * FOG_STEP - width / 2.0, 0.0)
    return x, power, np.maximum(at, 0.0)


def _fog_peak(s: ReturnSettings, r0: F64) -> tuple[F64, F64]:
    """(power, range) of the fog's peak (K,) for hard targets at ``r0`` (K,) m."""
    mr = float(setting_value(s, "max_range") or 100.0)
    grid, power, at = fog_backscatter(float(s.fog_visibility), mr)
    i = np.clip(np.round(np.asarray(r0) / FOG_STEP).astype(np.int64), 0, grid.shape[0] - 1)
    return power[i] * FOG_SOFT_GAIN, at[i]


def _beam_starts(beam: Integer) -> tuple[Integer, I64]:
    """Unique beams (in order) and the first row of each, for rows in beam order."""
    start = run_starts(beam)
    return beam[start], start


def _attenuated(ret: Returns, alpha: float) -> Returns:
    """``ret`` with the two-way transmission ``exp(-2 alpha r)`` applied (copies)."""
    t = np.exp(-2.0 * alpha * np.asarray(ret.range, dtype=np.float64))
    if ret.transmission is not None:
        t = t * ret.transmission
    out = ret.take(np.arange(len(ret)))
    out.transmission = t
    out.returned = np.asarray(ret.returned, dtype=np.float64) * np.exp(-2.0 * alpha * ret.range)
    out.energy = np.asarray(ret.energy, dtype=np.float64) * np.exp(-2.0 * alpha * ret.range)
    return out


def _fog_candidates(s: ReturnSettings, ret: Returns, n_beams: int, rng: np.random.Generator) -> Candidates:
    """Per beam with a spurious fog return: (beam, range, power, transmission)."""
    mr = float(setting_value(s, "max_range") or 100.0)
    ub, start = _beam_starts(ret.beam)
    r0 = np.full(n_beams, mr)
    hard = np.zeros(n_beams)  # power of the nearest hard return (0: none)
    r0[ub] = ret.range[start]
    hard[ub] = ret.energy[start] / np.maximum(ret.range[start], 1e-9) ** 2
    power, at = _fog_peak(s, r0)
    win = (power > hard) & (power >= detection_power(s)) & (at > 0.0)
    b = np.flatnonzero(win)
    # draws for every beam in order, so a beam's noise does not depend on the others' outcome
    u = rng.random(n_beams)
    lo = np.maximum(r0 - FOG_RANGE_NOISE, 0.5 * r0)
    hi = r0 + FOG_RANGE_NOISE
    rng_f = at * r0 / (lo + u * (hi - lo))
    rf = rng_f[b]
    keep = (rf < r0[b]) & (rf > FOG_R1)  # in front of its target, where the receiver sees
    b, rf = b[keep], rf[keep]
    t = np.exp(-2.0 * fog_alpha(s.fog_visibility) * rf)
    return b, rf, power[b], t


def _rain_candidates(s: ReturnSettings, ret: Returns, n_beams: int, rng: np.random.Generator,
                     alpha: float) -> Candidates:
    """Per beam with a detectable drop: (beam, range, power, transmission)."""
    mr = float(setting_value(s, "max_range") or 100.0)
    rate = float(s.rain_rate)
    if rate <= 0.0 or n_beams == 0:
        return (np.zeros(0, np.int64),) + (np.zeros(0),) * 3
    p_min = detection_power(s)
    b_div = float(setting_value(s, "beam_divergence") or 0.0) or RAIN_DIVERGENCE
    # farthest range where the largest drop could still be detected (bisection on a
    # decreasing function), and the hard returns' ranges that hide the drops behind them
    @overload
    def drop_power(r: float, d: float) -> np.float64: ...

    @overload
    def drop_power(r: F64, d: F64) -> F64: ...

    def drop_power(r: float | F64, d: float | F64) -> np.float64 | F64:
        share = np.minimum(1.0, (d / (APERTURE + b_div * r)) ** 2)
        xi = np.clip((r - FOG_R1) / (FOG_R2 - FOG_R1), 0.0, 1.0)  # the receiver's overlap
        return cast("np.float64 | F64",
                    DROP_REFLECTANCE * share * xi * np.exp(-2.0 * alpha * r) / np.maximum(r, 1e-9) ** 2)
    lo, hi = FOG_R2, mr
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if drop_power(mid, MAX_DROP) >= p_min else (lo, mid)
    r_cut = lo
    ub, start = _beam_starts(ret.beam)
    r_lim = np.full(n_beams, r_cut)
    r_lim[ub] = np.minimum(r_cut, ret.range[start])
    r_lim = np.maximum(r_lim, FOG_R1)  # no drops seen before the receiver's overlap starts
    lam_mm = MP_LAMBDA * rate ** MP_EXP  # 1/mm
    n_per_m3 = MP_N0 / lam_mm
    d0 = APERTURE + b_div * FOG_R1
    d_far = APERTURE + b_div * r_lim
    vol = math.pi / (12.0 * b_div) * (d_far ** 3 - d0 ** 3)
    counts = rng.poisson(n_per_m3 * vol)
    total = int(counts.sum())
    beam_of = np.repeat(np.arange(n_beams), counts)
    # range uniform in the cone's volume: diameter^3 uniform between the two ends
    u = rng.random(total)
    dd = np.cbrt(d0 ** 3 + u * (d_far[beam_of] ** 3 - d0 ** 3))
    r = (dd - APERTURE) / b_div
    dia = np.minimum(rng.exponential(1.0 / lam_mm, total) * 1e-3, MAX_DROP)
    p = drop_power(r, dia)
    ok = (p >= p_min) & (r > 0.0)
    beam_of, r, p = beam_of[ok], r[ok], p[ok]
    if beam_of.shape[0] == 0:
        return (np.zeros(0, np.int64),) + (np.zeros(0),) * 3
    echoes = setting_value(s, "divergence_algorithm") == "echoes"
    mode = setting_value(s, "returns") if echoes else "strongest"
    key = r if mode == "first" else -p  # the drop the returns mode would pick (the nearest or strongest)
    order = np.lexsort((key, beam_of))
    first = np.r_[True, beam_of[order][1:] != beam_of[order][:-1]]
    pick = order[first]
    return beam_of[pick], r[pick], p[pick], np.exp(-2.0 * alpha * r[pick])


def _merge(s: ReturnSettings, ret: Returns, per_beam: int, n_beams: int, cb: I64, cr: F64, cp: F64,
           ct: F64) -> Returns:
    """``ret`` (rows of ``n_beams`` beams of ``per_beam`` sub-rays) with the weather
    candidates (beam ``cb``, range ``cr``, power ``cp``, transmission ``ct``) added as
    returns of their beams, in beam order, nearest first. Which of a beam's returns are
    reported (the returns mode, by received power) is decided after detection, with the
    hard returns' (:func:`~.beam.select_returns`)."""
    m = cb.shape[0]
    if m == 0:
        return ret
    S = max(int(per_beam), 1)
    eq = cp * cr * cr  # energy a hard target at the same range would need for this power
    w = Returns(beam=cb.astype(np.int64), row=cb.astype(np.int64) * S, range=cr.astype(np.float64),
                reflectivity=np.zeros(m, dtype=np.asarray(ret.reflectivity).dtype), returned=eq,
                energy=eq.copy(),
                return_number=np.ones(m, np.uint8), number_of_returns=np.ones(m, np.uint8),
                weather=np.ones(m, bool),
                range_noise=None if ret.range_noise is None else np.zeros(m),
                transmission=ct.astype(np.float64))
    kept = ret
    if kept.transmission is None:
        kept = ret.take(np.arange(len(ret)))
        kept.transmission = np.ones(len(kept))
    out = Returns.concat([kept, w], [0, 0], [0, 0])
    order = np.lexsort((out.range, out.beam))  # beam order, nearest first
    out = out.take(order)
    out.return_number, out.number_of_returns = rank_returns(out.beam, out.range)
    return out


def apply(s: SensorSettings, ret: Returns, sub: SubRays | None, rng: np.random.Generator) -> Returns:
    """The returns ``ret`` of a chunk of beams through the atmosphere of settings ``s``
    (``weather``, ``fog_visibility``, ``rain_rate``): attenuated (``transmission``,
    ``returned`` and ``energy`` scaled by it), given range noise (``range_noise``), and
    with the atmosphere's own returns added (``weather`` True; ``row``: the first cast row
    of their beam, ``sub`` the chunk's :class:`~.beam.SubRays`). Rows stay in beam
    order, nearest first within a beam; ``return_number`` and ``number_of_returns``
    renumbered when rows are added or dropped (module docstring for the models).

    ``weather = none`` (or a settings object without ``weather``) returns ``ret`` itself,
    untouched. Draws come from ``rng`` only, so the same seed gives the same returns."""
    kind = setting_value(s, "weather")
    if kind == "none":
        return ret
    s = cast(ReturnSettings, s)  # (only ReturnSettings declare a weather other than none)
    per_beam = max(int(sub.per_beam), 1) if sub is not None else 1
    n_beams = int(sub.directions.shape[0] // per_beam) if sub is not None else 0
    if len(ret):
        n_beams = max(n_beams, int(ret.beam.max()) + 1)
    if kind == "fog":
        alpha = fog_alpha(s.fog_visibility)
        att = _attenuated(ret, alpha)
        cand = _fog_candidates(s, att, n_beams, rng)
        return _merge(s, att, per_beam, n_beams, *cand)
    if kind == "rain":
        alpha = float(rain_extinction(s.rain_rate))
        att = _attenuated(ret, alpha)
        cand = _rain_candidates(s, att, n_beams, rng, alpha)
        out = _merge(s, att, per_beam, n_beams, *cand)
        sigma = rain_range_sigma(out.range, s.rain_rate)
        noise = rng.standard_normal(len(out)) * sigma
        noise[out.weather] = 0.0  # a drop's range is drawn where the drop is
        out.range_noise = noise if out.range_noise is None else out.range_noise + noise
        return out
    raise ValueError(f"weather: unknown kind {kind!r}")
