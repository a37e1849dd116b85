"""NumPy ``.npz`` writer for :class:`ScanResult`, byte-reproducible.

``numpy.savez`` stamps every member with the current time, so two runs differ; this
writer fixes the timestamps (1980-01-01) and the member order, so the same scan gives
the same bytes. Readable with ``numpy.load(path)`` (no pickle needed).

Keys: the per-return arrays of :data:`blensor_addon.core.result.FIELDS`, plus
``frame`` (int64), ``frame_time`` (float64 s), ``frame_of_reference`` (str),
``sensor_to_world`` (4, 4) float64, ``sensor`` (JSON str of the settings),
``sensor_type`` (str) and ``grid_shape`` (int64 (rows, cols), with ``ray_index``
placing each return in the sensor's grid), ``axes`` (str) and ``classes`` (JSON str of
the semantic class table, name -> id); in continuous time also
``sensor_to_world_end`` (4, 4) float64 (the pose at the packet's end), and the
deskewed points ``xyz_deskewed``, ``xyz_noisy_deskewed`` (N, 3) float32 when the
setting ``deskew`` is on, and for a world-frame scan the points in the sensor frame at
each ray's time, ``xyz_sensor``, ``xyz_noisy_sensor`` (N, 3) float32. The object
table (id -> name, label, type) is written once per run, in ``manifest.json``, not into
every frame (with 10^6 instances it would dominate the file).
"""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np

from ...core.result import ScanResult
from ..atomic import atomic_write_bytes
from ._base import Writer

_EPOCH = (1980, 1, 1, 0, 0, 0)


def npz_members(result: ScanResult) -> dict[str, np.ndarray]:
    """Arrays stored in the npz, in file order."""
    out = dict(result.arrays())
    out["frame"] = np.array(result.frame, dtype=np.int64)
    out["frame_time"] = np.array(result.frame_time, dtype=np.float64)
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
    for name, arr in result.extra.items():  # e.g. xyz_deskewed
        out[name] = np.asarray(arr)
    return out


def npz_bytes(result: ScanResult) -> bytes:
    """The bytes of the .npz file of ``result`` (uncompressed, fixed member times)."""
    return npz_bytes_of(npz_members(result))


def npz_bytes_of(arrays: dict[str, np.ndarray]) -> bytes:
    """A reproducible .npz of ``arrays`` (uncompressed, fixed member times, in order)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())
    return out.getvalue()


def write_npz(result: ScanResult, path) -> None:
    """Write ``result`` to ``path`` (.npz, uncompressed) atomically.

    Raises:
        OSError: the file cannot be written (no partial file is left).
    """
    atomic_write_bytes(path, npz_bytes(result))


class NpzWriter(Writer):
    """``scan<frame:05d>.npz`` per frame (:func:`npz_bytes`)."""

    name = "npz"
    description = "NumPy archive of every field of the frame (numpy.load reads it)"
    files = "scan<frame:05d>.npz"
    outputs = (r"scan\d+\.npz",)

    def frame_files(self, result):
        return [(f"scan{result.frame:05d}.npz", npz_bytes(result))]


WRITER = NpzWriter
