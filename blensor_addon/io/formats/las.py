"""LAS 1.4 and LAZ point clouds through ``laspy`` (+ ``lazrs`` for LAZ).

Files: ``clean/scan<frame:05d>.las`` and ``noisy/scan<frame:05d>.las`` (``.laz`` for the
``laz`` format). Point format 7 (LAS 1.4): x, y, z scaled integers with scale 0.0001 m
and an offset at the cloud's 1 m floor, so the quantization error is at most 0.05 mm;
``gps_time`` = timestamp (s); ``intensity`` = intensity x 65535 (uint16); ``red``,
``green``, ``blue`` = material colour x 257 (uint16); ``classification`` = semantic class
id (SemanticKITTI ids, 0..255; the moving-* classes 252..259 above 255 are clipped to 255
there and kept exactly in ``semantic``); ``point_source_id`` = instance index (low 16
bits). Extra bytes: ``object_id``, ``instancer_id`` (uint32), ``semantic``, ``ring``
(uint16), ``range`` and ``reflectivity`` (float32). Coordinates are the result's
(sensor or world frame, in its axes).
"""
from __future__ import annotations

import io

import numpy as np

from ...core.result import ScanResult
from ._base import Writer, clean_and_noisy

SCALE = 1e-4
EXTRA = (("object_id", np.uint32), ("instancer_id", np.uint32), ("semantic", np.uint16), ("ring", np.uint16),
         ("range", np.float32), ("reflectivity", np.float32))


def las_bytes(result: ScanResult, noisy: bool = False, compress: bool = False) -> bytes:
    """One LAS 1.4 (or LAZ) file of ``result`` (the noisy points if ``noisy``)."""
    import laspy
    xyz = (result.xyz_noisy if noisy else result.xyz).astype(np.float64)
    header = laspy.LasHeader(point_format=7, version="1.4")
    header.scales = np.array([SCALE] * 3)
    header.offsets = np.floor(xyz.min(axis=0)) if len(xyz) else np.zeros(3)
    header.add_extra_dims([laspy.ExtraBytesParams(name=n, type=t) for n, t in EXTRA])
    # a record of the final size first: assigning to an empty LasData grows it by appending
    las = laspy.LasData(header, points=laspy.ScaleAwarePointRecord.zeros(len(xyz), header=header))
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    las.gps_time = result.timestamp
    las.intensity = np.round(np.clip(result.intensity, 0.0, 1.0) * 65535).astype(np.uint16)
    c = result.color.astype(np.uint16) * 257
    las.red, las.green, las.blue = c[:, 0], c[:, 1], c[:, 2]
    las.classification = np.minimum(result.semantic, 255).astype(np.uint8)
    las.point_source_id = (result.instance_id & 0xFFFF).astype(np.uint16)
    las.object_id = result.object_id
    las.instancer_id = result.instancer_id
    las.semantic = result.semantic
    las.ring = result.ring
    las["range"] = result.range_noisy if noisy else result.range
    las.reflectivity = result.reflectivity
    buf = io.BytesIO()
    las.write(buf, do_compress=compress, laz_backend=laspy.LazBackend.LazrsParallel if compress else None)
    return buf.getvalue()


class LasWriter(Writer):
    """``clean/`` and ``noisy/`` LAS 1.4 files per frame (:func:`las_bytes`)."""

    name = "las"
    description = "LAS 1.4 point clouds (laspy; CloudCompare, PDAL), clean and noisy folders"
    files = "clean/scan<frame:05d>.las, noisy/scan<frame:05d>.las"
    outputs = (r"(clean|noisy)/scan\d+\.las",)
    compress = False
    suffix = "las"
    requires = ("laspy",)

    def frame_files(self, result):
        return clean_and_noisy(result, self.suffix, lambda noisy: las_bytes(result, noisy, self.compress))


class LazWriter(LasWriter):
    """As :class:`LasWriter`, LAZ-compressed (lazrs)."""

    name = "laz"
    description = "LAZ (compressed LAS 1.4), clean and noisy folders"
    files = "clean/scan<frame:05d>.laz, noisy/scan<frame:05d>.laz"
    outputs = (r"(clean|noisy)/scan\d+\.laz",)
    compress = True
    suffix = "laz"
    requires = ("laspy", "lazrs")


WRITERS = (LasWriter, LazWriter)
