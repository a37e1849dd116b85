"""Fallback backend over Blender's ``mathutils.bvhtree.BVHTree``.

Same interface and answers as the native library, used when it cannot be loaded (or on
request: ``backend="bvhtree"``). All instances are flattened into one world-space tree
on every :meth:`set_geometry` (BVHTree has no instancing) and rays are cast one by one
from Python, so it is much slower; ``benchmarks/raycast.py`` measures by how much.
Needs Blender (``mathutils``), imported on first use.
"""
from __future__ import annotations

import numpy as np

from .base import Backend, Hits, SceneGeometry


class BVHTreeBackend(Backend):
    """Ray casting through ``mathutils.bvhtree.BVHTree.ray_cast``.

    Raises:
        ImportError: ``mathutils`` is not available (not running inside Blender or bpy).
    """

    name = "bvhtree"

    def __init__(self) -> None:
        from mathutils.bvhtree import BVHTree  # noqa: F401  (fail early outside Blender)
        self._tree = None
        self._v = np.zeros((0, 3))
        self._t = np.zeros((0, 3), np.int64)
        self._tri_inst = np.zeros(0, np.int32)
        self._tri_prim = np.zeros(0, np.int32)

    def set_geometry(self, geometry: SceneGeometry) -> None:
        from mathutils.bvhtree import BVHTree
        verts, tris, tri_inst, tri_prim = [], [], [], []
        offset = 0
        for i, mi in enumerate(geometry.instance_mesh):
            m = geometry.meshes[int(mi)]
            if m.triangles.shape[0] == 0:
                continue
            M = geometry.instance_matrix[i].astype(np.float64)
            vw = m.vertices.astype(np.float64) @ M[:3, :3].T + M[:3, 3]
            verts.append(vw)
            tris.append(m.triangles.astype(np.int64) + offset)
            tri_inst.append(np.full(m.triangles.shape[0], i, np.int32))
            tri_prim.append(np.arange(m.triangles.shape[0], dtype=np.int32))
            offset += vw.shape[0]
        if verts:
            self._v = np.concatenate(verts)
            self._t = np.concatenate(tris)
            self._tri_inst = np.concatenate(tri_inst)
            self._tri_prim = np.concatenate(tri_prim)
            self._tree = BVHTree.FromPolygons(self._v.tolist(), self._t.tolist(), all_triangles=True)
        else:
            self._tree = None

    def intersect(self, origins, directions, tmax) -> Hits:
        o = np.asarray(origins, dtype=np.float64).reshape(-1, 3)
        d = np.asarray(directions, dtype=np.float64).reshape(-1, 3)
        n = o.shape[0]
        tm = np.broadcast_to(np.asarray(tmax, dtype=np.float64), (n,))
        t = np.full(n, np.inf, np.float32)
        face = np.full(n, -1, np.int64)
        loc = np.zeros((n, 3))
        if self._tree is not None:
            cast = self._tree.ray_cast
            for i, (oi, di, ti) in enumerate(zip(o.tolist(), d.tolist(), tm.tolist())):
                if not ti > 0.0:
                    continue
                p, _nrm, idx, dist = cast(oi, di, ti)
                if idx is not None:
                    t[i] = dist
                    face[i] = idx
                    loc[i] = p
        hit = face >= 0
        inst = np.where(hit, self._tri_inst[face] if self._tri_inst.size else -1, -1).astype(np.int32)
        prim = np.where(hit, self._tri_prim[face] if self._tri_prim.size else -1, -1).astype(np.int32)
        normal = np.zeros((n, 3), np.float32)
        uv = np.zeros((n, 2), np.float32)
        if hit.any():
            tri = self._v[self._t[face[hit]]]  # (H, 3, 3)
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
        return Hits(t, inst, prim, normal, uv)
