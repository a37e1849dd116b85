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

World coordinates are float32 here; a world-frame scan far from the origin (float32
rounding over 1 mm, from 32 km) is warned about once per run (LAS keeps 0.1 mm).
"""
from __future__ import annotations

import io
import json
import os
import zipfile
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


def npz_bytes_of(arrays: dict[str, Array], compress: bool = False) -> bytes:
    """A reproducible .npz of ``arrays`` (fixed member times, in order; members
    deflated at :data:`COMPRESS_LEVEL` if ``compress``, else stored)."""
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    level = COMPRESS_LEVEL if compress else None
    with zipfile.ZipFile(out, "w", compression=method, compresslevel=level) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = method
            zf.writestr(info, buf.getbuffer(), compress_type=method, compresslevel=level)
    return out.getvalue()


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
