"""Tracing rays through mirrors, glass and partly transparent (alpha) surfaces on top of
any :class:`~.base.Backend`: owns :func:`trace`, its :class:`TraceResult` and
:func:`facing_normals`.

Total reflection (seed 000 section 3.5; reference section 3.3): a ray that hits a
mirror material does not return there; it reflects about the surface normal,
``d' = d - 2 (d . n) n``, and continues. The range it finally reports is the
accumulated path, so the point is placed along the original ray behind the mirror
(a virtual point). Unlike the original, the number of reflections is capped
(``max_bounces``) and the reflection uses the triangle's geometric normal.

Glass and alpha (docs/physics.md, "Glass and alpha"; with ``optics``): seed 000 section 3 says that
"another part may pass through the object (in the case of transparent materials) in a
possibly different direction". A path that meets a surface of alpha a < 1 passes it
unchanged with probability 1 - a (one seeded draw). A path that meets glass (material
transmission t > 0) ends there (the surface is a candidate return) and splits into a
reflected path (mirror direction) and a transmitted path (Snell's law), each carrying
its share of the energy (Fresnel equations for unpolarized light,
:mod:`blensor_addon.core.optics`) in its one-way ``weight``:

* a **thin pane** (a face whose mesh has no back face behind it along the ray) is two
  parallel surfaces of no thickness: reflected ``(1 - t) F + t R_slab``, transmitted
  ``t T_slab`` straight on (no net deviation; :func:`~..core.optics.thin_slab`, the
  internal reflections summed), diffuse ``(1 - t)(1 - F)``;
* **solid glass** (a closed, consistently wound mesh) refracts entering and leaving:
  reflected ``F``, refracted ``t (1 - F)``, diffuse ``(1 - t)(1 - F)``, with total
  internal reflection (F = 1) leaving it beyond the critical angle; inside, the range
  counts the path ``ior`` times (time of flight: light is slower in glass).

Which one a face is, is found by a probe cast straight on from the entry point: when the
probe's first hit is on the same instance and that face is seen from its other side
(``sign(d . n)`` opposite to the entry face's, the normals from the winding), the ray
is inside a closed mesh: solid. Otherwise (a miss, another object, or a face of the same
mesh seen from the same side, such as the second pane of double glazing) the face is a
thin pane and the probe's hit is the transmitted path's next hit (no extra cast). The
rule needs closed glass meshes wound consistently (either way round); a path inside
glass treats every glass face it meets as a glass-to-air boundary (nested or touching
glass bodies are not modelled).

The surface's own return: its diffuse part is the material's reflectivity times the
diffuse share ``(1 - t)(1 - F)`` (:attr:`TraceResult.diffuse`), and the specular
reflection goes back into the receiver when the incidence angle is within
``acceptance`` (default :data:`SPECULAR_ACCEPTANCE`; the reflected beam then overlaps
the outgoing one), counted as an extra effective reflectivity equal to the reflected
share (:attr:`TraceResult.specular`): a real LiDAR sees a window pane at normal
incidence. A glass surface with neither (t = 1, off normal) returns nothing: its row has
``hit`` False.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, cast

import numpy as np
from numpy.typing import ArrayLike

from ..core.ndtypes import F32, F64, I32, I64, U8, Array, Bool, Floating
from ..core.optics import fresnel_unpolarized, refract, thin_slab
from .base import Backend, BundlingBackend, ClosestHits

#: Offset (m) of a reflected ray's origin from the mirror, along the normal, so it does
#: not hit the mirror it leaves; relative part for large coordinates.
BOUNCE_OFFSET = 1e-4
BOUNCE_OFFSET_REL = 1e-6
#: One-way weight below which a split path is not followed: its two-way return
#: (weight^2 <= 1e-6 of the surface's reflectivity) is far below any detection limit.
MIN_WEIGHT = 1e-3
#: Alpha surfaces one path may pass; the next alpha surface it meets is opaque.
MAX_ALPHA_PASSES = 64
#: Half-angle (rad) within which a glass surface's specular reflection returns to the
#: sensor: half of seed 001's 4 mrad beam divergence (the reflected beam, turned by twice
#: the incidence angle, still overlaps the receiver's field of view).
SPECULAR_ACCEPTANCE = 2e-3

#: maps the hits (instance (H,) int32, primitive (H,) int32) to a per-hit answer: mirror
#: or not (H,) bool (``is_mirror``), material rows (H,) int32 (``material``)
HitLookup = Callable[[I32, I32], Array]
#: a path's state in :class:`_Tracer` (:data:`_STATE` names, arrays of P rows) or a row
#: set of path ends (:class:`TraceResult` field names)
_Paths = dict[str, Array]


class OpticsLookup(Protocol):
    """The ``optics`` of :func:`trace`
    (:meth:`~blensor_addon.core.materials.MaterialTable.optics`): (transmission, ior,
    alpha) (H,) of the hits (instance, primitive) (H,) int32, or of their material
    ``rows`` (H,) int32 when given."""

    def __call__(self, instance: I32, primitive: I32,
                 rows: I32 | None = None) -> tuple[ArrayLike, ArrayLike, ArrayLike]: ...


class _Cast(Protocol):
    """:meth:`Backend.intersect` as :func:`_first_cast` hands it out."""

    def __call__(self, origins: Floating, directions: Floating, tmax: Floating | float | np.floating[Any],
                 time: Floating | None = None) -> ClosestHits: ...


def facing_normals(normal: Floating, last_dir: Floating) -> tuple[F64, F64]:
    """Geometric normals (N, 3) turned to face the incoming rays (mesh winding varies),
    as (N, 3) float64, and the cosine of the incidence angle (N,) float64 in [0, 1];
    ``last_dir`` (N, 3) is each ray's final direction (world)."""
    n = np.asarray(normal, dtype=np.float64)
    facing = np.einsum("ij,ij->i", n, np.asarray(last_dir, dtype=np.float64))
    # one pass with the sign of each row (a masked in-place flip took 70% longer)
    return n * np.where(facing > 0, -1.0, 1.0)[:, None], np.abs(facing)


