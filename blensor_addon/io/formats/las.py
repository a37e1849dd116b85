"""LAS 1.4 and LAZ point clouds through ``laspy`` (+ ``lazrs`` for LAZ).

Files: ``clean/scan<frame:05d>.las`` and ``noisy/scan<frame:05d>.las`` (``.laz`` for the
``laz`` format). Point format 7 (LAS 1.4): x, y, z scaled integers with scale 0.0001 m
and an offset at the cloud's 1 m floor, so the quantization error is at most 0.05 mm,
from float64 coordinates (a world-frame scan far from the origin keeps its float64
coordinates until here, :meth:`ScanResult.points`: 0.1 mm at 10^7 m, where float32 would
round by 0.5 m); ``return_number`` and ``number_of_returns`` from the result's
``return_number`` and ``number_of_returns`` (1 and 1 for one return per pulse); ``gps_time`` =
the point's time as LAS 1.4's adjusted standard GPS time (GPS seconds since 1980-01-06 minus
10^9, leap seconds counted; the global encoding's GPS time type bit 0 set): the run's time
base (``--start-time``, :func:`blensor_addon.core.timebase.las_gps_time`) plus the timestamp;
``intensity`` = intensity x 65535 (uint16); ``red``,
``green``, ``blue`` = material colour x 257 (uint16); ``classification`` = the ASPRS
class of the point's SemanticKITTI class (:data:`~blensor_addon.core.classes.ASPRS_OF_SEMANTIC_KITTI`:
1 unclassified, 2 ground (sidewalk, other-ground), 3 low vegetation (terrain), 5 high
vegetation (vegetation, trunk), 6 building, 7 noise (outlier), 11 road surface (road,
parking, lane-marking), user-definable 64-78 for vehicles, people, fence, other-structure,
pole, traffic-sign, other-object), named in a Classification Lookup VLR (LAS 1.4 R15
section 2.5.5); ``point_source_id`` = instance index (low 16 bits). Extra bytes:
``object_id``, ``instancer_id`` (uint32), ``semantic`` (uint16, the SemanticKITTI id,
moving-* classes included), ``ring`` (uint16), ``range`` and ``reflectivity``
(float32), and ``signal`` (float32, the received power: 1 = a 100 % Lambertian target at
normal incidence at 1 m) for a result of the radiometric return model. The header's global
encoding sets bit 0 (adjusted standard GPS time) and the WKT
bit (bit 4), which LAS 1.4 requires for point formats 6-10 (no CRS is written: coordinates
are the scene's metres); the
generating software is ``BlenSor <version>``. Coordinates are the result's (sensor or
world frame, in its axes). Points are ordered by ring (elevation rank, lowest first),
each ring in firing order (see :func:`_build`); the npz, PLY and PCD keep the scan's own
order.
"""
from __future__ import annotations

import io
from typing import BinaryIO, Protocol

import numpy as np

from ...core.classes import ASPRS_NAMES, asprs_classes
from ...core.result import ScanResult
from ...core.timebase import las_gps_time, parse_start_time
from ...core.version import __version__
from ._base import Records, Writer, clean_and_noisy

SCALE = 1e-4
EXTRA = (("object_id", np.uint32), ("instancer_id", np.uint32), ("semantic", np.uint16), ("ring", np.uint16),
         ("range", np.float32), ("reflectivity", np.float32))


class _PointFormat(Protocol):
    """What this module reads of a ``laspy.PointFormat``."""

    id: int
    num_extra_bytes: int
    size: int


class _Header(Protocol):
    """What this module reads of a ``laspy.LasHeader``."""

    point_format: _PointFormat


class _Points(Protocol):
    """What this module reads of a ``laspy.PackedPointRecord``: its records."""

    array: Records

    def __len__(self) -> int: ...


class LasFile(Protocol):
    """What this module uses of a ``laspy.LasData`` (laspy ships no type information)."""

    points: _Points

    def write(self, destination: BinaryIO, do_compress: bool | None = None,
              laz_backend: object = None) -> None: ...


def las_data(result: ScanResult, noisy: bool = False, share: bool = False,
             start_ns: int | None = None) -> LasFile:
    """The ``laspy.LasData`` of ``result`` (its noisy points if ``noisy``; ``start_ns``: the
    time base, UNIX ns, None: the default), as described in the module docstring. With
    ``share`` (the writers) the frame's two clouds are kept
    until the writers have encoded the frame (:meth:`LasWriter.append` drops them), so
    the LAS and LAZ writers of a run encode each cloud once."""
    other = None
    for r, nz, las in _LAST:
        if r is result:
            if nz == noisy:
                return las
            other = las
    las = _build(result, noisy, other, parse_start_time(None) if start_ns is None else start_ns)
    if share:
        if _LAST and _LAST[0][0] is not result:
            _LAST.clear()
        _LAST.append((result, noisy, las))
    return las


