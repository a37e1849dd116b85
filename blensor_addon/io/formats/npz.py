"""NumPy ``.npz`` writer for :class:`ScanResult`, compressed and byte-reproducible.

Members are deflate-compressed as ``numpy.savez_compressed`` does (option
``npz.compress=false``: stored uncompressed, as ``numpy.savez``). ``numpy.savez*``
stamps every member with the current time, so two runs differ; this writer fixes the
timestamps (1980-01-01), the member order and the compression level, so the same scan
gives the same bytes. Readable with ``numpy.load(path)`` (no pickle needed) either way.

Keys: the per-return arrays of :data:`blensor_addon.core.result.FIELDS`, plus
``frame`` (int64), ``frame_time`` (float64 s), ``start_time_ns`` (int64: the run's time
base, UNIX ns of scene time 0, ``--start-time``; a point's absolute time is
``start_time_ns * 1e-9 + timestamp`` s), ``frame_of_reference`` (str),
``sensor_to_world`` (4, 4) float64, ``sensor`` (JSON str of the settings),
``sensor_type`` (str) and ``grid_shape`` (int64 (rows, cols), with ``ray_index``
placing each return in the sensor's grid), ``axes`` (str) and ``classes`` (JSON str of
the semantic class table, name -> id); in continuous time also
``sensor_to_world_end`` (4, 4) float64 (the pose at the packet's end), and the
deskewed points ``xyz_deskewed``, ``xyz_noisy_deskewed`` (N, 3) float32 when the
setting ``deskew`` is on, and for a world-frame scan the points in the sensor frame at
each ray's time, ``xyz_sensor``, ``xyz_noisy_sensor`` (N, 3) float32. The object
table (id -> name, label, type) is written once per run, in ``manifest.json``, not into
every frame (with 10^6 instances it would dominate the file). Further per-point fields a
sensor adds (``return_number``, ``number_of_returns``, ... :data:`~blensor_addon.core.result.EXTRA_FIELDS`)
follow, when the result holds them. ``ray_index`` is absent for a sensor with no grid.

The archive is assembled here, byte for byte as :mod:`zipfile` writes it (its local
headers from :meth:`zipfile.ZipInfo.FileHeader`, the central directory and end record
packed with zipfile's own layouts), so that the members can be deflated at once on a
small thread pool: zlib releases the GIL while it deflates and while it sums the CRC, so
a frame's members are compressed on the free cores while the writer thread goes on, and
the bytes are those of one ``zipfile.ZipFile.writestr`` per member (one
``compress(data) + flush()`` of a raw deflate stream at :data:`COMPRESS_LEVEL`).
Members too large for a plain zip (ZIP64, from 2 GiB) are written by :mod:`zipfile`.

World coordinates are float32 here; a world-frame scan far from the origin (float32
rounding over 1 mm, from 32 km) is warned about once per run (LAS keeps 0.1 mm).
"""
from __future__ import annotations

import io
import json
import os
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.ndtypes import Array
from ...core.result import ScanResult
from ...core.settings import setting
from ...core.timebase import parse_start_time
from ..atomic import atomic_write_bytes
from ._base import Float32Warning, RunInfo, Writer, write_array

_EPOCH = (1980, 1, 1, 0, 0, 0)
#: zlib level of compressed members. numpy.savez_compressed uses zlib's default, 6; level
#: 1 compresses the demo's HDL-64E revolution (124,108 points, 11.56 MB stored) to 4.07 MB
#: in 0.10 s, level 6 to 3.96 MB in 0.22 s (benchmarks/writers.py --only npz): 3% larger
#: for less than half the time. Any deflate level reads the same with numpy.load.
COMPRESS_LEVEL = 1


