"""Beam divergence and multiple returns (docs/physics.md): a beam's footprint sampled
by sub-rays (:func:`footprint`) and the echoes its candidates form along the beam
(:func:`form_returns`).

The beam (seed 004, "Divergence Angle", "Focus Distance", "Samples Per Beam"; HELIOS++,
Winiwarter et al. 2022, "Virtual laser scanning with HELIOS++", Remote Sensing of
Environment 269, 112772: the beam footprint sampled by sub-rays on concentric rings, the
count set by its ``beamSampleQuality``, each carrying a Gaussian profile's energy):

- **Cone.** A beam of full divergence angles ``beam_divergence`` (horizontal: across the
  beam, along the axis ``h = normalize(up x d)`` in which the azimuth grows; ``up`` is the
  sensor frame's +Y) and ``beam_divergence_vertical`` (along ``v = d x h``, toward +Y; 0:
  the same as the horizontal one) is an elliptical cone around the beam's axis ``d``. A
  beam along +-Y (no horizontal direction) takes ``h = +X``.
- **Pattern.** Sub-ray j sits at (u_j, v_j) in the unit disc (the cone's edge is the unit
  circle) and points along ``normalize(d + tan(a_h u_j) h + tan(a_v v_j) v)`` with the
  half angles ``a_h``, ``a_v``. The disc is cut into S cells of equal area: a centre disc
  and rings (:func:`disc_pattern`), ring k holding about 6k points spaced evenly in angle
  (1 + 6 for S = 7, 1 + 6 + 12 for S = 19), each point at the radius that halves its
  ring's area. No random numbers: the pattern is the same for every beam and run.
- **Shares.** The irradiance of a Gaussian beam is I(rho) ~ exp(-2 rho^2) with rho the
  radius over the 1/e^2 radius (A. E. Siegman, "Lasers", 1986, ch. 17; the beam
  divergence of a datasheet is the full angle of the 1/e^2 diameter), here the cone's
  edge (rho = 1). A cell's share is the profile's energy in it, exactly:
  ``exp(-2 a^2) - exp(-2 b^2)`` for the annulus a..b, split evenly among the ring's
  points; the shares are normalized to 1 over the cone (the 13.5 % of a Gaussian beam
  outside its 1/e^2 radius is left out).
- **Focus.** ``focus_distance`` f (m) is where the beam is narrowest (seed 004: "the
  distance along the laser beam, from the optical aperture, where the beam width is
  minimal"). Geometric optics with a point focus (the zero-waist limit of a Gaussian beam
  waist): every sub-ray crosses the axis at F = o + f d, starting on the aperture plane
  (through the beam origin o, normal to d) at ``F - f / (d_j . d) d_j``. The footprint's
  width at range r along the beam is then ``2 |r - f| tan(a)`` (f = 0: a cone from the
  beam origin, the footprint growing with range). A sub-ray's range is its own path from
  its start, which differs from the axial range by a factor 1 / cos(a) - 1 < 2e-5 at
  a = 5 mrad (7 um at 350 m).

Echoes (HELIOS++'s full-waveform model groups sub-ray returns into echoes along the
beam; here without a waveform): the candidates of a beam (its sub-rays' path ends within
``max_range``, several per sub-ray behind glass) sorted by range form one echo while
consecutive ranges differ by at most ``echo_separation`` (the pulse's range resolution,
c tau / 2). An echo's

- ``energy`` = sum of share x weight^2 x reflectivity x cos(incidence) over its
  candidates (seed 002 Eq. 4's R0 cos theta summed over the footprint, with the path's
  two-way transmission weight^2), ``returned`` the same without the cosine;
- ``range`` = the energy-weighted mean range of its candidates (a mixed range: a beam on
  two surfaces closer than ``echo_separation`` gives one echo between them, seed 000
  mixed pixels, which seed 000's conclusion names).
- surface (labels, normal, colour, reflectivity) = its strongest candidate's.

``divergence_algorithm``:

- ``echoes``: the echoes ``returns`` chooses: ``strongest``; ``last``; ``first``;
  ``dual`` (Velodyne: the strongest and the last; when the strongest is the last, the
  second strongest: VLP-16 User Manual 63-9243 Rev D, chapter 9, dual return packets;
  a beam with one echo reports it once); ``dual_ouster`` (the strongest and the second
  strongest: Ouster firmware user manual, "Return Order": the sensor keeps the two
  strongest returns of each beam, RNG19_RFL8_SIG16_NIR16_DUAL reports both);
  ``all`` (the nearest ``max_returns``);
- seed 004's single-range algorithms, one return per beam with the whole beam's energy
  (every candidate's light reaches the receiver; only the reported range differs):
  ``first`` (the nearest candidate's range and surface), ``average`` (the energy-weighted
  mean range of every candidate, the strongest's surface), ``random`` (one candidate
  drawn with probability proportional to its energy, from the stage's generator).

Each return carries ``return_number`` (1-based, nearest first among the beam's reported
returns) and ``number_of_returns`` (LAS 1.4's fields). With one sub-ray per beam and no
glass each beam has at most one candidate: the returns are those of the one-ray model
(single-return), bit for bit (``returns = strongest``, any algorithm).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..ndtypes import F64, I64, U8, Array, Bool, Floating, Integer
from ..settings import SensorSettings, setting_value
from .protocols import Hits
from .raypattern import RayPattern
from .returns import Returns

#: +Y, the sensor frame's up (elevation = asin(d_y), :func:`~.raypattern.angles_of`)
UP = np.array([0.0, 1.0, 0.0])
#: |up x d| below this: the beam points straight up or down, h = +X
_VERTICAL = 1e-9


@dataclass
class SubRays:
    """The sub-rays of a chunk of B beams, S per beam (R = B x S rows, beam-major: sub-ray
    j of beam b is row ``b * S + j``).

    Attributes:
        directions (R, 3) float64 unit, sensor frame.
        origins (R, 3) float64 m sensor frame, or None (every sub-ray from the sensor
            origin).
        times (R,) float64 s: the beam's firing time.
        beam (R,) int64: the beam of each sub-ray.
        share (R,) float64: the sub-ray's share of the beam's energy (a beam's shares sum
            to 1).
        per_beam: S.
    """

    directions: F64
    origins: F64 | None
    times: Floating
    beam: I64
    share: F64
    per_beam: int


def ring_counts(samples: int) -> tuple[int, ...]:
    """Points per ring of the S = ``samples`` pattern (after the centre point): K rings,
    K the fewest with 1 + 3K(K+1) >= S (the hexagonal numbers 1, 7, 19, 37, 61), the
    S - 1 points shared in proportion to the ring number k (ring k's circumference), the
    remainders to the outer rings. ``()`` for S = 1.

    Raises:
        ValueError: ``samples`` < 1."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    m = samples - 1
    if m == 0:
        return ()
    k = 1
    while 1 + 3 * k * (k + 1) < samples:
        k += 1
    total = k * (k + 1) // 2
    counts = [m * (i + 1) // total for i in range(k)]
    rest = m - sum(counts)
    for i in range(k - 1, k - 1 - rest, -1):  # fewer than k remain: one each to the outer rings
        counts[i] += 1
    return tuple(counts)


@lru_cache(maxsize=None)
def disc_pattern(samples: int) -> tuple[F64, F64]:
    """The S = ``samples`` sub-ray positions in the unit disc and their energy shares.

    Returns:
        uv (S, 2) float64: (horizontal, vertical) position, |uv| < 1; row 0 the centre.
        share (S,) float64 > 0, sum 1: the Gaussian profile's energy
        (I ~ exp(-2 rho^2), 1/e^2 radius at rho = 1) in each sub-ray's cell, cells of
        equal area pi / S (module docstring). Read-only arrays (cached).
    Raises:
        ValueError: ``samples`` < 1."""
    counts = ring_counts(samples)
    rings: list[F64] = [np.zeros((1, 2))]
    bound = np.sqrt(1.0 / samples)
    energy: list[Any] = [1.0 - np.exp(-2.0 * bound * bound)]
    placed = 1
    for n in counts:
        placed += n
        outer = np.sqrt(placed / samples)
        rho = np.sqrt(0.5 * (bound * bound + outer * outer))  # halves the ring's area
        ang = 2.0 * np.pi * np.arange(n) / n
        rings.append(rho * np.stack([np.cos(ang), np.sin(ang)], axis=1))
        energy.append(np.full(n, (np.exp(-2.0 * bound * bound) - np.exp(-2.0 * outer * outer)) / n))
        bound = outer
    uv: F64 = np.concatenate(rings)
    share: F64 = np.concatenate([np.atleast_1d(e) for e in energy])
    share = share / share.sum()
    uv.flags.writeable = False
    share.flags.writeable = False
    return uv, share


def beam_axes(d: Floating) -> tuple[F64, F64]:
    """The footprint's axes of beams ``d`` (B, 3) unit (sensor frame): horizontal
    ``h = normalize(up x d)`` (+X for a beam along +-Y) and vertical ``v = d x h``, each
    (B, 3) float64 unit, orthogonal to ``d`` and to each other. (The cross products and
    norms written out: ``np.cross``'s and ``np.linalg.norm``'s operations, in their
    order, so their values bit for bit, in half the time; tests/test_bundle.py.)"""
    d = np.asarray(d, dtype=np.float64)
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    u0, u1, u2 = UP[0], UP[1], UP[2]
    h = np.empty(d.shape)
    h[:, 0] = u1 * z - u2 * y
    h[:, 1] = u2 * x - u0 * z
    h[:, 2] = u0 * y - u1 * x
    norm = _norm3(h)
    flat = norm < _VERTICAL
    h[flat] = (1.0, 0.0, 0.0)
    norm[flat] = 1.0
    h /= norm[:, None]
    h0, h1, h2 = h[:, 0], h[:, 1], h[:, 2]
    v = np.empty(d.shape)
    v[:, 0] = y * h2 - z * h1
    v[:, 1] = z * h0 - x * h2
    v[:, 2] = x * h1 - y * h0
    v /= _norm3(v)[:, None]
    return h, v


def _norm3(a: F64) -> F64:
    """(N,) float64 Euclidean norm of the rows of ``a`` (N, 3) float64:
    ``np.linalg.norm(a, axis=1)``'s value (the squares summed in order), faster."""
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    norm: F64 = np.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
    return norm


def sub_rays_per_beam(s: SensorSettings) -> int:
    """S, the sub-rays :func:`footprint` casts per beam under settings ``s``: 1 without
    divergence (or without the return settings), else ``samples_per_beam``."""
    S = int(setting_value(s, "samples_per_beam"))
    div = float(setting_value(s, "beam_divergence")) or float(setting_value(s, "beam_divergence_vertical"))
    return 1 if S <= 1 or div == 0.0 else S


def specular_acceptance(s: SensorSettings) -> float | None:
    """rad: the half-angle of incidence within which a glass surface's mirror reflection
    returns into the sensor of settings ``s``: half its larger full beam divergence
    (``beam_divergence``, ``beam_divergence_vertical``), the reflected beam then overlapping
    the outgoing one; None without a divergence (the caster's default,
    :data:`~blensor_addon.raycast.trace.SPECULAR_ACCEPTANCE`, half of seed 001's 4 mrad)."""
    div = max(float(setting_value(s, "beam_divergence")), float(setting_value(s, "beam_divergence_vertical")))
    return 0.5 * div if div > 0.0 else None


def footprint(s: SensorSettings, pattern: RayPattern) -> SubRays:
    """The sub-rays of the beams of ``pattern`` (B rays) under settings ``s``
    (:class:`~.returns.ReturnSettings`: ``samples_per_beam``, ``beam_divergence``,
    ``beam_divergence_vertical``, ``focus_distance``), beam-major; module docstring for
    the geometry and the shares. With ``samples_per_beam`` 1 or no divergence: the
    beams themselves (share 1), exactly as the one-ray model cast them."""
    n = len(pattern)
    o = None if pattern.origins is None else pattern.origins.astype(np.float64)
    S = int(setting_value(s, "samples_per_beam"))
    div_h = float(setting_value(s, "beam_divergence"))
    div_v = float(setting_value(s, "beam_divergence_vertical")) or div_h
    if S <= 1 or (div_h == 0.0 and div_v == 0.0):
        return SubRays(directions=pattern.directions.astype(np.float64), origins=o, times=pattern.timestamp,
                       beam=np.arange(n, dtype=np.int64), share=np.ones(n), per_beam=1)
    uv, share = disc_pattern(S)
    d = pattern.directions.astype(np.float64)
    d /= _norm3(d)[:, None]
    h, v = beam_axes(d)
    a = np.tan(0.5 * div_h * uv[:, 0])  # (S,) offsets along h and v at unit distance
    b = np.tan(0.5 * div_v * uv[:, 1])
    c = 1.0 / np.sqrt(1.0 + a * a + b * b)  # |d + a h + b v| = sqrt(1 + a^2 + b^2): d, h, v orthonormal
    # (B, S, 3): sub-ray j of beam b is (c_j, a_j c_j, b_j c_j) in the beam's basis (d, h, v)
    dirs = np.matmul(np.stack([c, a * c, b * c], axis=1), np.stack([d, h, v], axis=1))
    f = float(setting_value(s, "focus_distance"))
    origins = None
    if f > 0.0:  # through the focus F = o + f d, from the aperture plane: F - f / (d_j . d) d_j
        focus = f * d if o is None else o + f * d
        origins = (focus[:, None, :] - (f / c)[None, :, None] * dirs).reshape(-1, 3)
    elif o is not None:
        origins = np.repeat(o, S, axis=0)
    return SubRays(directions=dirs.reshape(-1, 3), origins=origins, times=np.repeat(pattern.timestamp, S),
                   beam=np.repeat(np.arange(n, dtype=np.int64), S), share=np.tile(share, n), per_beam=S)


def _starts(keys: Array) -> I64:
    """(G,) int64 first index of each run of equal values of ``keys`` (sorted)."""
    new = np.ones(keys.shape[0], bool)
    new[1:] = keys[1:] != keys[:-1]
    return np.flatnonzero(new)


def _first_of_groups(key: F64, starts: I64) -> I64:
    """Index of the row with the largest ``key`` in each run of rows (``starts``, (G,)),
    the earliest row on a tie; (G,) int64. O(rows), no sort. A run of one row is that
    row: when most runs have one row (one echo per beam), only the longer runs are
    searched."""
    n = key.shape[0]
    counts = np.diff(np.append(starts, n))
    several = counts > 1
    many = np.flatnonzero(several)
    if 4 * many.size < starts.shape[0]:
        out = np.array(starts, dtype=np.int64)
        if many.size:
            rows = np.flatnonzero(np.repeat(several, counts))  # the longer runs' rows
            cm = counts[many]
            out[many] = rows[_first_of_runs(key[rows], np.cumsum(cm) - cm, cm)]
        return out
    return _first_of_runs(key, starts, counts)


def _first_of_runs(key: F64, starts: I64, counts: I64) -> I64:
    """:func:`_first_of_groups` of every run (``counts`` rows from each of ``starts``)."""
    n = key.shape[0]
    top = np.maximum.reduceat(key, starts)
    at = np.where(key == np.repeat(top, counts), np.arange(n), n)
    return np.minimum(np.minimum.reduceat(at, starts), starts + counts - 1)  # NaN keys: the last row


def _weighted_range(r: F64, wts: F64, starts: I64) -> F64:
    """Per run (``starts`` of the runs of the rows), the ``wts``-weighted mean of ``r``,
    as ``r[start] + sum w (r - r[start]) / sum w`` (a run of one row gives its ``r``
    exactly); a run whose weights sum to 0 takes the plain mean."""
    counts = np.diff(np.append(starts, r.shape[0]))
    r0 = r[starts]
    dr = r - np.repeat(r0, counts)
    wsum = np.add.reduceat(wts, starts) if r.size else np.zeros(0)
    num = np.add.reduceat(wts * dr, starts) if r.size else np.zeros(0)
    plain = np.add.reduceat(dr, starts) / counts if r.size else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(wsum > 0.0, num / np.where(wsum > 0.0, wsum, 1.0), plain)
    out: F64 = r0 + mean
    return out


def _cos_incidence(hits: Hits, rows: I64) -> F64:
    """(C,) float64 |cos| of the incidence angle of the rows ``rows`` of ``hits``: from
    their ``normal`` and ``last_dir`` where the hits keep ``last_dir``, the formula of
    ``raycast.trace.facing_normals`` row by row (so the values are its values, bit for
    bit), without the normals' flip ``hits.cos_incidence`` computes for every row; else
    ``hits.cos_incidence[rows]``."""
    last_dir = hits.last_dir
    if last_dir is None:
        return np.asarray(hits.cos_incidence)[rows]
    normal = hits.normal
    # every row's (a 1-D gather after is cheaper than gathering the (N, 3) rows first)
    cos = np.einsum("ij,ij->i", np.asarray(normal, dtype=np.float64), np.asarray(last_dir, dtype=np.float64))
    inc: F64 = np.abs(cos[rows])
    return inc


def rank_returns(beam: Integer, rng_range: Floating) -> tuple[U8, U8]:
    """``return_number`` (1-based, nearest first within each beam) and
    ``number_of_returns`` (the beam's returns) of K returns of beams ``beam`` (K,) int at
    ranges ``rng_range`` (K,) m, in any row order; two (K,) uint8 (LAS 1.4's fields). For
    a stage that drops or adds returns after :func:`form_returns` (detection, weather)."""
    beam = np.asarray(beam)
    k = beam.shape[0]
    if k == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    order = np.lexsort((np.arange(k), np.asarray(rng_range), beam))
    sb = beam[order]
    st = _starts(sb)
    counts = np.diff(np.append(st, k))
    pos = np.arange(k) - np.repeat(st, counts)
    num, tot = np.empty(k, np.int64), np.empty(k, np.int64)
    num[order] = pos + 1
    tot[order] = np.repeat(counts, counts)
    return np.minimum(num, 255).astype(np.uint8), np.minimum(tot, 255).astype(np.uint8)


def _order_by_beam_range(eb: I64, er: F64) -> I64:
    """``np.lexsort((er, eb))`` of beams ``eb`` (E,) int >= 0 and finite ranges ``er``
    (E,) float64, about 3x faster: one argsort of ``er + eb * span`` with ``span`` more
    than twice the largest |range| (the beams' key intervals do not overlap, and adding
    a constant keeps the ranges' order: rounding is monotonic), then each run of equal
    keys (one beam: equal ranges, or ranges too close to part after the addition) by
    range, then row (the lexsort is stable)."""
    if eb.size < 2:
        return np.arange(eb.size)
    span = 2.0 * float(np.abs(er).max()) + 1.0
    if not np.isfinite(span):
        lex: I64 = np.lexsort((er, eb))
        return lex
    key = er + eb * span
    o = np.argsort(key)
    k = key[o]
    eq = k[1:] == k[:-1]
    if not eq.any():
        return o
    if not (eb[o[:-1][eq]] == eb[o[1:][eq]]).all():
        lex = np.lexsort((er, eb))
        return lex
    t = np.flatnonzero(np.r_[eq, False] | np.r_[False, eq])  # places in runs of equal keys
    run = np.cumsum(np.r_[True, ~eq])[t]
    ot = o[t]
    o[t] = ot[np.lexsort((ot, er[ot], run))]  # each run (one beam) by range, then row
    return o


def _merge_extra(rng_all: F64, ok: Bool, ray: I64, beam: I64, S: int, R: int) -> I64:
    """The candidate rows ``ok`` (bool (R + E,)) ordered by beam, then range, then row:
    ``lexsort((range, beam))`` of them, computed without sorting all rows. The first R
    rows are the sub-rays, beam-major (S per beam): each beam's S ranges are sorted, and
    the E extra rows (behind glass, beam ``beam[ray]``) are sorted among themselves and
    inserted after the beam's candidates of smaller or equal range (their row indices are
    larger). About 4x faster than the lexsort for 10^6 rows."""
    key = np.where(ok[:R], rng_all[:R], np.inf).reshape(-1, S)
    main: I64
    if S == 1:  # one sub-ray per beam: the candidates in row order (what sorting rows of one gives)
        main = np.flatnonzero(ok[:R])
    else:
        main = (np.argsort(key, axis=1, kind="stable") + (np.arange(key.shape[0]) * S)[:, None]).ravel()
        main = main[ok[main]]
    extra = R + np.flatnonzero(ok[R:])
    if extra.size == 0:
        return main
    eb, er = beam[ray[extra]], rng_all[extra]
    o = _order_by_beam_range(eb, er)
    extra, eb, er = extra[o], eb[o], er[o]
    ok_per_beam = ok[:R].reshape(-1, S).sum(axis=1)
    before = np.cumsum(ok_per_beam) - ok_per_beam  # candidates of the beams before
    return np.insert(main, before[eb] + (key[eb] <= er[:, None]).sum(axis=1), extra)


def form_returns(s: SensorSettings, sub: SubRays, hits: Hits, max_range: float, rng: np.random.Generator,
                 select: bool = True) -> Returns:
    """The returns of the beams: the candidates (rows of ``hits``, the cast of ``sub``;
    ``hits.ray`` is each row's sub-ray, ``hits.weight`` its one-way path transmission;
    rows past the sub-rays are extra path ends behind glass) that hit within
    ``max_range`` (m), grouped into echoes along each beam and chosen as ``s`` says
    (``divergence_algorithm``, ``returns``, ``max_returns``, ``echo_separation``; module
    docstring). ``rng``: the generator of ``random``'s draws (one uniform per beam with a
    candidate, in beam order). Rows in beam order, nearest first within a beam.
    ``select`` False: every echo of ``echoes`` (the sensor chooses after detection,
    :func:`select_returns`). An echo's strength is its received power, ``energy / r^2``
    (:func:`power`). Vectorized: no loop over beams."""
    rng_all = np.asarray(hits.range)
    ok = np.asarray(hits.hit) & (rng_all <= max_range)
    S, R = int(sub.per_beam), sub.beam.shape[0]
    # the candidates' rows of hits by beam, then range, then row (ties: row order)
    if ok.shape[0] != R:  # extra path ends (glass, alpha): merged into the sub-rays' order
        rows = _merge_extra(rng_all, ok, np.asarray(hits.ray), sub.beam, S, R)
    elif S == 1:  # one row per beam, in beam order
        rows = np.flatnonzero(ok)
    else:  # one row per sub-ray, beam-major: sort each beam's S ranges
        key = np.where(ok, rng_all, np.inf).reshape(-1, S)
        rows = (np.argsort(key, axis=1, kind="stable") + (np.arange(key.shape[0]) * S)[:, None]).ravel()
        rows = rows[ok[rows]]
    # the fields the echoes need, of the candidates only (a sweep's misses cost nothing more)
    ray = np.asarray(hits.ray)[rows] if ok.shape[0] != R else rows  # the first R rows: row = sub-ray
    b = sub.beam[ray]
    w = np.asarray(hits.weight)[rows].astype(np.float64)
    refl = np.asarray(hits.reflectivity)[rows]
    geo = sub.share[ray] * (w * w)
    rt = geo * refl
    en = rt * _cos_incidence(hits, rows)
    rr = np.asarray(rng_all[rows], dtype=np.float64)
    pw = power(en, rr)  # what the receiver compares: the received power of each candidate
    algorithm = setting_value(s, "divergence_algorithm")
    mode = setting_value(s, "returns")
    n = b.shape[0]
    if n == 0:
        e = np.zeros(0)
        return Returns(beam=np.zeros(0, np.int64), row=np.zeros(0, np.int64), range=e,
                       reflectivity=refl[:0], returned=e, energy=e, return_number=np.zeros(0, np.uint8),
                       number_of_returns=np.zeros(0, np.uint8), weather=np.zeros(0, bool))
    if S == 1 and ok.shape[0] == R:  # one candidate per beam: each is its beam's one echo, as is
        one = np.ones(n, np.uint8)
        return Returns(beam=b, row=rows, range=rr, reflectivity=refl, returned=rt, energy=en,
                       return_number=one, number_of_returns=one.copy(), weather=np.zeros(n, bool))
    bstart = _starts(b)
    if algorithm == "echoes":
        new = np.zeros(n, bool)
        new[bstart] = True
        new[1:] |= np.diff(rr) > float(setting_value(s, "echo_separation"))
        starts = np.flatnonzero(new)
    else:  # one group per beam: every candidate of the beam
        starts = bstart
    g_beam = b[starts]
    if algorithm == "echoes" or algorithm == "average":
        # the range: the centroid of the received power (the waveform's), the surface: the strongest;
        # worked out for the groups of several candidates only (a group of one is that candidate)
        counts = np.diff(np.append(starts, n))
        # (and those whose one weight or range is not finite: the general formula's NaN kept)
        several = ((counts > 1) | ~np.isfinite(pw[starts]) | ~np.isfinite(geo[starts])
                   | ~np.isfinite(rr[starts]))
        many = np.flatnonzero(several)
        g_energy, g_returned = en[starts], rt[starts]
        g_range, rep = rr[starts], starts.copy()
        if many.size:
            cm = counts[many]
            rows_m = np.flatnonzero(np.repeat(several, counts))  # their candidates
            st_m = np.cumsum(cm) - cm  # the groups' starts among rows_m
            g_energy[many] = np.add.reduceat(en[rows_m], st_m)
            g_returned[many] = np.add.reduceat(rt[rows_m], st_m)
            pw_m = pw[rows_m]
            wts = np.where(np.repeat(g_energy[many] > 0.0, cm), pw_m, geo[rows_m])
            g_range[many] = _weighted_range(rr[rows_m], wts, st_m)
            rep[many] = rows_m[_first_of_groups(pw_m, st_m)]
    elif algorithm == "first":
        g_energy = np.add.reduceat(en, starts)
        g_returned = np.add.reduceat(rt, starts)
        rep = starts
        g_range = rr[rep]
    elif algorithm == "random":
        g_energy = np.add.reduceat(en, starts)
        g_returned = np.add.reduceat(rt, starts)
        counts = np.diff(np.append(starts, n))
        p = np.where(np.repeat(g_energy > 0.0, counts), pw, geo)
        csum = np.cumsum(p)
        before = np.repeat(csum[starts] - p[starts], counts)
        within = csum - before  # cumulative weight within the beam
        total = np.add.reduceat(p, starts)
        u = rng.random(starts.shape[0]) * total
        # the first candidate whose cumulative weight exceeds the draw
        over = within > np.repeat(u, counts)
        last = starts + counts - 1
        pick = np.where(over, np.arange(n), n)
        rep = np.minimum(np.minimum.reduceat(pick, starts), last)
        g_range = rr[rep]
    else:
        raise ValueError("divergence_algorithm must be one of echoes, first, average, random, "
                         f"got {algorithm!r}")
    if algorithm == "echoes" and select:
        sel = _select_echoes(mode, g_beam, power(g_energy, g_range), int(setting_value(s, "max_returns")))
        g_beam, g_range, rep = g_beam[sel], g_range[sel], rep[sel]
        g_returned, g_energy = g_returned[sel], g_energy[sel]
    ebeam: I64 = g_beam  # every echo (not selected: all of them)
    est = _starts(ebeam)
    counts = np.diff(np.append(est, ebeam.shape[0]))
    number = np.arange(ebeam.shape[0]) - np.repeat(est, counts) + 1
    total = np.repeat(counts, counts)
    pick = rep  # candidate of each return's surface
    return Returns(beam=ebeam, row=rows[pick], range=g_range, reflectivity=refl[pick],
                   returned=g_returned, energy=g_energy,
                   return_number=number.astype(np.uint8), number_of_returns=total.astype(np.uint8),
                   weather=np.zeros(ebeam.shape[0], bool))


def power(energy: Floating, r: Floating) -> F64:
    """(K,) float64 received power (relative) of returns of ``energy`` (K,) (R0 cos theta
    over the footprint, the atmosphere's transmission included) at ranges ``r`` (K,) m:
    ``energy / r^2``, the laser radar equation's range term (Winiwarter et al. 2022,
    Eq. 1): what a receiver's "strongest" compares."""
    r = np.maximum(np.asarray(r, dtype=np.float64), 1e-9)
    return np.asarray(energy, dtype=np.float64) / (r * r)


def select_returns(s: SensorSettings, beam_key: Array, r: F64, energy: F64) -> I64 | None:
    """Indices (ascending) of the returns settings ``s`` report, of K detected returns in
    runs of one beam each (``beam_key`` (K,): equal values are one beam, its rows
    contiguous and nearest first) at ranges ``r`` (K,) m with ``energy`` (K,): ``returns``
    (``max_returns``) of :data:`~.returns.RETURN_MODES` by received power (:func:`power`)
    for ``divergence_algorithm = echoes``; the strongest for the other algorithms (their
    one return, or an atmosphere's return beside it). None: every row (no beam has two)."""
    key = np.asarray(beam_key)
    k = key.shape[0]
    if k < 2 or not (key[1:] == key[:-1]).any():
        return None
    echoes = setting_value(s, "divergence_algorithm") == "echoes"
    mode = setting_value(s, "returns") if echoes else "strongest"
    return _select_echoes(mode, key, power(energy, r), int(setting_value(s, "max_returns")))


def _select_echoes(mode: str, g_beam: Array, g_power: F64, max_returns: int) -> I64:
    """Indices (ascending: beam order, nearest first) of the echoes ``mode`` reports, of
    E echoes in runs of one beam (``g_beam`` (E,)), nearest first, with received powers
    ``g_power`` (E,)."""
    e = g_beam.shape[0]
    bst = _starts(g_beam)
    counts = np.diff(np.append(bst, e))
    if mode == "first":
        return bst
    if mode == "last":
        last: I64 = bst + counts - 1
        return last
    if mode == "all":
        return np.flatnonzero(np.arange(e) - np.repeat(bst, counts) < max_returns)
    # the strongest and the second strongest of each beam (the nearer on a tie), no sort
    strong = _first_of_groups(g_power, bst)
    if mode == "strongest":
        return strong
    rest = g_power.copy()
    rest[strong] = -np.inf
    second = _first_of_groups(rest, bst)
    second = second[counts > 1]
    if mode == "dual_ouster":
        return np.sort(np.concatenate([strong, second]))
    if mode == "dual":  # strongest and last; the second strongest when the last is the strongest
        last = bst + counts - 1
        other = np.where(strong == last, -1, last)  # the last where it is not the strongest
        alt = np.full(bst.shape[0], -1)
        alt[np.flatnonzero(counts > 1)] = second
        other = np.where(other < 0, alt, other)
        return np.sort(np.concatenate([strong, other[other >= 0]]))
    raise ValueError(f"returns must be one of strongest, last, first, dual, dual_ouster, all, got {mode!r}")


#: the first row of each run of equal keys (rows grouped by beam), for the stages after this one
run_starts = _starts

__all__ = ["SubRays", "run_starts", "specular_acceptance", "footprint", "form_returns", "select_returns", "power",
           "sub_rays_per_beam",
           "disc_pattern", "ring_counts", "beam_axes", "rank_returns", "UP"]
