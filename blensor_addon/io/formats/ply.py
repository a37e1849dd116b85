"""PLY point clouds (binary little-endian) through ``plyfile``, every field.

Files: ``clean/scan<frame:05d>.ply`` and ``noisy/scan<frame:05d>.ply``. One ``vertex``
element: x, y, z (float32, m), nx, ny, nz, red, green, blue (uint8), intensity,
reflectivity, range (float32), timestamp (float64 s), azimuth, elevation (float32 rad),
channel, ring, semantic, object_id, instancer_id, instance_id, ray_index (int32: the
integer type every PLY reader takes; Open3D's skips ``ushort`` and ``uint`` properties).
Readable by plyfile, Open3D (legacy and tensor API), CloudCompare, MeshLab.
"""
from __future__ import annotations

import io

import numpy as np

from ...core.result import ScanResult
from ._base import Writer, clean_and_noisy

PLY_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"),
                      ("red", "u1"), ("green", "u1"), ("blue", "u1"), ("intensity", "<f4"),
                      ("reflectivity", "<f4"), ("range", "<f4"), ("timestamp", "<f8"), ("azimuth", "<f4"),
                      ("elevation", "<f4"), ("channel", "<i4"), ("ring", "<i4"), ("semantic", "<i4"),
                      ("object_id", "<i4"), ("instancer_id", "<i4"), ("instance_id", "<i4"),
                      ("ray_index", "<i4")])

#: the unsigned fields written as int32
_INT_FIELDS = ("channel", "ring", "semantic", "object_id", "instancer_id", "instance_id", "ray_index")


def ply_vertices(result: ScanResult, noisy: bool | None = False) -> np.ndarray:
    """The ``vertex`` records of ``result`` (the noisy points if ``noisy``): (N,)
    structured array of dtype :data:`PLY_DTYPE`. With ``noisy=None`` the fields in
    which the two clouds differ (x, y, z, range) are left unset (:func:`_set_cloud`).

    Raises:
        ValueError: an id or ray index above 2^31 - 1 (int32); scans that large are
            refused before they are cast (the ray limit).
    """
    for k in _INT_FIELDS:
        a = getattr(result, k)
        if a.size and int(a.max()) > np.iinfo(np.int32).max:
            raise ValueError(f"PLY: {k} {int(a.max())} does not fit the int32 property")
    v = np.empty(len(result), PLY_DTYPE)
    for i, k in enumerate("xyz"):
        v["n" + k] = result.normal[:, i]
    for i, k in enumerate(("red", "green", "blue")):
        v[k] = result.color[:, i]
    for k in ("intensity", "reflectivity", "timestamp", "azimuth", "elevation", "channel", "ring", "semantic",
              "object_id", "instancer_id", "instance_id", "ray_index"):
        v[k] = getattr(result, k)
    if noisy is not None:
        _set_cloud(v, result, noisy)
    return v


def _set_cloud(v: np.ndarray, result: ScanResult, noisy: bool) -> None:
    """Write the fields in which the clean and the noisy cloud differ (x, y, z, range)."""
    xyz = result.xyz_noisy if noisy else result.xyz
    for i, k in enumerate("xyz"):
        v[k] = xyz[:, i]
    v["range"] = result.range_noisy if noisy else result.range


def _ply_file(v: np.ndarray) -> bytes:
    from plyfile import PlyData, PlyElement
    buf = io.BytesIO()
    PlyData([PlyElement.describe(v, "vertex")], text=False, byte_order="<").write(buf)
    return buf.getvalue()


def ply_bytes(result: ScanResult, noisy: bool = False) -> bytes:
    """The binary PLY file of ``result`` (the noisy points if ``noisy``).

    Raises:
        ValueError: as :func:`ply_vertices`.
    """
    return _ply_file(ply_vertices(result, noisy))


class PlyWriter(Writer):
    """``clean/`` and ``noisy/`` binary PLY files per frame (:func:`ply_bytes`)."""

    name = "ply"
    description = "binary PLY with every field (plyfile, Open3D), clean and noisy folders"
    files = "clean/scan<frame:05d>.ply, noisy/scan<frame:05d>.ply"
    outputs = (r"(clean|noisy)/scan\d+\.ply",)
    requires = ("plyfile",)

    def frame_files(self, result):
        v = ply_vertices(result, None)  # the fields both clouds share, filled once

        def encode(noisy):
            _set_cloud(v, result, noisy)
            return _ply_file(v)
        return clean_and_noisy(result, "ply", encode)


WRITER = PlyWriter