def npz_members(result: ScanResult, start_ns: int | None = None) -> dict[str, Array]:
    """Arrays stored in the npz, in file order (``start_ns``: the time base, UNIX ns; None:
    the default, :data:`blensor_addon.core.timebase.DEFAULT_START_TIME`)."""
    out = dict(result.arrays())  # every result field in FIELDS order (no ray_index without a grid)
    out["frame"] = np.array(result.frame, dtype=np.int64)
    out["frame_time"] = np.array(result.frame_time, dtype=np.float64)
    out["start_time_ns"] = np.array(parse_start_time(None) if start_ns is None else start_ns, dtype=np.int64)
    out["frame_of_reference"] = np.array(result.frame_of_reference)
    out["sensor_to_world"] = np.asarray(result.sensor_to_world, dtype=np.float64)
    out["sensor"] = np.array(json.dumps(result.sensor, sort_keys=True))
    out["sensor_type"] = np.array(result.sensor_type)
    out["grid_shape"] = np.asarray(result.grid_shape, dtype=np.int64)
    out["axes"] = np.array(result.axes)
    from ...core.classes import CLASSES
    out["classes"] = np.array(json.dumps(CLASSES))
    if result.sensor_to_world_end is not None:  # continuous time: the pose at the packet's end
        out["sensor_to_world_end"] = np.asarray(result.sensor_to_world_end, dtype=np.float64)
    for name, arr in result.extra.items():  # e.g. xyz_deskewed, return_number (registered fields)
        out[name] = np.asarray(arr)
    return out


def npz_bytes(result: ScanResult, compress: bool = True, start_ns: int | None = None) -> bytes:
    """The bytes of the .npz file of ``result`` (fixed member times; deflated members
    if ``compress``; ``start_ns``: the time base, see :func:`npz_members`)."""
    return npz_bytes_of(npz_members(result, start_ns), compress)


#: members of at least this many bytes are deflated on the pool (:func:`deflate_pool`);
#: smaller ones (the metadata) on the calling thread
POOL_MIN_BYTES = 1 << 16
#: threads of the deflate pool: the cores, at most 4
POOL_THREADS = max(1, min(4, os.cpu_count() or 1))
#: the zip's central directory header and end of central directory record (PKWARE's
#: APPNOTE.TXT 4.3.12 and 4.3.16; zipfile's structCentralDir and structEndArchive)
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_pool: tuple[int, Executor] | None = None  # (the pid that made it, the pool)
_pool_lock = threading.Lock()


