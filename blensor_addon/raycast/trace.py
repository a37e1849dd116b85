"""Tracing rays through mirrors on top of any :class:`~.base.Backend`.

Total reflection (seed 000 section 3.5; reference section 3.3): a ray that hits a
mirror material does not return there; it reflects about the surface normal,
``d' = d - 2 (d . n) n``, and continues. The range it finally reports is the
accumulated path, so the point is placed along the original ray behind the mirror
(a virtual point). Unlike the original, the number of reflections is capped
(``max_bounces``) and the reflection uses the triangle's geometric normal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .base import Backend

#: Offset (m) of a reflected ray's origin from the mirror, along the normal, so it does
#: not hit the mirror it leaves; relative part for large coordinates.
BOUNCE_OFFSET = 1e-4
BOUNCE_OFFSET_REL = 1e-6


@dataclass
class TraceResult:
    """Outcome of every ray (N rays).

    Attributes:
        range (N,) float64 m: accumulated path to the final surface (+inf if none).
        hit (N,) bool: ended on a non-mirror surface within the range limit.
        instance, primitive (N,) int32: final surface (-1 if none).
        normal (N, 3) float32: unit geometric normal of the final surface (world).
        last_dir (N, 3) float32: direction of the final segment (world).
        bounces (N,) uint8: mirror reflections along the path.
    """

    range: np.ndarray
    hit: np.ndarray
    instance: np.ndarray
    primitive: np.ndarray
    normal: np.ndarray
    last_dir: np.ndarray
    bounces: np.ndarray

    _FIELDS = ("range", "hit", "instance", "primitive", "normal", "last_dir", "bounces")

    def take(self, idx: np.ndarray) -> "TraceResult":
        """The rays ``idx`` (int array or bool mask), in order."""
        return TraceResult(*(getattr(self, f)[idx] for f in self._FIELDS))

    @classmethod
    def concat(cls, parts: list["TraceResult"]) -> "TraceResult":
        """Rays of ``parts`` one after the other (at least one part)."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls._FIELDS))


def trace(backend: Backend, origins: np.ndarray, directions: np.ndarray, max_range: float,
          is_mirror: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
          max_bounces: int = 8) -> TraceResult:
    """Cast rays and follow mirror reflections.

    Args:
        backend: ray caster holding the scene.
        origins, directions (N, 3) world frame; directions unit length.
        max_range: longest accumulated path searched (m).
        is_mirror: maps (instance (H,) int32, primitive (H,) int32) to (H,) bool; None =
            no mirrors.
        max_bounces: reflections followed; a ray still on a mirror after that many
            gives no return.
    """
    o = np.ascontiguousarray(origins, dtype=np.float32).reshape(-1, 3)
    d = np.ascontiguousarray(directions, dtype=np.float32).reshape(-1, 3)
    n = o.shape[0]
    total = np.zeros(n, np.float64)
    hit = np.zeros(n, bool)
    inst = np.full(n, -1, np.int32)
    prim = np.full(n, -1, np.int32)
    normal = np.zeros((n, 3), np.float32)
    last_dir = d.copy()
    bounces = np.zeros(n, np.uint8)
    active = np.arange(n)
    cur_o, cur_d = o, d
    for bounce in range(max_bounces + 1):
        if active.size == 0:
            break
        h = backend.intersect(cur_o, cur_d, (max_range - total[active]).astype(np.float32))
        got = h.instance >= 0
        idx = active[got]
        total[idx] += h.t[got]
        inst[idx] = h.instance[got]
        prim[idx] = h.primitive[got]
        normal[idx] = h.normal[got]
        last_dir[idx] = cur_d[got]
        mir = is_mirror(h.instance[got], h.primitive[got]) if is_mirror is not None \
            else np.zeros(idx.shape, bool)
        hit[idx[~mir]] = True
        if bounce == max_bounces or not mir.any():
            break
        # reflect the mirror hits and continue
        sel = np.flatnonzero(got)[mir]
        dd = cur_d[sel].astype(np.float64)
        nn = h.normal[sel].astype(np.float64)
        p = cur_o[sel].astype(np.float64) + dd * h.t[sel, None].astype(np.float64)
        r = dd - 2.0 * np.einsum("ij,ij->i", dd, nn)[:, None] * nn
        side = np.sign(np.einsum("ij,ij->i", r, nn))[:, None]
        eps = BOUNCE_OFFSET + BOUNCE_OFFSET_REL * np.abs(p).max(axis=1, keepdims=True)
        active = idx[mir]
        bounces[active] += 1
        cur_o = (p + side * nn * eps).astype(np.float32)
        cur_d = r.astype(np.float32)
    total[~hit] = np.inf
    return TraceResult(total, hit, inst, prim, normal, last_dir, bounces)
