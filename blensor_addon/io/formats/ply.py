"""PLY point clouds (binary little-endian) through ``plyfile``, every field.

Files: ``clean/scan<frame:05d>.ply`` and ``noisy/scan<frame:05d>.ply``. One ``vertex``
element: x, y, z (float32, m), nx, ny, nz, red, green, blue (uint8), intensity,
reflectivity, range (float32), timestamp (float64 s), azimuth, elevation (float32 rad),
channel, ring, semantic, object_id, instancer_id, instance_id, ray_index (int32: the
integer type every PLY reader takes; Open3D's skips ``ushort`` and ``uint`` properties;
``ray_index`` only for sensors with a grid), then the further per-point fields the result
holds (:data:`~blensor_addon.core.result.EXTRA_FIELDS`: ``return_number``,
``number_of_returns`` as uint8, ...; a vector field ``v`` as ``v_x, v_y, v_z``), so a scan's
every field is there. Readable by plyfile, Open3D (legacy and tensor API), CloudCompare,
MeshLab. World coordinates are float32: a world-frame scan far from the origin
(float32 rounding over 1 mm, from 32 km) is warned about once per run.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from ...core.result import ScanResult
from ._base import Float32Warning, Records, RunInfo, Writer, clean_and_noisy

PLY_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"),
                      ("red", "u1"), ("green", "u1"), ("blue", "u1"), ("intensity", "<f4"),
                      ("reflectivity", "<f4"), ("range", "<f4"), ("timestamp", "<f8"), ("azimuth", "<f4"),
                      ("elevation", "<f4"), ("channel", "<i4"), ("ring", "<i4"), ("semantic", "<i4"),
                      ("object_id", "<i4"), ("instancer_id", "<i4"), ("instance_id", "<i4"),
                      ("ray_index", "<i4")])

#: the unsigned fields written as int32
_INT_FIELDS = ("channel", "ring", "semantic", "object_id", "instancer_id", "instance_id", "ray_index")


def ply_dtype(result: ScanResult) -> np.dtype[np.void]:
    """The vertex dtype of ``result``: :data:`PLY_DTYPE` (without ``ray_index`` for a
    result with no grid), then its further fields (see the module docstring)."""
    names: list[tuple[str, np.dtype[Any] | str]] = [
        (n, f[0]) for n, f in (PLY_DTYPE.fields or {}).items() if n != "ray_index" or result.has_grid]
    for name, arr in result.extra.items():
        if arr.ndim == 1:
            names.append((name, arr.dtype.str))
        else:
            names += [(f"{name}_{a}", arr.dtype.str) for a in "xyzw"[:arr.shape[1]]]
    return np.dtype([(n, np.dtype(t).str) for n, t in names])


def ply_vertices(result: ScanResult, noisy: bool | None = False) -> Records:
    """The ``vertex`` records of ``result`` (the noisy points if ``noisy``): (N,)
    structured array of dtype :func:`ply_dtype` (:data:`PLY_DTYPE` for today's
    sensors). With ``noisy=None`` the fields in which the two clouds differ (x, y, z,
    range) are left unset (:func:`_set_cloud`).

    Raises:
        ValueError: an id or ray index above 2^31 - 1 (int32); scans that large are
            refused before they are cast (the ray limit).
    """
    ints = [k for k in _INT_FIELDS if k != "ray_index" or result.has_grid]
    for k in ints:
        a = getattr(result, k)
        if a.size and int(a.max()) > np.iinfo(np.int32).max:
            raise ValueError(f"PLY: {k} {int(a.max())} does not fit the int32 property")
    v = np.empty(len(result), ply_dtype(result))
    for i, k in enumerate("xyz"):
        v["n" + k] = result.normal[:, i]
    for i, k in enumerate(("red", "green", "blue")):
        v[k] = result.color[:, i]
    for k in ("intensity", "reflectivity", "timestamp", "azimuth", "elevation", *ints):
        v[k] = getattr(result, k)
    for name, arr in result.extra.items():
        if arr.ndim == 1:
            v[name] = arr
        else:
            for i, a in enumerate("xyzw"[:arr.shape[1]]):
                v[f"{name}_{a}"] = arr[:, i]
    if noisy is not None:
        _set_cloud(v, result, noisy)
    return v


def _set_cloud(v: Records, result: ScanResult, noisy: bool) -> None:
    """Write the fields in which the clean and the noisy cloud differ (x, y, z, range)."""
    xyz = result.xyz_noisy if noisy else result.xyz
    for i, k in enumerate("xyz"):
        v[k] = xyz[:, i]
    v["range"] = result.range_noisy if noisy else result.range


def _ply_file(v: Records) -> bytes:
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

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._float32 = Float32Warning(self.name)

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        self._float32.check(result)
        v = ply_vertices(result, None)  # the fields both clouds share, filled once

        def encode(noisy: bool) -> bytes:
            _set_cloud(v, result, noisy)
            return _ply_file(v)
        return clean_and_noisy(result, "ply", encode)


WRITER = PlyWriter