def deflate_pool() -> Executor:
    """The process's deflate threads (:data:`POOL_THREADS`, named ``blensor-deflate``),
    made on first use, and again in a forked child (which has none of its parent's
    threads: their queue would never be served)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="blensor-deflate"))
        return _pool[1]


def _packed(data: memoryview, compress: bool) -> tuple[bytes | memoryview, int]:
    """``(payload, CRC-32)`` of a member's bytes ``data``: deflated as zipfile does (raw
    deflate at :data:`COMPRESS_LEVEL`, one ``compress`` and a ``flush``) if ``compress``,
    else ``data`` itself."""
    crc = zlib.crc32(data)
    if not compress:
        return data, crc
    co = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    return co.compress(data) + co.flush(), crc


def _member_info(name: str, compress: bool) -> zipfile.ZipInfo:
    """The zip entry of member ``name``: fixed time (1980-01-01), mode 0644, the method."""
    info = zipfile.ZipInfo(name + ".npy", date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    return info


def _zipfile_bytes(members: list[tuple[str, memoryview]], compress: bool) -> bytes:
    """The archive of ``members`` ((name, npy bytes)) written by :mod:`zipfile`, one
    ``writestr`` per member (what :func:`npz_bytes_of` gives, ZIP64 records included)."""
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    level = COMPRESS_LEVEL if compress else None
    with zipfile.ZipFile(out, "w", compression=method, compresslevel=level) as zf:
        for name, data in members:
            zf.writestr(_member_info(name, compress), data, compress_type=method, compresslevel=level)
    return out.getvalue()


def npz_bytes_of(arrays: dict[str, Array], compress: bool = False,
                 pool: Callable[[], Executor] | None = deflate_pool) -> bytes:
    """A reproducible .npz of ``arrays`` (fixed member times, in order; members
    deflated at :data:`COMPRESS_LEVEL` if ``compress``, else stored), byte for byte what
    :mod:`zipfile` writes for one ``writestr`` per member. The members of at least
    :data:`POOL_MIN_BYTES` are deflated (and CRC-summed) on ``pool()``'s threads at once
    (None: all on this thread); an archive that needs ZIP64 records (from 2 GiB, or
    65,535 members) is written by :mod:`zipfile`.

    Raises:
        ValueError: an array of Python objects (a pickle is never written).
    """
    members: list[tuple[str, memoryview]] = []
    for name, arr in arrays.items():
        buf = io.BytesIO()
        write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
        members.append((name, buf.getbuffer()))
    if (sum(len(data) for _, data in members) * 1.05 > zipfile.ZIP64_LIMIT
            or len(members) > zipfile.ZIP_FILECOUNT_LIMIT):
        return _zipfile_bytes(members, compress)  # ZIP64 records (sizes, offsets, member count)
    big = [data for _, data in members if len(data) >= POOL_MIN_BYTES] if pool is not None else []
    done = iter(pool().map(_packed, big, [compress] * len(big)) if pool is not None and big else ())
    out: list[bytes | memoryview] = []
    central: list[bytes] = []
    offset = 0
    for name, data in members:
        pooled = pool is not None and len(data) >= POOL_MIN_BYTES
        payload, crc = next(done) if pooled else _packed(data, compress)
        info = _member_info(name, compress)
        info.flag_bits, info.CRC = 0, crc  # (seekable output: no data descriptor)
        info.file_size, info.compress_size, info.header_offset = len(data), len(payload), offset
        header = info.FileHeader(False)
        try:  # (as zipfile: an ASCII name as it is, else UTF-8 and flag 0x800)
            filename, flags = info.filename.encode("ascii"), info.flag_bits
        except UnicodeEncodeError:
            filename, flags = info.filename.encode("utf-8"), info.flag_bits | 0x800
        d = info.date_time
        central.append(_CENTRAL.pack(
            b"PK\x01\x02", info.create_version, info.create_system,
            info.extract_version, info.reserved, flags, info.compress_type,
            d[3] << 11 | d[4] << 5 | d[5] // 2, (d[0] - 1980) << 9 | d[1] << 5 | d[2], crc, len(payload),
            len(data), len(filename), len(info.extra), len(info.comment), 0, info.internal_attr,
            info.external_attr, offset) + filename + info.extra + info.comment)
        out += [header, payload]
        offset += len(header) + len(payload)
    directory = b"".join(central)
    end = _END.pack(b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), offset, 0)
    return b"".join([*out, directory, end])


def write_npz(result: ScanResult, path: str | os.PathLike[str], compress: bool = True) -> None:
    """Write ``result`` to ``path`` (.npz, compressed unless ``compress`` is False)
    atomically.

    Raises:
        OSError: the file cannot be written (no partial file is left).
    """
    atomic_write_bytes(path, npz_bytes(result, compress))


@dataclass(frozen=True)
class NpzOptions:
    """Options of the npz writer: ``compress`` (deflate the members)."""

    compress: bool = setting(True, "Compress npz", "Deflate the arrays as numpy.savez_compressed (false: "
                             "stored as numpy.savez, larger files written faster)")


class NpzWriter(Writer):
    """``scan<frame:05d>.npz`` per frame (:func:`npz_bytes`)."""

    name = "npz"
    description = "NumPy archive of every field of the frame (numpy.load reads it)"
    files = "scan<frame:05d>.npz"
    outputs = (r"scan\d+\.npz",)
    Options = NpzOptions
    options: NpzOptions

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._float32 = Float32Warning(self.name)

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        self._float32.check(result)
        return [(f"scan{result.frame:05d}.npz", npz_bytes(result, self.options.compress,
                                                                 self.run.start_ns))]


WRITER = NpzWriter