#: (result, noisy, LasData) of the last frame encoded; see :func:`las_data`
_LAST: list[tuple[ScanResult, bool, LasFile]] = []


def _build(result: ScanResult, noisy: bool, other: LasFile | None = None, start_ns: int = 0) -> LasFile:
    """The ``laspy.LasData`` of one cloud. The point record is filled as one numpy array
    of the point format's own dtype (X, Y, Z as laspy scales them: round((x - offset) /
    scale)) instead of through laspy's per-field setters, which check and convert every
    field again (half the cost of a LAS file); laspy still writes the header and the file.
    ``other``: the frame's other cloud, already built; its record is copied and only the
    fields in which the clouds differ (X, Y, Z, range) are filled. ``start_ns``: the time
    base (UNIX ns) of ``gps_time``.

    Points are ordered by ring (the elevation rank), each ring in firing order: a laser's
    scan line is contiguous, so LAZ's predictors see neighbouring points one after the
    other (a 124k-point HDL-64E cloud compresses to 0.97 MB instead of 1.82 MB, in 24%
    less time). Every point keeps its ring and ``gps_time``.

    Raises:
        ValueError: the cloud spans more than the scaled int32 coordinates hold (214 km
            at 0.1 mm).
    """
    import laspy
    xyz = result.points(noisy)  # float64; the float64 world coordinates when the result kept them
    header = laspy.LasHeader(point_format=7, version="1.4")
    header.global_encoding.wkt = True  # LAS 1.4 R15 Table 4: required for point formats 6-10
    header.global_encoding.gps_time_type = laspy.header.GpsTimeType.STANDARD  # bit 0: adjusted standard
    header.generating_software = f"BlenSor {__version__}"
    header.vlrs.append(_classification_lookup())
    header.scales = np.array([SCALE] * 3)
    # column by column: numpy's min(axis=0) of an (N, 3) array is 20x slower (1.2 ms a 50k-point cloud)
    offsets = np.floor([float(xyz[:, k].min()) for k in range(3)]) if len(xyz) else np.zeros(3)
    header.offsets = offsets
    signal = result.extra.get("signal")
    extra = EXTRA + ((("signal", np.float32),) if signal is not None else ())
    header.add_extra_dims([laspy.ExtraBytesParams(name=n, type=t) for n, t in extra])
    order = np.argsort(result.ring, kind="stable")  # radix sort of uint16: 0.2 ms for 124k points
    if other is not None:
        # copied as bytes: numpy copies a packed record dtype field by field (4.5 ms, not 0.3)
        base = np.asarray(other.points.array)
        rec = base.view(np.uint8).copy().view(base.dtype)
    else:
        rec = np.zeros(len(xyz), header.point_format.dtype())
        # return number (bits 0-3) of number of returns (bits 4-7), 1 of 1 for one return
        # per pulse (LAS 1.4 wants 1..15)
        if "return_number" in result.extra or "number_of_returns" in result.extra:
            rn = np.clip(result.return_number, 1, 15).astype(np.uint8)
            rec["bit_fields"] = rn | (np.clip(result.number_of_returns, rn, 15).astype(np.uint8) << 4)
        else:
            rec["bit_fields"] = 0x11
        rec["gps_time"] = las_gps_time(start_ns, result.timestamp)
        rec["intensity"] = np.round(np.clip(result.intensity, 0.0, 1.0) * 65535)
        for k, name in enumerate(("red", "green", "blue")):
            rec[name] = result.color[:, k].astype(np.uint16) * 257
        rec["classification"] = asprs_classes(result.semantic)
        rec["point_source_id"] = result.instance_id & 0xFFFF
        for name in ("object_id", "instancer_id", "semantic", "ring", "reflectivity"):
            rec[name] = getattr(result, name)
        if signal is not None:
            rec["signal"] = signal
        rec = rec.take(order)  # one gather of whole records (fancy indexing a structured array is 30x slower)
    for k, name in enumerate("XYZ"):
        q = np.round((xyz[:, k] - offsets[k]) / SCALE)
        if len(q) and q.max() > np.iinfo(np.int32).max:
            raise ValueError(f"LAS: the cloud spans more than {np.iinfo(np.int32).max * SCALE / 1e3:.0f} km "
                             f"on axis {'xyz'[k]}; LAS cannot hold it at {SCALE * 1e3:g} mm resolution")
        rec[name] = q.take(order)
    rec["range"] = (result.range_noisy if noisy else result.range).take(order)
    points = laspy.ScaleAwarePointRecord(rec, header.point_format, header.scales, header.offsets)
    las: LasFile = laspy.LasData(header, points=points)
    return las


def _classification_lookup() -> object:
    """The Classification Lookup VLR (LAS 1.4 R15 section 2.5.5: user id ``LASF_Spec``,
    record id 0; entries of uint8 class and a 15-byte name) naming the ASPRS codes
    :data:`~blensor_addon.core.classes.ASPRS_NAMES`, so a viewer shows the
    user-definable 64-78 by name."""
    from laspy.vlrs.known import ClassificationLookupVlr
    vlr = ClassificationLookupVlr()
    for k, name in sorted(ASPRS_NAMES.items()):
        vlr[k] = name
    return vlr