@dataclass
class TraceResult:
    """Outcome of every ray (N rays; R >= N rows with ``optics``).

    Attributes:
        range (R,) float64 m: accumulated path to the final surface (+inf if none); inside
            solid glass the path counts ``ior`` times (time of flight).
        hit (R,) bool: ended on a surface that returns (a non-mirror surface; a glass
            surface only with a diffuse or specular return) within the range limit.
        instance, primitive (R,) int32: final surface (-1 if none).
        normal (R, 3) float32: unit geometric normal of the final surface (world).
        last_dir (R, 3) float32: direction of the final segment (world).
        bounces (R,) uint8: reflections and refractions along the path (mirrors, glass).
        bary (R, 2) float32: barycentrics (b1, b2) of the hit on the final triangle
            (:class:`~.base.ClosestHits`), 0 on a miss.
        ray (R,) int64: the cast ray each row belongs to; rows 0..n-1 are the n rays'
            first path ends in ray order, rows after them the extra path ends of rays
            that glass or alpha split (``optics``), in ray order; ``arange`` without them.
        weight (R,) float32 in [0, 1]: the path's one-way transmission (product of its
            Fresnel shares; 1 without splits).
        diffuse (R,) float32 in [0, 1]: share of the final surface's diffuse
            reflectivity that returns: 1 for an opaque surface, ``(1 - t)(1 - F)`` for
            glass (module docstring).
        specular (R,) float32 in [0, 1]: effective reflectivity of the final surface's
            specular reflection back into the sensor (glass within the acceptance
            angle), else 0. The surface's effective reflectivity is
            ``reflectivity * diffuse + specular``.
        material (R,) int32 or None: the final surfaces' material rows, when
            :func:`trace` was given ``material`` (each hit looked up once); else None.
    """

    range: F64
    hit: Bool
    instance: I32
    primitive: I32
    normal: F32
    last_dir: F32
    bounces: U8
    bary: F32
    ray: I64
    weight: F32
    diffuse: F32
    specular: F32
    material: I32 | None = None

    _FIELDS: ClassVar[tuple[str, ...]] = ("range", "hit", "instance", "primitive", "normal", "last_dir",
                                          "bounces", "bary", "ray", "weight", "diffuse", "specular")

    def take(self, idx: Array | slice) -> "TraceResult":
        """The rows ``idx`` (int array, bool mask or slice), in order."""
        return TraceResult(**{f: getattr(self, f)[idx] for f in self._FIELDS},
                           material=None if self.material is None else self.material[idx])

    @classmethod
    def concat(cls, parts: list["TraceResult"]) -> "TraceResult":
        """Rows of ``parts`` one after the other (at least one part)."""
        mat = None
        mats = [p.material for p in parts]
        if all(m is not None for m in mats):
            mat = np.concatenate([m for m in mats if m is not None])
        return cls(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in cls._FIELDS}, material=mat)


