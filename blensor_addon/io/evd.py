"""EVD, the original BlenSor binary format, byte-compatible (reference section 10.1).

``file := block* int32(-1)``; ``block := int32 N, N records``; a record is
``struct '<14dQ'`` (120 bytes, no padding): timestamp [s], yaw [rad], pitch [rad],
distance [m], noisy distance [m], x, y, z, noisy x, y, z [m], red, green, blue
(0-255 as float64), object id (uint64). A range scan writes one block per frame into
one file and ends it with -1.

Differences from the original, on purpose: the object id is BlenSor's stable instance
id (1..N, 0 never appears for a return) instead of the first four characters of the
object name; the file is written under a temporary name and renamed when closed, and a
cancelled or failed range scan still gets every finished frame and the terminator.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ..core.result import ScanResult
from .atomic import temp_name

RECORD = struct.Struct("<14dQ")
EVD_DTYPE = np.dtype([("timestamp", "<f8"), ("yaw", "<f8"), ("pitch", "<f8"), ("distance", "<f8"),
                      ("distance_noisy", "<f8"), ("x", "<f8"), ("y", "<f8"), ("z", "<f8"),
                      ("x_noisy", "<f8"), ("y_noisy", "<f8"), ("z_noisy", "<f8"), ("red", "<f8"),
                      ("green", "<f8"), ("blue", "<f8"), ("object_id", "<u8")])
assert EVD_DTYPE.itemsize == RECORD.size == 120


def evd_block(result: ScanResult) -> bytes:
    """One EVD block (int32 N + N 120-byte records) for ``result``."""
    rec = np.empty(len(result), dtype=EVD_DTYPE)
    rec["timestamp"] = result.timestamp
    rec["yaw"] = result.azimuth
    rec["pitch"] = result.elevation
    rec["distance"] = result.range
    rec["distance_noisy"] = result.range_noisy
    for i, a in enumerate("xyz"):
        rec[a] = result.xyz[:, i]
        rec[a + "_noisy"] = result.xyz_noisy[:, i]
    for i, c in enumerate(("red", "green", "blue")):
        rec[c] = result.color[:, i]
    rec["object_id"] = result.object_id
    return struct.pack("<i", len(result)) + rec.tobytes()


class EvdWriter:
    """Appends blocks to ``<path>`` through a temporary file; :meth:`close` writes the
    -1 terminator and renames it into place. Use as a context manager: on an exception
    the finished blocks are still closed and kept.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        self._tmp = temp_name(self.path)
        self._f = open(self._tmp, "wb")
        self.blocks = 0

    def write(self, result: ScanResult) -> None:
        """Append one block (a frame) in one write."""
        self._f.write(evd_block(result))
        self._f.flush()
        self.blocks += 1

    def close(self) -> None:
        """Terminate the file and rename it to its final name (idempotent)."""
        if self._f is None:
            return
        self._f.write(struct.pack("<i", -1))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        os.replace(self._tmp, self.path)

    def discard(self) -> None:
        """Close and delete the temporary file without writing anything (idempotent)."""
        if self._f is None:
            return
        self._f.close()
        self._f = None
        os.unlink(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_evd(path) -> list[np.ndarray]:
    """Read an EVD file: list of structured arrays (dtype :data:`EVD_DTYPE`), one per block.

    Raises:
        ValueError: truncated file or missing terminator.
    """
    data = Path(path).read_bytes()
    blocks, pos = [], 0
    while True:
        if pos + 4 > len(data):
            raise ValueError(f"{path}: truncated EVD (no -1 terminator)")
        (n,) = struct.unpack_from("<i", data, pos)
        pos += 4
        if n == -1:
            return blocks
        end = pos + n * RECORD.size
        if n < 0 or end > len(data):
            raise ValueError(f"{path}: corrupt EVD block header {n} at byte {pos - 4}")
        blocks.append(np.frombuffer(data, EVD_DTYPE, n, pos))
        pos = end