def las_bytes(result: ScanResult, noisy: bool = False, compress: bool = False, share: bool = False,
              start_ns: int | None = None) -> bytes:
    """One LAS 1.4 (or LAZ) file of ``result`` (the noisy points if ``noisy``; ``share``,
    ``start_ns``: see :func:`las_data`)."""
    las = las_data(result, noisy, share, start_ns)
    buf = io.BytesIO()
    las.write(buf, do_compress=compress, laz_backend=_laz_backend() if compress else None)
    return buf.getvalue()


#: points of a LAZ chunk at most (LAZ's usual chunk size); a cloud is cut into an even
#: number of near-equal chunks
LAZ_CHUNK = 50_000


def laz_chunks(n: int) -> list[int]:
    """Sizes of the LAZ chunks of an ``n``-point cloud: an even number (2, 4, ...; 1 for
    a single point, none for none) of near-equal chunks of at most :data:`LAZ_CHUNK`
    points, so two cores compress a one-frame cloud in equal halves (lazrs's fixed 50,000-point chunks cut a 52k-point
    range-scan frame into 50k + 2k: one core did all the work). The cut depends on ``n``
    alone, never on the machine, so files are byte-identical everywhere.
    LAZ 1.4 variable-size chunks (chunk size 0xFFFFFFFF in the laszip VLR, point counts in
    the chunk table), part of the LAZ 1.4 specification; the tests read them back with
    laspy and lazrs."""
    if n <= 0:
        return []
    k = min(2 * -(-n // (2 * LAZ_CHUNK)), n)  # no empty chunk
    return [n * (i + 1) // k - n * i // k for i in range(k)]


def _laz_backend() -> object:
    """A laspy LAZ backend compressing with lazrs in :func:`laz_chunks` chunks, in
    parallel. laspy takes any object with ``is_available`` and ``create_writer``; the
    point writer extends laspy's lazrs writer (laspy and lazrs are pinned; should another
    add-on's laspy lack that class, laspy's own parallel lazrs backend is used: the same
    points, in fixed 50,000-point chunks)."""
    import laspy
    import lazrs
    try:
        from laspy._compression.lazrsbackend import LazrsPointWriter
    except ImportError:
        return laspy.LazBackend.LazrsParallel

    class ChunkedWriter(LazrsPointWriter):  # type: ignore[misc]  # laspy ships no type information
        def __init__(self, dest: BinaryIO, point_format: _PointFormat) -> None:
            super().__init__(dest, point_format, parallel=True)
            self.vlr = lazrs.LazVlr.new_for_compression(point_format.id, point_format.num_extra_bytes, True)
            self.size = point_format.size

        def write_points(self, points: _Points) -> None:
            data = np.frombuffer(points.array, np.uint8)
            ends = np.cumsum(laz_chunks(len(points))) * self.size
            self.compressor.compress_chunks([data[a:b] for a, b in zip(np.r_[0, ends[:-1]], ends)])

    class Backend:
        def is_available(self) -> bool:
            return True

        def create_writer(self, dest: BinaryIO, header: _Header) -> ChunkedWriter:
            return ChunkedWriter(dest, header.point_format)

    return Backend()


class LasWriter(Writer):
    """``clean/`` and ``noisy/`` LAS 1.4 files per frame (:func:`las_bytes`)."""

    name = "las"
    description = "LAS 1.4 point clouds (laspy; CloudCompare, PDAL), clean and noisy folders"
    files = "clean/scan<frame:05d>.las, noisy/scan<frame:05d>.las"
    outputs = (r"(clean|noisy)/scan\d+\.las",)
    compress = False
    suffix = "las"
    requires: tuple[str, ...] = ("laspy",)

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        start = self.run.start_ns
        return clean_and_noisy(result, self.suffix,
                               lambda noisy: las_bytes(result, noisy, self.compress, True, start))

    def append(self, result: ScanResult) -> None:
        _LAST.clear()  # every writer has encoded the frame: its clouds are not needed any more

    def close(self, status: str) -> None:
        _LAST.clear()  # the last frame's clouds are not needed any more
        super().close(status)

    def discard(self) -> None:
        _LAST.clear()
        super().discard()


class LazWriter(LasWriter):
    """As :class:`LasWriter`, LAZ-compressed (lazrs, chunks of :func:`laz_chunks` compressed in
    parallel)."""

    name = "laz"
    description = "LAZ (compressed LAS 1.4), clean and noisy folders"
    files = "clean/scan<frame:05d>.laz, noisy/scan<frame:05d>.laz"
    outputs = (r"(clean|noisy)/scan\d+\.laz",)
    compress = True
    suffix = "laz"
    requires = ("laspy", "lazrs")


WRITERS = (LasWriter, LazWriter)