def _reflect(o: F32, d: F32, t: F32, normal: F32) -> tuple[F32, F32]:
    """Mirror reflection of the segments ``o + s d`` (N, 3) that hit at ``t`` (N,) a
    surface of normal ``normal`` (N, 3): the new origins (offset off the surface, to the
    incoming side) and directions, (N, 3) float32 each."""
    dd = d.astype(np.float64)
    nn = normal.astype(np.float64)
    p = o.astype(np.float64) + dd * t[:, None].astype(np.float64)
    r = dd - 2.0 * np.einsum("ij,ij->i", dd, nn)[:, None] * nn
    side = np.sign(np.einsum("ij,ij->i", r, nn))[:, None]
    eps = BOUNCE_OFFSET + BOUNCE_OFFSET_REL * np.abs(p).max(axis=1, keepdims=True)
    return (p + side * nn * eps).astype(np.float32), r.astype(np.float32)


def _first_cast(backend: Backend, bundle: int) -> _Cast:
    """``backend.intersect`` for the rays' first segments: with ``bundle`` where the
    backend takes it (:attr:`Backend.bundles`: a :class:`~.base.BundlingBackend`)."""
    b = int(bundle)
    if b > 1 and backend.bundles:
        bundling = cast(BundlingBackend, backend)
        return lambda o, d, tmax, time=None: bundling.intersect(o, d, tmax, time=time, bundle=b)
    return backend.intersect


