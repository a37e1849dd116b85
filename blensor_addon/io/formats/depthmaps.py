"""Float depth maps of image sensors (depth camera, ToF, Kinect): four writers of the
format registry, used by ``blensor depth`` / ``blensor.export_depth_map`` (a range scan
with the camera as a depth sensor) and by any range scan of an image sensor.

Per frame f and format (pixel (row, col) = Blender's own camera projection; misses NaN):

- ``exr``: ``depth%05d.exr``, 32-bit float OpenEXR written through Blender's own image
  API, one file with channels R = planar depth z (m), G = radial range (m), B = object
  id (exact up to 2^24; 0 = nothing), A = 1 where something returned, else 0.
- ``npy``: ``depth%05d_z.npy``, ``depth%05d_range.npy`` (float32, (H, W), row 0 at the
  top) and ``depth%05d_object_id.npy`` (uint32).
- ``pfm``: ``depth%05d.pfm``, the portable float map of z (``Pf``, little-endian: scale
  -1, rows bottom to top as the format says).
- ``dmap``: ``depth%05d.dmap``, the original's layout (reference 10.5): int32 width,
  int32 height, then width x height float64 radial distances, bottom row first
  (little-endian; misses are NaN).

The EXR goes through Blender's own image API, so that writer (alone in ``io/``)
imports ``bpy``, inside :func:`exr_bytes`.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ...core.axes import sensor_points
from ...core.result import ScanResult
from ..atomic import remove_quietly
from ._base import Writer


def depth_images(result: ScanResult, noisy: bool = False) -> dict[str, np.ndarray]:
    """Images of an image-sensor result: ``z`` (planar depth along the sensor's view
    axis) and ``range`` (H, W) float32 m (NaN where nothing returned), ``object_id``
    (H, W) uint32 (0). Points in world coordinates or REP-103 axes are taken back to
    BlenSor's sensor frame (:func:`~blensor_addon.core.axes.sensor_points`).
    """
    xyz = sensor_points(result, noisy, "blensor")
    rows, cols = result.grid_shape
    idx = result.ray_index.astype(np.int64)
    z = np.full(rows * cols, np.nan, np.float32)
    z[idx] = -xyz[:, 2]
    rng = np.full(rows * cols, np.nan, np.float32)
    rng[idx] = result.range_noisy if noisy else result.range
    oid = np.zeros(rows * cols, np.uint32)
    oid[idx] = result.object_id
    return {"z": z.reshape(rows, cols), "range": rng.reshape(rows, cols), "object_id": oid.reshape(rows, cols)}


def npy_bytes(a: np.ndarray) -> bytes:
    """The .npy file of ``a``."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def pfm_bytes(z: np.ndarray) -> bytes:
    """Portable float map (``Pf``, one channel, little-endian) of (H, W) float32 ``z``."""
    h, w = z.shape
    return f"Pf\n{w} {h}\n-1.0\n".encode() + np.ascontiguousarray(z[::-1], dtype="<f4").tobytes()


def dmap_bytes(radial: np.ndarray) -> bytes:
    """The original's ``.dmap`` (reference 10.5) of (H, W) radial distances."""
    h, w = radial.shape
    return struct.pack("<ii", w, h) + np.ascontiguousarray(radial[::-1], dtype="<f8").tobytes()


def exr_bytes(images: dict[str, np.ndarray]) -> bytes:
    """32-bit float OpenEXR (R = z, G = range, B = object id, A = returned) through
    Blender's image API (``bpy``; imported here so the other formats need no Blender)."""
    import tempfile

    import bpy
    z = images["z"]
    h, w = z.shape
    px = np.empty((h, w, 4), np.float32)
    px[..., 0] = z
    px[..., 1] = images["range"]
    px[..., 2] = images["object_id"]
    px[..., 3] = np.isfinite(z)
    img = bpy.data.images.new("blensor_depth", w, h, alpha=True, float_buffer=True, is_data=True)
    fd, tmp = tempfile.mkstemp(suffix=".exr")
    os.close(fd)
    try:
        img.pixels.foreach_set(px[::-1].ravel())  # Blender's rows start at the bottom
        img.filepath_raw = tmp
        img.file_format = "OPEN_EXR"
        img.use_half_precision = False
        img.save()
        return Path(tmp).read_bytes()
    finally:
        bpy.data.images.remove(img)
        remove_quietly(Path(tmp))


class _DepthWriter(Writer):
    needs_image = True
    kinds: tuple = ()

    def frame_files(self, result):
        return self.encode(result.frame, depth_images(result))


class ExrWriter(_DepthWriter):
    name = "exr"
    threaded = False  # Blender's image API (bpy) writes the EXR
    description = "depth maps: 32-bit float OpenEXR, R = z, G = range, B = object id, A = returned"
    files = "depth<frame:05d>.exr"
    outputs = (r"depth\d+\.exr",)

    def encode(self, f, im):
        return [(f"depth{f:05d}.exr", exr_bytes(im))]


class NpyWriter(_DepthWriter):
    name = "npy"
    description = "depth maps: z, range and object id as .npy arrays"
    files = "depth<frame:05d>_z.npy, _range.npy, _object_id.npy"
    outputs = (r"depth\d+_(z|range|object_id)\.npy",)

    def encode(self, f, im):
        return [(f"depth{f:05d}_{k}.npy", npy_bytes(im[k])) for k in ("z", "range", "object_id")]


class PfmWriter(_DepthWriter):
    name = "pfm"
    description = "depth maps: portable float map of z"
    files = "depth<frame:05d>.pfm"
    outputs = (r"depth\d+\.pfm",)

    def encode(self, f, im):
        return [(f"depth{f:05d}.pfm", pfm_bytes(im["z"]))]


class DmapWriter(_DepthWriter):
    name = "dmap"
    description = "depth maps: the original's .dmap (float64 radial distances)"
    files = "depth<frame:05d>.dmap"
    outputs = (r"depth\d+\.dmap",)

    def encode(self, f, im):
        return [(f"depth{f:05d}.dmap", dmap_bytes(im["range"]))]


WRITERS = (ExrWriter, NpyWriter, PfmWriter, DmapWriter)
