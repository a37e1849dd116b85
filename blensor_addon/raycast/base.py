"""The batch ray-cast interface shared by the native library and the BVHTree fallback:
the geometry handed to a backend (:class:`MeshData`, :class:`SceneGeometry` with its
content hash), what it answers (:class:`ClosestHits`) and the :class:`Backend` base."""
from __future__ import annotations

import hashlib
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


def index_array(name: str, values, columns: int | None = None) -> np.ndarray:
    """``values`` as a contiguous int32 array (reshaped to (-1, ``columns``) or (-1,)),
    refusing what a cast would change: integers outside int32 (int64 indices above 2^31
    would wrap) and non-integral or non-finite floats (1.7 would become 1).

    Raises:
        ValueError: naming ``name`` and the allowed range.
    """
    a = np.asarray(values)
    allowed = f"{name} must be integers within 0..{np.iinfo(np.int32).max}"
    if a.dtype.kind == "f":
        if a.size and not (np.isfinite(a).all() and (a == np.floor(a)).all()):
            raise ValueError(f"{allowed}, got non-integral values such as {a[a != np.floor(a)].ravel()[0]!r}")
    elif a.dtype.kind not in "iub" and a.size:
        raise ValueError(f"{allowed}, got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{allowed}, got values in {a.min()}..{a.max()}")
    a = np.ascontiguousarray(a, dtype=np.int32)
    return a.reshape(-1, columns) if columns else a.reshape(-1)


@dataclass
class MeshData:
    """One mesh in object space.

    Attributes:
        vertices (V, 3) float32 m; triangles (T, 3) int32 vertex indices.
        key: content fingerprint (str); equal keys mean equal geometry, so acceleration
            structures can be reused across frames.
    """

    vertices: np.ndarray
    triangles: np.ndarray
    key: str = ""

    def __post_init__(self) -> None:
        self.vertices = np.ascontiguousarray(self.vertices, dtype=np.float32).reshape(-1, 3)
        self.triangles = index_array("triangles", self.triangles, 3)
        if not self.key:
            # CRC-32 and Adler-32 of both arrays plus their sizes (~1 ms per million
            # triangles; a cryptographic hash would cost more than the BVH build it saves)
            v, t = self.vertices, self.triangles
            self.key = "%d.%d.%08x%08x.%08x%08x" % (
                v.shape[0], t.shape[0], zlib.crc32(v), zlib.adler32(v), zlib.crc32(t), zlib.adler32(t))


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

    meshes: list
    instance_mesh: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    instance_matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 4, 4), np.float32))
    instance_matrix_end: np.ndarray | None = None

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

    def motion(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Motion records and moving mask (:func:`.motion.motion_records` of
        ``instance_matrix`` and ``instance_matrix_end``): (I, 32) float64 and (I,) bool,
        or None when ``instance_matrix_end`` is None."""
        if self.instance_matrix_end is None:
            return None
        from .motion import motion_records
        return motion_records(self.instance_matrix, self.instance_matrix_end)

    def content(self) -> tuple:
        """The geometry's content as it is now, in copies the caller owns: (mesh keys,
        instance meshes, transforms, end transforms or None). A backend keeps it to tell
        whether a later geometry is the same (:meth:`has_content`: a static scene sampled
        at two frames), so arrays changed in place afterwards do not fool it. About 7 ms
        and 64 MB for 10^6 instances."""
        end = self.instance_matrix_end
        return (tuple(m.key for m in self.meshes), np.array(self.instance_mesh), np.array(self.instance_matrix),
                None if end is None else np.array(end))

    def has_content(self, content: tuple | None) -> bool:
        """True if this geometry equals ``content`` (from :meth:`content`) exactly."""
        if content is None:
            return False
        keys, im, xf, end = content
        mine = self.instance_matrix_end
        return (keys == tuple(m.key for m in self.meshes) and np.array_equal(im, self.instance_mesh)
                and np.array_equal(xf, self.instance_matrix) and (end is None) == (mine is None)
                and (end is None or np.array_equal(end, mine)))

    def hash(self) -> str:
        """Hash of all meshes and instance transforms, the end transforms included when
        given (hex str)."""
        h = hashlib.sha256()
        for m in self.meshes:
            h.update(m.key.encode())
        h.update(self.instance_mesh.tobytes())
        h.update(self.instance_matrix.tobytes())
        if self.instance_matrix_end is not None:
            h.update(b"end")
            h.update(self.instance_matrix_end.tobytes())
        return h.hexdigest()


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

    t: np.ndarray
    instance: np.ndarray
    primitive: np.ndarray
    normal: np.ndarray
    uv: np.ndarray


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
    def intersect(self, origins: np.ndarray, directions: np.ndarray,
                  tmax: np.ndarray | float, time: np.ndarray | None = None) -> ClosestHits:
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