def trace(backend: Backend, origins: Floating, directions: Floating, max_range: float,
          is_mirror: HitLookup | None = None,
          max_bounces: int = 8, time: Floating | None = None, optics: OpticsLookup | None = None,
          rng: np.random.Generator | None = None, acceptance: float = SPECULAR_ACCEPTANCE,
          bundle: int = 1, material: HitLookup | None = None
          ) -> TraceResult:
    """Cast rays and follow mirror reflections (and, with ``optics``, glass and alpha:
    module docstring).

    Args:
        backend: ray caster holding the scene.
        origins, directions (N, 3) world frame; directions unit length.
        max_range: longest accumulated path searched (m).
        is_mirror: maps (instance (H,) int32, primitive (H,) int32) to (H,) bool; None =
            no mirrors.
        max_bounces: reflections and refractions followed per path (a glass split counts
            one for each of its two paths); a ray still on a mirror after that many gives
            no return, a glass surface met after that many is a return without splits.
        time: (N,) float32 fraction of the geometry's time step at which each ray is
            cast (see :meth:`Backend.intersect`), or None (0). Every segment of a ray is
            cast at its time: reflections happen where the mirror is at that time.
        optics: maps (instance (H,) int32, primitive (H,) int32) to (transmission (H,)
            float32 in [0, 1], ior (H,) float32, alpha (H,) float32 in [0, 1]) of the hit
            surfaces' materials; None: every non-mirror surface is opaque (no splits) and
            the result is exactly the mirror tracer's.
        rng: the generator of the alpha draws (with ``optics``): one uniform per path
            that meets a surface of alpha < 1, in the order the paths are held (the rays'
            order, then the paths split off, round by round); None: a generator seeded 0.
        acceptance: rad, half-angle of incidence within which a glass surface's specular
            reflection counts as returned (``TraceResult.specular``).
        bundle: the rays come in consecutive groups of that many from one origin at one
            time (the sub-rays of a beam); a backend that can (``Backend.bundles``) casts
            their first segment together. The result is the same.
        material: with ``optics``, maps (instance (H,) int32, primitive (H,) int32; -1:
            a miss) to material rows (H,) int32, and ``optics`` takes them as ``rows=``
            (and then reads nothing else:
            :meth:`~blensor_addon.core.materials.MaterialTable.optics`): the first hits
            are looked up once, their optics read once per material row, and the
            result's ``material`` holds every row's (for speed).
            Ignored without ``optics``.
    Returns:
        :class:`TraceResult`: N rows without ``optics``; with it, rows 0..n-1 the rays'
        first path ends, then the extra ends of split paths (hits or misses) in ray order.
    Raises:
        ValueError: time is not (N,).
    """
    o = np.ascontiguousarray(origins, dtype=np.float32).reshape(-1, 3)
    d = np.ascontiguousarray(directions, dtype=np.float32).reshape(-1, 3)
    n = o.shape[0]
    ts = None
    if time is not None:
        ts = np.ascontiguousarray(time, dtype=np.float32)
        if ts.shape != (n,):
            raise ValueError(f"time must be None or ({n},), got {ts.shape}")
    first = _first_cast(backend, bundle)
    if optics is not None and n:
        tracer = _Tracer(backend, max_range, is_mirror, max_bounces, ts, optics, rng, acceptance, first,
                         material)
        return tracer.run(o, d)
    h = first(o, d, np.float32(max_range), time=ts)
    got = h.instance >= 0
    # first segment: the hit arrays are the result as they are (no copies per ray)
    total = h.t.astype(np.float64)
    inst, prim, normal, bary = h.instance, h.primitive, h.normal, h.uv
    ray = np.arange(n, dtype=np.int64)
    weight = np.ones(n, np.float32)
    diffuse, specular = np.ones(n, np.float32), np.zeros(n, np.float32)
    last_dir = d
    bounces = np.zeros(n, np.uint8)
    mir = is_mirror(inst[got], prim[got]) if is_mirror is not None else None
    if mir is None or max_bounces == 0 or not mir.any():
        hit = got
        if mir is not None:
            hit = got.copy()
            hit[np.flatnonzero(got)[mir]] = False
        total[~hit] = np.inf
        return TraceResult(total, hit, inst, prim, normal, last_dir, bounces, bary, ray, weight, diffuse,
                           specular)
    assert is_mirror is not None  # mir is its answer
    inst, prim, normal, last_dir, bary = inst.copy(), prim.copy(), normal.copy(), d.copy(), bary.copy()
    hit = np.zeros(n, bool)
    idx = np.flatnonzero(got)
    hit[idx[~mir]] = True
    cur_o, cur_d, cur_h, active = o, d, h, idx
    for bounce in range(1, max_bounces + 1):
        # reflect the mirror hits of the last segment and continue
        sel = np.flatnonzero(cur_h.instance >= 0)[mir]
        active = active[mir]
        bounces[active] += 1
        cur_o, cur_d = _reflect(cur_o[sel], cur_d[sel], cur_h.t[sel], cur_h.normal[sel])
        seg_max = (max_range - total[active]).astype(np.float32)
        cur_h = backend.intersect(cur_o, cur_d, seg_max, time=None if ts is None else ts[active])
        g = cur_h.instance >= 0
        idx = active[g]
        total[idx] += cur_h.t[g]
        inst[idx] = cur_h.instance[g]
        prim[idx] = cur_h.primitive[g]
        normal[idx] = cur_h.normal[g]
        bary[idx] = cur_h.uv[g]
        last_dir[idx] = cur_d[g]
        mir = is_mirror(cur_h.instance[g], cur_h.primitive[g])
        hit[idx[~mir]] = True
        active = idx  # rays that missed after a mirror stay without a return (hit False)
        if bounce == max_bounces or not mir.any():
            break
    total[~hit] = np.inf
    return TraceResult(total, hit, inst, prim, normal, last_dir, bounces, bary, ray, weight, diffuse,
                       specular)


#: per-path state of :class:`_Tracer` (arrays of P rows): segment origin and direction,
#: accumulated range, source ray, weight, events, alpha passes, inside solid glass and its
#: index, whether the path is its ray's first (it writes row ``ray``), the last surface met
#: (instance, primitive, normal, barycentrics, direction), and a hit already cast (the
#: thin-pane probe) with its flag
_STATE = ("o", "d", "total", "ray", "w", "nb", "passes", "inside", "n_in", "primary",
          "r_inst", "r_prim", "r_normal", "r_bary", "r_dir",
          "pre", "p_t", "p_inst", "p_prim", "p_normal", "p_uv")


