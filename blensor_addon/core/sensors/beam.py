"""Beam divergence and multiple returns (issue 22, section 2): a beam's footprint sampled
by sub-rays (:func:`footprint`) and the echoes its candidates form along the beam
(:func:`form_returns`).

CONTRACT STUB: one sub-ray per beam (the axis) and the strongest candidate per beam.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .patterns import RayPattern
from .returns import Returns


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

    directions: np.ndarray
    origins: np.ndarray | None
    times: np.ndarray
    beam: np.ndarray
    share: np.ndarray
    per_beam: int


def footprint(s, pattern: RayPattern) -> SubRays:
    """The sub-rays of the beams of ``pattern`` (B rays) under settings ``s``
    (:class:`~.returns.ReturnSettings`). Stub: S = 1, the beams themselves."""
    n = len(pattern)
    o = None if pattern.origins is None else pattern.origins.astype(np.float64)
    return SubRays(directions=pattern.directions.astype(np.float64), origins=o, times=pattern.timestamp,
                   beam=np.arange(n, dtype=np.int64), share=np.ones(n), per_beam=1)


def form_returns(s, sub: SubRays, hits, max_range: float, rng: np.random.Generator) -> Returns:
    """The returns of the beams: the candidates (rows of ``hits``, the cast of ``sub``;
    ``hits.ray`` is each row's sub-ray, ``hits.weight`` its one-way path transmission)
    that hit within ``max_range`` (m), grouped into echoes along each beam and chosen as
    ``s`` says. Rows in beam order, nearest first within a beam. Stub: the strongest
    candidate of each beam, one sub-ray per beam."""
    ok = np.asarray(hits.hit) & (np.asarray(hits.range) <= max_range)
    rows = np.flatnonzero(ok)
    cand = hits.take(rows)  # the candidates only: a sweep's misses cost nothing more
    ray = np.asarray(cand.ray)
    beam = sub.beam[ray]
    w = np.asarray(cand.weight, dtype=np.float64)
    refl = np.asarray(cand.reflectivity)
    returned = sub.share[ray] * (w * w) * refl
    energy = returned * np.asarray(cand.cos_incidence)
    # strongest per beam: sort by beam, then energy descending, first row wins
    order = np.lexsort((rows, -energy, beam))
    first = np.ones(order.shape[0], bool)
    first[1:] = beam[order][1:] != beam[order][:-1]
    pick = np.sort(order[first])
    k = pick.shape[0]
    return Returns(beam=beam[pick], row=rows[pick], range=np.asarray(cand.range, dtype=np.float64)[pick],
                   reflectivity=refl[pick], returned=returned[pick], energy=energy[pick],
                   return_number=np.ones(k, np.uint8), number_of_returns=np.ones(k, np.uint8),
                   weather=np.zeros(k, bool))
