"""The batch ray-cast interface shared by the native library and the BVHTree fallback."""
from __future__ import annotations

import hashlib
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


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
        self.triangles = np.ascontiguousarray(self.triangles, dtype=np.int32).reshape(-1, 3)
        if not self.key:
            # CRC-32 and Adler-32 of both arrays plus their sizes (~1 ms per million
            # triangles; a cryptographic hash would cost more than the BVH build it saves)
            v, t = self.vertices, self.triangles
            self.key = "%d.%d.%08x%08x.%08x%08x" % (
                v.shape[0], t.shape[0], zlib.crc32(v), zlib.adler32(v), zlib.crc32(t), zlib.adler32(t))


@dataclass
class SceneGeometry:
    """Meshes and their instances.

    Attributes:
        meshes: list of K :class:`MeshData`.
        instance_mesh (I,) int32 index into ``meshes``.
        instance_matrix (I, 4, 4) float32 row-major object-to-world matrices.
    """

    meshes: list
    instance_mesh: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    instance_matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 4, 4), np.float32))

    def __post_init__(self) -> None:
        self.instance_mesh = np.ascontiguousarray(self.instance_mesh, dtype=np.int32).reshape(-1)
        self.instance_matrix = np.ascontiguousarray(self.instance_matrix, dtype=np.float32).reshape(-1, 4, 4)
        if self.instance_mesh.shape[0] != self.instance_matrix.shape[0]:
            raise ValueError("instance_mesh and instance_matrix differ in length")

    def hash(self) -> str:
        """Hash of all meshes and instance transforms (hex str)."""
        h = hashlib.sha256()
        for m in self.meshes:
            h.update(m.key.encode())
        h.update(self.instance_mesh.tobytes())
        h.update(self.instance_matrix.tobytes())
        return h.hexdigest()


@dataclass
class Hits:
    """Closest hit of each ray (N rays).

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

    @abstractmethod
    def set_geometry(self, geometry: SceneGeometry) -> None:
        """Make ``geometry`` the scene that :meth:`intersect` casts against."""

    @abstractmethod
    def intersect(self, origins: np.ndarray, directions: np.ndarray,
                  tmax: np.ndarray | float) -> Hits:
        """Closest hits.

        Args:
            origins, directions (N, 3) float32 world space; directions unit length.
            tmax: (N,) float32 or scalar: farthest distance searched (m).
        """

    def close(self) -> None:
        """Free native resources (idempotent)."""
