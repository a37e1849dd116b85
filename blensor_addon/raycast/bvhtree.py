"""Fallback backend over Blender's ``mathutils.bvhtree.BVHTree``.

Same interface and answers as the native library, used when it cannot be loaded (or on
request: ``backend="bvhtree"``). All instances are flattened into one world-space tree
on every :meth:`set_geometry` (BVHTree has no instancing) and rays are cast one by one
from Python, so it is much slower; ``benchmarks/raycast.py`` measures by how much.
Needs Blender (``mathutils``), imported on first use.

Moving instances (``SceneGeometry.instance_matrix_end``) are cast by time slices: the
step [0, 1] is cut into K equal slices, K chosen so that no vertex of a moving instance
moves more than :data:`SLICE_MOTION` within one (at most :data:`MAX_SLICES`); each slice
that has rays gets a world tree of the moving instances at the slice's mid time
(:func:`.motion.interpolate`), and those rays take the nearer of its hit and the static
instances' tree's. Answers then agree with the native library's exact per-ray motion to
within half a slice's motion (0.5 mm unless the cap binds).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..core.ndtypes import F64, I32, I64, Array, Bool, Floating
from .base import Backend, ClosestHits, SceneGeometry
from .motion import RECORD_SIZE, interpolate, max_speed

#: Largest motion (m) of any vertex of a moving instance within one time slice.
SLICE_MOTION = 1e-3
#: Most time slices per step.
MAX_SLICES = 256

#: :func:`_flatten`'s world-space scene: vertices (V, 3) float64, triangles (T, 3) int64,
#: their instances and primitives (T,) int32, and the ``mathutils.bvhtree.BVHTree`` over
#: them (None without triangles; mathutils has no type information: Any)
Flat = tuple[F64, I64, I32, I32, Any]


def _flatten(geometry: SceneGeometry, instances: Iterable[int], matrices: Iterable[Array]) -> Flat:
    """World-space triangles of ``instances`` (int indices) placed by ``matrices``
    (len(instances), 4, 4): (verts (V, 3) float64, tris (T, 3) int64, tri_inst (T,) int32,
    tri_prim (T,) int32, BVHTree or None)."""
    from mathutils.bvhtree import BVHTree
    verts: list[F64] = []
    tris: list[I64] = []
    tri_inst: list[I32] = []
    tri_prim: list[I32] = []
    offset = 0
    for i, M in zip(instances, matrices):
        m = geometry.meshes[int(geometry.instance_mesh[i])]
        if m.triangles.shape[0] == 0:
            continue
        M = np.asarray(M, dtype=np.float64)
        vw = m.vertices.astype(np.float64) @ M[:3, :3].T + M[:3, 3]
        verts.append(vw)
        tris.append(m.triangles.astype(np.int64) + offset)
        tri_inst.append(np.full(m.triangles.shape[0], i, np.int32))
        tri_prim.append(np.arange(m.triangles.shape[0], dtype=np.int32))
        offset += vw.shape[0]
    if not verts:
        none = np.zeros(0, np.int32)
        return np.zeros((0, 3)), np.zeros((0, 3), np.int64), none, none, None
    v, t = np.concatenate(verts), np.concatenate(tris)
    tree = BVHTree.FromPolygons(v.tolist(), t.tolist(), all_triangles=True)
    return v, t, np.concatenate(tri_inst), np.concatenate(tri_prim), tree


def _cast(data: Flat, o: F64, d: F64, tm: F64) -> ClosestHits:
    """Closest hits of rays o, d (N, 3) float64 within tm (N,) float64 in one flattened
    tree ``data`` (:func:`_flatten`)."""
    v, tr, tri_inst, tri_prim, tree = data
    n = o.shape[0]
    t = np.full(n, np.inf, np.float32)
    face = np.full(n, -1, np.int64)
    loc = np.zeros((n, 3))
    if tree is not None:
        cast = tree.ray_cast
        for i, (oi, di, ti) in enumerate(zip(o.tolist(), d.tolist(), tm.tolist())):
            if not ti > 0.0:
                continue
            p, _nrm, idx, dist = cast(oi, di, ti)
            if idx is not None:
                t[i] = dist
                face[i] = idx
                loc[i] = p
    hit = face >= 0
    inst = np.where(hit, tri_inst[face] if tri_inst.size else -1, -1).astype(np.int32)
    prim = np.where(hit, tri_prim[face] if tri_prim.size else -1, -1).astype(np.int32)
    normal = np.zeros((n, 3), np.float32)
    uv = np.zeros((n, 2), np.float32)
    if hit.any():
        tri = v[tr[face[hit]]]  # (H, 3, 3)
        e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
        nr = np.cross(e1, e2)
        ln = np.linalg.norm(nr, axis=1, keepdims=True)
        normal[hit] = nr / np.where(ln > 0, ln, 1.0)
        # BVHTree reports the distance from barycentric edge functions in float32, which
        # is off by up to ~4e-4 m on long thin triangles seen from afar; take it from the
        # triangle's plane in float64 instead, as the native library does.
        den = (nr * d[hit]).sum(1)
        ok = den != 0
        t_plane = ((nr * (tri[:, 0] - o[hit])).sum(1)) / np.where(ok, den, 1.0)
        th = t[hit]
        th[ok] = t_plane[ok]
        t[hit] = th
        loc[hit] = o[hit] + d[hit] * t[hit, None].astype(np.float64)
        # barycentrics of the hit point (least squares in the triangle plane)
        w = loc[hit] - tri[:, 0]
        d00, d01, d11 = (e1 * e1).sum(1), (e1 * e2).sum(1), (e2 * e2).sum(1)
        d20, d21 = (w * e1).sum(1), (w * e2).sum(1)
        den = d00 * d11 - d01 * d01
        den = np.where(den != 0, den, 1.0)
        uv[hit, 0] = (d11 * d20 - d01 * d21) / den
        uv[hit, 1] = (d00 * d21 - d01 * d20) / den
    return ClosestHits(t, inst, prim, normal, uv)


def _put(dst: ClosestHits, idx: I64, src: ClosestHits, sel: Bool | None = None) -> None:
    """dst[idx] = src[sel] for every field (sel None: all of src)."""
    for f in ("t", "instance", "primitive", "normal", "uv"):
        a = getattr(src, f)
        getattr(dst, f)[idx] = a if sel is None else a[sel]


class BVHTreeBackend(Backend):
    """Ray casting through ``mathutils.bvhtree.BVHTree.ray_cast``.

    Raises:
        ImportError: ``mathutils`` is not available (not running inside Blender or bpy).
    """

    name = "bvhtree"

    def __init__(self) -> None:
        from mathutils.bvhtree import BVHTree  # noqa: F401  (fail early outside Blender)
        self._geometry: SceneGeometry | None = None
        self._all: Flat | None = None  # every instance at instance_matrix (built on the first untimed cast)
        self._static: Flat | None = None  # the static instances alone (built on the first timed cast)
        self._moving: I64 = np.zeros(0, np.int64)  # indices of the moving instances
        self._records: F64 = np.zeros((0, RECORD_SIZE))
        self.slices = 1  # K of the latest geometry (1 without motion)

    def set_geometry(self, geometry: SceneGeometry) -> None:
        """Flatten ``geometry`` into world space (every instance at ``instance_matrix``)
        and, if instances move, choose the number of time slices.

        Raises:
            ValueError: instance_mesh outside the mesh list.
        """
        im = geometry.instance_mesh
        if im.size and (im.min() < 0 or im.max() >= len(geometry.meshes)):
            raise ValueError(f"instance_mesh must index the {len(geometry.meshes)} meshes")
        self._geometry = geometry
        self._all = None
        self._static = None
        self._moving = np.zeros(0, np.int64)
        self._records = np.zeros((0, RECORD_SIZE))
        self.slices = 1
        motion = geometry.motion()
        if motion is None:
            return
        rec, moving = motion
        # singular or non-finite ends do not move (motion_records); empty meshes cannot be hit
        nonempty = np.array([geometry.meshes[int(k)].triangles.shape[0] > 0 for k in im], bool)
        self._moving = np.flatnonzero(moving & nonempty)
        if self._moving.size == 0:
            return
        self._records = rec[self._moving]
        radius = np.array([np.linalg.norm(geometry.meshes[int(im[i])].vertices.astype(np.float64), axis=1)
                           .max() for i in self._moving])
        speed = float(np.max(max_speed(self._records, radius)))
        self.slices = int(min(MAX_SLICES, max(1, np.ceil(speed / SLICE_MOTION)))) if np.isfinite(speed) \
            else MAX_SLICES

    def _whole(self) -> Flat:
        """The flattened scene, every instance at ``instance_matrix`` (built when first
        needed: a timed cast of a scene with moving instances never needs it)."""
        if self._all is None:
            g = self._geometry
            self._all = _flatten(SceneGeometry([]), [], []) if g is None else \
                _flatten(g, range(g.instance_mesh.shape[0]), g.instance_matrix)
        return self._all

    def intersect(self, origins: Floating, directions: Floating, tmax: Floating | float | np.floating[Any],
                  time: Floating | None = None) -> ClosestHits:
        """Closest hits (see :meth:`Backend.intersect`); moving instances by time slices.

        Raises:
            ValueError: arrays of the wrong shape.
        """
        o = np.asarray(origins, dtype=np.float64).reshape(-1, 3)
        d = np.asarray(directions, dtype=np.float64).reshape(-1, 3)
        n = o.shape[0]
        if d.shape != o.shape:
            raise ValueError(f"origins and directions must both be (N, 3), got {o.shape} and {d.shape}")
        tm = np.broadcast_to(np.asarray(tmax, dtype=np.float64), (n,)).copy()
        if time is None:
            return _cast(self._whole(), o, d, tm)
        ts = np.asarray(time, dtype=np.float32)
        if ts.shape != (n,):
            raise ValueError(f"time must be None or ({n},), got {ts.shape}")
        tm[~np.isfinite(ts)] = np.nan  # a ray at no time misses
        if self._moving.size == 0:
            return _cast(self._whole(), o, d, tm)
        g = self._geometry
        assert g is not None  # instances move: set_geometry has set it
        if self._static is None:
            static = np.setdiff1d(np.arange(g.instance_mesh.shape[0]), self._moving)
            self._static = _flatten(g, static, g.instance_matrix[static])
        out = _cast(self._static, o, d, tm)
        s = np.clip(np.nan_to_num(ts.astype(np.float64)), 0.0, 1.0)
        k_of = np.minimum((s * self.slices).astype(np.int64), self.slices - 1)
        alive = np.isfinite(ts)
        for k in np.unique(k_of[alive]):
            rays = np.flatnonzero(alive & (k_of == k))
            mats = interpolate(self._records, (k + 0.5) / self.slices)
            part = _cast(_flatten(g, self._moving, mats), o[rays], d[rays],
                         np.minimum(tm[rays], out.t[rays]))  # only nearer than the static hit
            nearer = part.instance >= 0
            _put(out, rays[nearer], part, nearer)
        return out
