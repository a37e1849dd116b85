"""The batch ray-cast interface shared by the native library and the BVHTree fallback:
the geometry handed to a backend (:class:`MeshData`, :class:`SceneGeometry` with its
content hash), what it answers (:class:`ClosestHits`) and the :class:`Backend` base."""
from __future__ import annotations

import hashlib
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import SettingsError
from ..core.ndtypes import F32, F64, I32, Array, Bool, Floating

_INT32_MAX = int(np.iinfo(np.int32).max)

#: :meth:`SceneGeometry.content`: (mesh keys, instance meshes (I,) int32, transforms
#: (I, 4, 4) float32, end transforms (I, 4, 4) float32 or None)
GeometryContent = tuple[tuple[str, ...], I32, F32, "F32 | None"]


def frozen(a: Array) -> bool:
    """Whether ``a`` cannot change: it and every array it views are read-only, down to the
    one that owns the memory (an array whose owner is no ndarray, a buffer or a memory
    map, is not frozen). The scene layer freezes the arrays of the snapshots it keeps."""
    while not a.flags.writeable:
        base = a.base
        if base is None:
            return True
        if not isinstance(base, np.ndarray):
            return False
        a = base
    return False


def _kept(a: Array) -> Array:
    """``a`` itself when :func:`frozen`, else a copy (:meth:`SceneGeometry.content`)."""
    return a if frozen(a) else np.array(a)


def _equal(kept: Array, a: Array) -> bool:
    """Whether ``a`` equals ``kept`` (from :func:`_kept`): the same frozen memory (same
    address, dtype, shape and strides) without reading it, else element by element."""
    if kept is a or (frozen(kept) and frozen(a) and kept.dtype == a.dtype and kept.shape == a.shape
                     and kept.strides == a.strides
                     and kept.__array_interface__["data"][0] == a.__array_interface__["data"][0]):
        return True
    return bool(np.array_equal(kept, a))


def _described(a: Array) -> str:
    """``shape (..), dtype ..`` of ``a``, for a message."""
    return f"shape {a.shape}, dtype {a.dtype}"


def _as_array(name: str, values: ArrayLike, allowed: str) -> Array:
    """``np.asarray(values)``; a ragged sequence (numpy refuses it) is a SettingsError."""
    try:
        return np.asarray(values)
    except ValueError:
        raise SettingsError(name, allowed, "a ragged sequence") from None


