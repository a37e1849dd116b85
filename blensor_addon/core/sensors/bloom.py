"""Saturation and blooming of the radiometric receiver (numpy only; docs/physics.md,
"Retroreflectors, saturation and blooming").

A retroreflector (a traffic sign's sheeting, a licence plate) returns hundreds of times the
power of paint: the unit's detector and its electronics saturate, and stray light inside
the optics (the lens, the window, the neighbouring detector pixels) puts a weaker copy of
that echo into the neighbouring beams and columns: a halo of points at the sign's range
around the sign ("blooming", internal multipath glare: Gump, Henley, Cheong, Prabhakara and
Gupta, 'Ghosts in the Point Clouds: De-glaring LiDAR in the Transient Domain', arXiv
2605.24753, 2026, abstract and introduction: light from a bright or retroreflective surface
spreads across the pixel array, retroreflectors such as road signs and licence plates being
the most common source). BlenSor's model:

- **saturation**: a return whose received power ``signal`` (relative units, 1.0 = a 100 %
  Lambertian target at normal incidence at the receiver's full-overlap range: the
  strongest echo any diffuse target can give, :data:`SATURATION_SIGNAL`) is at or above
  that level saturates; its bytes are clipped at the unit's maximum by the packet
  encoders (Velodyne 255, Ouster REFLECTIVITY 255 and SIGNAL 65535,
  io/packets/reported.py).
- **blooming** (:func:`bloom_sources`): each ray within ``beams`` lasers and ``columns``
  columns of a saturated return whose own echo's power is below the bloom power,
  :data:`BLOOM_FRACTION` x the saturated return's, takes a return at the saturated
  return's range with that power, labelled ``bloom = 1`` (its clean ``range`` and ``xyz``
  stay those of its own surface: the ground truth is the scene's). The halo reaches
  ``bloom_beams`` lasers and ``bloom_columns`` columns either side of the saturated return
  (half-widths; the sensor's settings). DERIVED: no datasheet gives a
  halo's width or strength; the defaults (1 beam, 2 columns) and :data:`BLOOM_FRACTION`
  are BlenSor's assumptions, set per scan. Rays with no surface at all (sky) are not cast
  into the halo (only rays that met a surface are received).
"""
from __future__ import annotations

import numpy as np

from ..ndtypes import F64, I64, Integer, Floating

#: received power (relative, module docstring) at and above which a return saturates
#: (DERIVED: the power of a 100 % Lambertian target at normal incidence at the full-overlap
#: range, the strongest diffuse echo)
SATURATION_SIGNAL = 1.0
#: a saturated return's bloom power relative to its own (DERIVED: an assumed stray-light level of
#: 10^-3, no figure published)
BLOOM_FRACTION = 1e-3


def bloom_sources(channel: Integer, column: Integer, signal: Floating, beams: int, columns: int,
                  turn_columns: int = 0, saturation: float = SATURATION_SIGNAL,
                  fraction: float = BLOOM_FRACTION) -> I64:
    """(N,) int64: for each of N returns the row of the saturated return whose halo it
    takes (module docstring), -1 where none.

    Args:
        channel (N,) int: laser of each return; column (N,) int: its column of the scan's
            grid; signal (N,) float: received power (relative).
        beams, columns: the halo's half-width in lasers and columns (>= 0; 0 and 0: no halo).
        turn_columns: columns a turn (> 0: the column index wraps around), 0: no wrap.
        saturation: power from which a return saturates; fraction: bloom power over the
            saturated return's.
    Returns:
        the source row per return; a return in several halos takes the strongest source's.
        A saturated return is never a bloom. Deterministic (no draws).
    """
    sig = np.asarray(signal, dtype=np.float64)
    n = sig.shape[0]
    out = np.full(n, -1, np.int64)
    sat = np.flatnonzero(sig >= saturation)
    if sat.size == 0 or (beams <= 0 and columns <= 0) or n == 0:
        return out
    ch = np.asarray(channel, dtype=np.int64)
    col = np.asarray(column, dtype=np.int64)
    span = int(max(int(col.max()) + 1 + 2 * columns, turn_columns, 1))
    key = ch * span + (col % span)
    order = np.argsort(key, kind="stable")
    skey = key[order]
    best = np.full(n, -np.inf)
    # strongest sources first, so a target in several halos keeps the strongest
    src_sorted = sat[np.argsort(-sig[sat], kind="stable")]
    for db in range(-beams, beams + 1):
        for dc in range(-columns, columns + 1):
            if db == 0 and dc == 0:
                continue
            c = col[src_sorted] + dc
            if turn_columns > 0:
                c = c % turn_columns
            k = (ch[src_sorted] + db) * span + c
            ok = (c >= 0) & (ch[src_sorted] + db >= 0)
            at = np.searchsorted(skey, k)
            ok &= at < skey.shape[0]
            ok[ok] &= skey[at[ok]] == k[ok]
            if not ok.any():
                continue
            tgt = order[at[ok]]
            src = src_sorted[ok]
            # every echo of the target ray: rows with the same key after the first
            level = fraction * sig[src]
            take = (sig[tgt] < level) & (sig[tgt] < saturation) & (level > best[tgt])
            out[tgt[take]] = src[take]
            best[tgt[take]] = level[take]
    return out


def bloom_signal(signal: Floating, source: I64, fraction: float = BLOOM_FRACTION) -> F64:
    """(N,) float64: the received power of each return after blooming: ``fraction`` x its
    source's where ``source`` (N,) (:func:`bloom_sources`) is >= 0, else its own
    ``signal`` (N,)."""
    sig = np.asarray(signal, dtype=np.float64)
    out: F64 = sig.copy()
    b = source >= 0
    out[b] = fraction * sig[source[b]]
    return out


__all__ = ["SATURATION_SIGNAL", "BLOOM_FRACTION", "bloom_sources", "bloom_signal"]