class _Tracer:
    """The glass and alpha tracer behind :func:`trace` with ``optics``: all paths of one
    round cast together, round after round, until none is left (each round adds one event
    or one alpha pass to every path that goes on, so ``max_bounces`` and
    :data:`MAX_ALPHA_PASSES` bound the rounds)."""

    def __init__(self, backend: Backend, max_range: float, is_mirror: HitLookup | None, max_bounces: int,
                 ts: F32 | None, optics: OpticsLookup, rng: np.random.Generator | None, acceptance: float,
                 first: _Cast | None = None, material: HitLookup | None = None) -> None:
        self.material = material
        self.backend, self.max_range, self.is_mirror = backend, float(max_range), is_mirror
        self.first: _Cast = backend.intersect if first is None else first  # the first segments' cast
        self.max_bounces, self.ts, self.optics = int(max_bounces), ts, optics
        self.rng = np.random.Generator(np.random.PCG64(0)) if rng is None else rng
        self.cos_acc = float(np.cos(acceptance))
        self.rows: list[_Paths] = []  # the path ends, round by round

    # -- path state ---------------------------------------------------------------------
    @staticmethod
    def _take(p: _Paths, idx: Array) -> _Paths:
        """The paths ``idx`` (bool mask or int array) of the state ``p``: a new dict of the
        same arrays when the mask keeps all (the state's arrays are never written in place)."""
        if isinstance(idx, np.ndarray) and idx.dtype == bool:
            if idx.all():
                return dict(p)
            idx = np.flatnonzero(idx)
        return {k: v.take(idx, axis=0) for k, v in p.items()}

    @staticmethod
    def _cat(parts: list[_Paths]) -> _Paths | None:
        parts = [q for q in parts if q["ray"].shape[0]]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else {k: np.concatenate([q[k] for q in parts]) for k in _STATE}

    def _end(self, p: _Paths, idx: Array | slice, t_total: F64 | None, hit: Bool,
             diffuse: Floating | None = None, specular: Floating | None = None) -> None:
        """Paths ``idx`` of ``p`` end: their rows (range ``t_total``, +inf where not hit)."""
        m = p["ray"][idx].shape[0]
        if m == 0:
            return
        r = np.full(m, np.inf) if t_total is None else np.where(hit, t_total, np.inf)
        diffuse = np.ones(m, np.float32) if diffuse is None else np.asarray(diffuse, np.float32)
        specular = np.zeros(m, np.float32) if specular is None else np.asarray(specular, np.float32)
        self.rows.append(dict(range=r, hit=hit, instance=p["r_inst"][idx], primitive=p["r_prim"][idx],
                              normal=p["r_normal"][idx], last_dir=p["r_dir"][idx],
                              bounces=np.minimum(p["nb"][idx], 255).astype(np.uint8), bary=p["r_bary"][idx],
                              ray=p["ray"][idx], weight=p["w"][idx].astype(np.float32), diffuse=diffuse,
                              specular=specular, primary=p["primary"][idx]))

    # -- the rounds ---------------------------------------------------------------------
    def run(self, o: F32, d: F32) -> TraceResult:
        """Trace the rays ``o + s d`` (N, 3) float32. The rays whose first hit is plain
        (a miss, or an opaque non-mirror surface of alpha 1) end there at once, as the
        mirror tracer ends them; only the others become paths."""
        n = o.shape[0]
        h = self.first(o, d, np.float32(self.max_range), time=self.ts)
        got = h.instance >= 0
        gi = np.flatnonzero(got)
        mat = None if self.material is None else self.material(h.instance, h.primitive)
        if mat is None:
            trans, _, alpha = self._optics(h.instance[gi], h.primitive[gi])
            busy = (trans > 0.0) | (alpha < 1.0)
        else:  # the same test once per material row, then per hit by its row
            m = int(mat.max()) + 1 if mat.size else 0
            rows = np.arange(m, dtype=np.int32)
            trans, _, alpha = self._optics(rows, rows, rows)
            busy = ((trans > 0.0) | (alpha < 1.0))[mat[gi]]
        if self.is_mirror is not None:
            busy |= np.asarray(self.is_mirror(h.instance[gi], h.primitive[gi]), bool)
        total = np.where(got, h.t.astype(np.float64), np.inf)
        first = dict(range=total, hit=got, instance=h.instance, primitive=h.primitive, normal=h.normal,
                     last_dir=d, bounces=np.zeros(n, np.uint8), bary=h.uv, ray=np.arange(n, dtype=np.int64),
                     weight=np.ones(n, np.float32), diffuse=np.ones(n, np.float32),
                     specular=np.zeros(n, np.float32))
        cx = gi[busy]
        if cx.size == 0:
            return TraceResult(**first, material=mat)
        k = cx.size
        z = np.zeros(k, np.int64)
        dc = d[cx]
        p: _Paths | None
        p = dict(o=o[cx], d=dc, total=np.zeros(k), ray=cx.astype(np.int64), w=np.ones(k), nb=z, passes=z,
                 inside=np.zeros(k, bool), n_in=np.ones(k), primary=np.ones(k, bool),
                 r_inst=h.instance[cx], r_prim=h.primitive[cx], r_normal=h.normal[cx], r_bary=h.uv[cx],
                 r_dir=dc,
                 pre=np.ones(k, bool), p_t=h.t[cx], p_inst=h.instance[cx], p_prim=h.primitive[cx],
                 p_normal=h.normal[cx], p_uv=h.uv[cx])
        while p is not None:
            p = self._round(p)
        return self._result(first, mat)

    def _optics(self, inst: I32, prim: I32, rows: I32 | None = None) -> tuple[F64, F64, F64]:
        """(transmission in [0, 1], ior >= 1, alpha) (H,) float64 of the hits (their
        material ``rows`` when known)."""
        if inst.size == 0:
            e = np.zeros(0)
            return e, e, e
        if rows is None and self.material is not None:
            rows = self.material(inst, prim)
        trans, ior, alpha = self.optics(inst, prim) if rows is None else self.optics(inst, prim, rows=rows)
        return (np.clip(np.asarray(trans, dtype=np.float64), 0.0, 1.0),
                np.maximum(np.asarray(ior, dtype=np.float64), 1.0),  # glass in air: n >= 1
                np.asarray(alpha, dtype=np.float64))

    def _cast(self, p: _Paths) -> tuple[F32, I32, I32, F32, F32]:
        """The hits of the paths (t, instance, primitive, normal, uv): the precomputed
        ones, the others cast now."""
        t, inst, prim, normal, uv = p["p_t"], p["p_inst"], p["p_prim"], p["p_normal"], p["p_uv"]
        todo = np.flatnonzero(~p["pre"])
        if todo.size:
            t, inst, prim, normal, uv = t.copy(), inst.copy(), prim.copy(), normal.copy(), uv.copy()
            seg_max = (self.max_range - p["total"][todo]).astype(np.float32)
            ts = None if self.ts is None else self.ts[p["ray"][todo]]
            h = self.backend.intersect(p["o"][todo], p["d"][todo], seg_max, time=ts)
            t[todo], inst[todo], prim[todo] = h.t, h.instance, h.primitive
            normal[todo], uv[todo] = h.normal, h.uv
        return t, inst, prim, normal, uv

    def _round(self, p: _Paths) -> _Paths | None:
        t, inst, prim, normal, uv = self._cast(p)
        got = inst >= 0
        self._end(p, np.flatnonzero(~got), None, np.zeros(int((~got).sum()), bool))
        g = np.flatnonzero(got)
        if g.size == 0:
            return None
        p = self._take(p, g)
        t, inst, prim, normal, uv = t[g], inst[g], prim[g], normal[g], uv[g]
        seg = t.astype(np.float64)
        seg = np.where(p["inside"], seg * p["n_in"], seg)  # time of flight inside glass
        total = p["total"] + seg
        trans, ior, alpha = self._optics(inst, prim)
        # alpha: one uniform per path that meets a surface of alpha < 1, in path order
        passed = np.zeros(g.size, bool)
        cand = np.flatnonzero((alpha < 1.0) & (p["passes"] < MAX_ALPHA_PASSES))
        if cand.size:
            u = self.rng.random(cand.size)
            passed[cand] = u < 1.0 - alpha[cand]
        nxt = []
        if passed.any():  # straight on from beyond the surface, nothing else changes
            q = self._take(p, passed)
            o2, step = self._along(q["o"], q["d"], t[passed], normal[passed])
            step = np.where(q["inside"], step * q["n_in"], step)
            q.update(o=o2, total=total[passed] + step, passes=q["passes"] + 1,
                     pre=np.zeros(o2.shape[0], bool))
            nxt.append(q)
        stop = ~passed
        # the surface met: the path's last surface
        p = dict(p, r_inst=inst, r_prim=prim, r_normal=normal, r_bary=uv, r_dir=p["d"])
        mir = np.zeros(g.size, bool)
        if self.is_mirror is not None:
            mir = stop & self.is_mirror(inst, prim)
        glass = stop & ~mir & (trans > 0.0)
        opaque = stop & ~mir & ~glass
        self._end(self._take(p, opaque), slice(None), total[opaque], np.ones(int(opaque.sum()), bool))
        if mir.any():
            go = mir & (p["nb"] < self.max_bounces)
            self._end(self._take(p, mir & ~go), slice(None), None, np.zeros(int((mir & ~go).sum()), bool))
            if go.any():
                q = self._take(p, go)
                o2, d2 = _reflect(q["o"], q["d"], t[go], normal[go])
                q.update(o=o2, d=d2, total=total[go], nb=q["nb"] + 1, pre=np.zeros(o2.shape[0], bool))
                nxt.append(q)
        if glass.any():
            nxt.extend(self._glass(self._take(p, glass), t[glass], normal[glass], total[glass], inst[glass],
                                   trans[glass], ior[glass]))
        return self._cat(nxt)

    @staticmethod
    def _along(o: F32, d: F32, t: F32, normal: F32, d2: F64 | None = None) -> tuple[F32, F64]:
        """The points ``o + t d`` (N, 3) on the surface of ``normal``, moved on along the
        new directions ``d2`` (N, 3) float64 (default ``d``: straight on) by
        ``step = eps / max(|cos|, 0.1)`` (at least ``eps`` off the surface's plane above a
        cosine of 0.1), as (N, 3) float32 origins, and ``step`` (N,) float64 m, which the
        path's range adds: the path stays on its exact line and its range exact."""
        dd = d.astype(np.float64)
        pt = o.astype(np.float64) + dd * t[:, None].astype(np.float64)
        d2 = dd if d2 is None else d2
        cos = np.abs(np.einsum("ij,ij->i", normal.astype(np.float64), d2))
        eps = BOUNCE_OFFSET + BOUNCE_OFFSET_REL * np.abs(pt).max(axis=1)
        step = eps / np.maximum(cos, 0.1)
        return (pt + step[:, None] * d2).astype(np.float32), step

    def _glass(self, p: _Paths, t: F32, normal: F32, total: F64, inst: I32, trans: F64,
               ior: F64) -> list[_Paths]:
        """The paths ``p`` end on glass: their rows, and their reflected and transmitted
        paths (module docstring)."""
        m = t.shape[0]
        dd = p["d"].astype(np.float64)
        nf, cos_i = facing_normals(normal, dd)
        inside = p["inside"]
        out = ~inside
        ahead, step = self._along(p["o"], p["d"], t, normal)
        # outside: thin pane or solid? The probe straight on is the thin pane's next segment.
        solid = np.zeros(m, bool)
        probe = None
        po = np.flatnonzero(out)
        if po.size:
            seg_max = (self.max_range - (total[po] + step[po])).astype(np.float32)
            ts = None if self.ts is None else self.ts[p["ray"][po]]
            probe = self.backend.intersect(ahead[po], p["d"][po], seg_max, time=ts)
            s_entry = np.sign(np.einsum("ij,ij->i", normal[po].astype(np.float64), dd[po]))
            s_probe = np.sign(np.einsum("ij,ij->i", probe.normal.astype(np.float64), dd[po]))
            solid[po] = (probe.instance == inst[po]) & (s_probe == -s_entry) & (s_entry != 0)
        thin = out & ~solid
        n1 = np.where(inside, p["n_in"], 1.0)
        n2 = np.where(inside, 1.0, ior)
        F = fresnel_unpolarized(cos_i, n1, n2)
        refl = F.copy()
        tran = trans * (1.0 - F)
        if thin.any():
            Rs, Ts = thin_slab(cos_i[thin], ior[thin])
            refl[thin] = (1.0 - trans[thin]) * F[thin] + trans[thin] * Rs
            tran[thin] = trans[thin] * Ts
        diffuse = (1.0 - trans) * (1.0 - F)
        specular = np.where(cos_i >= self.cos_acc, refl, 0.0)
        returns = (diffuse > 0.0) | (specular > 0.0)
        # the surface: a first path end always has a row, a split path's only if it returns
        keep = p["primary"] | returns
        self._end(self._take(p, keep), slice(None), total[keep], returns[keep], diffuse[keep], specular[keep])
        go = p["nb"] < self.max_bounces
        nxt = []
        base = dict(p, total=total, nb=p["nb"] + 1, primary=np.zeros(m, bool), pre=np.zeros(m, bool))
        # reflected: the mirror path, on the same side (inside stays inside)
        wr = p["w"] * refl
        r_sel = go & (wr >= MIN_WEIGHT)
        if r_sel.any():
            q = self._take(base, r_sel)
            nn = normal[r_sel].astype(np.float64)
            r = dd[r_sel] - 2.0 * np.einsum("ij,ij->i", dd[r_sel], nn)[:, None] * nn
            q["o"], rstep = self._along(p["o"][r_sel], p["d"][r_sel], t[r_sel], normal[r_sel], r)
            q["d"] = r.astype(np.float32)
            q["total"] = q["total"] + rstep * q["n_in"]  # the medium it stays in
            q["w"] = wr[r_sel]
            nxt.append(q)
        # transmitted
        wt = p["w"] * tran
        t_sel = go & (wt >= MIN_WEIGHT)
        if t_sel.any():
            q = dict(base, w=wt, o=ahead, total=total + step)
            q["inside"] = solid  # entering solid glass; leaving it or through a thin pane: outside
            q["n_in"] = np.where(solid, ior, 1.0)
            bend = np.flatnonzero(t_sel & ~thin)
            if bend.size:  # entering solid glass (eta = 1 / ior) or leaving it (eta = n_in)
                eta = np.where(inside[bend], p["n_in"][bend], 1.0 / ior[bend])
                d2 = refract(dd[bend], nf[bend], eta)[0]
                ob, sb = self._along(p["o"][bend], p["d"][bend], t[bend], normal[bend], d2)
                q["o"], q["d"], q["total"] = ahead.copy(), p["d"].copy(), q["total"].copy()
                q["o"][bend], q["d"][bend] = ob, d2.astype(np.float32)
                q["total"][bend] = total[bend] + sb * q["n_in"][bend]
            if probe is not None:  # the thin panes' next hits are the probes'
                th = np.flatnonzero(thin[po])
                rows = po[th]
                q["pre"] = q["pre"].copy()
                q["pre"][rows] = True
                for k, v in (("p_t", probe.t), ("p_inst", probe.instance), ("p_prim", probe.primitive),
                             ("p_normal", probe.normal), ("p_uv", probe.uv)):
                    a = q[k].copy()
                    a[rows] = v[th]
                    q[k] = a
            nxt.append(self._take(q, t_sel))
        return nxt

    def _result(self, first: _Paths, mat: I32 | None = None) -> TraceResult:
        """The rows: ``first`` (the N rays' rows of the first cast) with the path ends of
        the rays that became paths in their place, then the extra path ends in ray order
        (and so the material rows ``mat`` (N,) of the first hits, when given)."""
        rows = self.rows
        cat = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
        fields = TraceResult._FIELDS
        if mat is not None:
            assert self.material is not None  # mat is its answer
            first = dict(first, material=mat)
            cat["material"] = self.material(cat["instance"], cat["primitive"])
            fields = fields + ("material",)
        prim = np.flatnonzero(cat["primary"])
        extra = np.flatnonzero(~cat["primary"])
        extra = extra[np.argsort(cat["ray"][extra], kind="stable")]
        at = cat["ray"][prim]
        out = []
        n = first["range"].shape[0]
        for f in fields:
            # one new array per field (the first cast's arrays and the caller's directions
            # stay as they are): the first rows, the path ends in their place, the extras
            v, c = first[f], cat[f]
            if v.dtype != c.dtype:  # (not met: the rows are made alike) as the copy did
                a = v.copy()
                a[at] = c[prim]
                out.append(np.concatenate([a, c[extra]]))
                continue
            a = np.empty((n + extra.shape[0], *v.shape[1:]), np.result_type(v, c))
            a[:n] = v
            a[at] = c[prim]
            a[n:] = c[extra]
            out.append(a)
        k = len(TraceResult._FIELDS)
        return TraceResult(**dict(zip(TraceResult._FIELDS, out[:k])),
                           material=out[k] if mat is not None else None)