def index_array(name: str, values: ArrayLike, columns: int | None = None) -> I32:
    """``values`` as a contiguous int32 array (reshaped to (-1, ``columns``) or (-1,)),
    refusing what a cast would change: integers outside int32 (int64 indices above 2^31
    would wrap), non-integral or non-finite floats (1.7 would become 1, inf anything) and
    dtypes that are no numbers (bool, complex, strings, objects).

    Raises:
        SettingsError (a ValueError): naming ``name``, the allowed range and the first
        value (or the dtype) refused.
    """
    allowed = f"integers within 0..{_INT32_MAX} (or integral floats)"
    a = _as_array(name, values, allowed)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a) | (a != np.floor(a))
        if bad.any():
            raise SettingsError(name, allowed, float(a[bad].ravel()[0]))
    elif a.dtype.kind not in "iu":
        raise SettingsError(name, allowed, f"dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > _INT32_MAX):
        raise SettingsError(name, allowed, f"values in {a.min()}..{a.max()}")
    a = np.ascontiguousarray(a, dtype=np.int32)
    return a.reshape(-1, columns) if columns else a.reshape(-1)


def mesh_vertices(vertices: ArrayLike) -> F32:
    """``vertices`` as a contiguous (V, 3) float32 array (m); NaN/inf coordinates are kept
    (a triangle on such a vertex is never hit). Nothing is reshaped: a (3, V) array is no
    (V, 3) one.

    Raises:
        SettingsError (``vertices``): not a 2-D array of three columns, or of a dtype that
        is no real number (bool, complex, strings, objects).
    """
    allowed = "a (V, 3) array of real numbers (m, stored as float32)"
    a = _as_array("vertices", vertices, allowed)
    if a.ndim != 2 or a.shape[1] != 3 or a.dtype.kind not in "iuf":
        raise SettingsError("vertices", allowed, _described(a))
    return np.ascontiguousarray(a, dtype=np.float32)


def mesh_triangles(triangles: ArrayLike, n_vertices: int) -> I32:
    """``triangles`` as a contiguous (T, 3) int32 array of indices into ``n_vertices``
    vertices (:func:`index_array`'s casts). Nothing is reshaped: a (3, T) array is no
    (T, 3) one.

    Raises:
        SettingsError (``triangles``): not a 2-D array of three columns, values or a dtype
        :func:`index_array` refuses, or an index past the last vertex.
    """
    allowed = f"a (T, 3) array of vertex indices (integers within 0..{_INT32_MAX})"
    a = _as_array("triangles", triangles, allowed)
    if a.ndim != 2 or a.shape[1] != 3:
        raise SettingsError("triangles", allowed, _described(a))
    t = index_array("triangles", a, 3)
    if t.size and int(t.max()) >= n_vertices:
        raise SettingsError("triangles", f"vertex indices within 0..{n_vertices - 1} (the mesh has "
                            f"{n_vertices} vertices)", f"values in {int(t.min())}..{int(t.max())}")
    return t


@dataclass
class MeshData:
    """One mesh in object space.

    Attributes:
        vertices (V, 3) float32 m; triangles (T, 3) int32 vertex indices.
        key: content fingerprint (str); equal keys mean equal geometry, so acceleration
            structures can be reused across frames.
    Raises:
        SettingsError (a ValueError; ``vertices`` or ``triangles``): an array of another
        shape (never reshaped), of a dtype that is no number, non-integral or non-finite
        indices, or indices outside the vertices (:func:`mesh_vertices`,
        :func:`mesh_triangles`).
    """

    vertices: F32
    triangles: I32
    key: str = ""

    def __post_init__(self) -> None:
        self.vertices = mesh_vertices(self.vertices)
        self.triangles = mesh_triangles(self.triangles, self.vertices.shape[0])
        if not self.key:
            # CRC-32 and Adler-32 of both arrays plus their sizes (~1 ms per million
            # triangles; a cryptographic hash would cost more than the BVH build it saves)
            v, t = self.vertices, self.triangles
            self.key = "%d.%d.%08x%08x.%08x%08x" % (
                v.shape[0], t.shape[0], zlib.crc32(v.data), zlib.adler32(v.data), zlib.crc32(t.data),
                zlib.adler32(t.data))


@dataclass
class SceneGeometry:
    """Meshes and their instances, optionally moving within one time step.

    Attributes:
        meshes: list of K :class:`MeshData`.
        instance_mesh (I,) int32 index into ``meshes``.
        instance_matrix (I, 4, 4) float32 row-major object-to-world matrices (at the start
            of the time step, ``s = 0``, when ``instance_matrix_end`` is given).
        instance_matrix_end (I, 4, 4) float32 object-to-world matrices at the end of the
            step (``s = 1``), or None: nothing moves. An instance whose two matrices
            differ moves between them as :mod:`.motion` interpolates (translation linear,
            rotation slerp, scale/shear linear); a ray cast at time ``s``
            (:meth:`Backend.intersect`) meets it where it is at ``s``.
    Raises:
        ValueError: the arrays differ in length or are not (I, 4, 4).
    """

    meshes: list[MeshData]
    instance_mesh: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    instance_matrix: F32 = field(default_factory=lambda: np.zeros((0, 4, 4), np.float32))
    instance_matrix_end: F32 | None = None
    #: (mesh keys, the arrays hashed, :meth:`hash`) of frozen arrays, None until hashed
    _hash_memo: tuple[tuple[str, ...], tuple[I32, F32, F32 | None], str] | None = field(
        default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.instance_mesh = index_array("instance_mesh", self.instance_mesh)
        self.instance_matrix = np.ascontiguousarray(self.instance_matrix, dtype=np.float32).reshape(-1, 4, 4)
        if self.instance_mesh.shape[0] != self.instance_matrix.shape[0]:
            raise ValueError("instance_mesh and instance_matrix differ in length")
        if self.instance_matrix_end is not None:
            end = np.ascontiguousarray(self.instance_matrix_end, dtype=np.float32)
            if end.shape != self.instance_matrix.shape:
                raise ValueError(f"instance_matrix_end must be {self.instance_matrix.shape}, got {end.shape}")
            self.instance_matrix_end = end

    def motion(self) -> tuple[F64, Bool] | None:
        """Motion records and moving mask (:func:`.motion.motion_records` of
        ``instance_matrix`` and ``instance_matrix_end``): (I, 32) float64 and (I,) bool,
        or None when ``instance_matrix_end`` is None. The records are made for the
        instances whose two transforms differ only (one car among 10^6 static instances:
        one QR, not 10^6), bit for bit those rows of ``motion_records`` over all; the rows
        of instances that do not move are NaN (no backend reads them)."""
        end = self.instance_matrix_end
        if end is None:
            return None
        from .motion import RECORD_SIZE, motion_records
        start = self.instance_matrix
        rows = np.flatnonzero((start != end).any(axis=(1, 2)))  # NaN != NaN: tried, not moving
        rec = np.full((start.shape[0], RECORD_SIZE), np.nan)
        moving = np.zeros(start.shape[0], bool)
        if rows.size:
            rec[rows], moving[rows] = motion_records(start[rows], end[rows])
        return rec, moving

    def content(self) -> GeometryContent:
        """The geometry's content as it is now, in copies the caller owns, or the arrays
        themselves where they are :func:`frozen` (read-only down to their owner: they
        cannot change): (mesh keys, instance meshes, transforms, end transforms or None).
        A backend keeps it to tell whether a later geometry is the same
        (:meth:`has_content`: a static scene sampled at two frames, or scanned again), so
        arrays changed in place afterwards do not fool it. The copies take about 7 ms and
        64 MB for 10^6 instances; frozen arrays nothing."""
        end = self.instance_matrix_end
        return (tuple(m.key for m in self.meshes), _kept(self.instance_mesh), _kept(self.instance_matrix),
                None if end is None else _kept(end))

    def has_content(self, content: GeometryContent | None) -> bool:
        """True if this geometry equals ``content`` (from :meth:`content`) exactly; frozen
        arrays that are the very memory ``content`` kept are equal without a pass over
        them."""
        if content is None:
            return False
        keys, im, xf, end = content
        mine = self.instance_matrix_end
        return (keys == tuple(m.key for m in self.meshes) and _equal(im, self.instance_mesh)
                and _equal(xf, self.instance_matrix) and (end is None) == (mine is None)
                and (end is None or (mine is not None and _equal(end, mine))))

    def hash(self) -> str:
        """Hash of all meshes and instance transforms, the end transforms included when
        given (hex str). Kept with the geometry when its arrays are :func:`frozen` (a
        static scene's one snapshot hashed for every packet of a run is hashed once)."""
        keys = tuple(m.key for m in self.meshes)
        arrays = (self.instance_mesh, self.instance_matrix, self.instance_matrix_end)
        memo = self._hash_memo
        if memo is not None and memo[0] == keys and all(a is b for a, b in zip(memo[1], arrays)):
            return memo[2]
        h = hashlib.sha256()
        for k in keys:
            h.update(k.encode())
        h.update(self.instance_mesh.tobytes())
        h.update(self.instance_matrix.tobytes())
        end = self.instance_matrix_end
        if end is not None:
            h.update(b"end")
            h.update(end.tobytes())
        digest = h.hexdigest()
        if frozen(self.instance_mesh) and frozen(self.instance_matrix) and (end is None or frozen(end)):
            self._hash_memo = (keys, arrays, digest)
        return digest


@dataclass
class ClosestHits:
    """Closest hit of each ray (N rays), as a backend's :meth:`Backend.intersect` finds it
    (the scene layer turns these into the sensors' hits,
    :class:`blensor_addon.scene.context.CastHits`).

    Attributes:
        t (N,) float32 m, +inf on a miss; instance (N,) int32, -1 on a miss;
        primitive (N,) int32 triangle index in the instance's mesh, -1 on a miss;
        normal (N, 3) float32 unit geometric normal (world, from the winding), 0 on a miss;
        uv (N, 2) float32 barycentrics (b1, b2): p = (1-b1-b2) v0 + b1 v1 + b2 v2.
    """

    t: F32
    instance: I32
    primitive: I32
    normal: F32
    uv: F32


class Backend(ABC):
    """A batch ray caster over a :class:`SceneGeometry`."""

    name = "abstract"
    #: :meth:`intersect` takes ``bundle`` (rays in consecutive groups of that many from
    #: one origin at one time, which it may traverse together; the answers are the same)
    bundles = False

    @abstractmethod
    def set_geometry(self, geometry: SceneGeometry) -> None:
        """Make ``geometry`` the scene that :meth:`intersect` casts against."""

    @abstractmethod
    def intersect(self, origins: Floating, directions: Floating, tmax: Floating | float | np.floating[Any],
                  time: Floating | None = None) -> ClosestHits:
        """Closest hits.

        Args:
            origins, directions (N, 3) float32 world space (m); directions unit length.
            tmax: (N,) float32 or scalar: farthest distance searched (m).
            time: (N,) float32 fraction of the geometry's time step at which each ray is
                cast, in [0, 1] (values outside clamp to 0 or 1; NaN or inf: the ray
                misses), or None: every ray at 0. Only moving instances
                (``SceneGeometry.instance_matrix_end``) depend on it.
        Raises:
            ValueError: arrays of the wrong shape (origins/directions not (N, 3), tmax
            neither scalar nor (N,), time not (N,)).
        """

    def close(self) -> None:
        """Free native resources (idempotent)."""


class BundlingBackend(Protocol):
    """What a backend whose :attr:`Backend.bundles` is True offers: :meth:`Backend.intersect`
    with ``bundle``, the number of consecutive rays cast from one origin at one time
    (:meth:`.native.NativeBackend.intersect`)."""

    def intersect(self, origins: Floating, directions: Floating, tmax: Floating | float | np.floating[Any],
                  time: Floating | None = None, bundle: int = 1) -> ClosestHits: ...
