"""EVD, the original BlenSor binary format, byte-compatible (reference section 10.1).

``file := block* int32(-1)``; ``block := int32 N, N records``; a record is
``struct '<14dQ'`` (120 bytes, no padding): timestamp [s], yaw [rad], pitch [rad],
distance [m], noisy distance [m], x, y, z, noisy x, y, z [m], red, green, blue
(0-255 as float64), object id (uint64). A range scan writes one block per frame into
one file and ends it with -1.

Axes: EVD keeps the original's sensor frame (+X right, +Y up, looking down -Z) whatever
``axes`` the run uses: a sensor-frame result in REP-103 axes is turned back (an exact
permutation of the coordinates with sign changes), so a run with ``--axes ros`` writes
the bytes of the same run with ``--axes blensor`` (a coordinate that is exactly 0 may
differ in its sign bit only). World coordinates do not depend on the axes; far from the
origin they are written from the float64 coordinates the result kept
(:meth:`ScanResult.points`; EVD stores float64).

Differences from the original, on purpose: the object id is BlenSor's stable object id
(the npz's ``object_id``, 1..N, derived from the scene; 0 never appears for a return)
instead of the first four characters of the object name. Instances of one object (a
collection or Geometry Nodes instancer) share it, as the original's name prefix did; the
npz's ``instancer_id`` and ``instance_id`` tell them apart. The file is written under a
temporary name and renamed when closed, and a cancelled or failed range scan still gets
every finished frame and the terminator.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ...core.capabilities import WriterNeeds
from ...core.ndtypes import F64
from ...core.result import ScanResult
from ..atomic import StagedFile
from ._base import Records, RunInfo, Writer

RECORD = struct.Struct("<14dQ")
EVD_DTYPE = np.dtype([("timestamp", "<f8"), ("yaw", "<f8"), ("pitch", "<f8"), ("distance", "<f8"),
                      ("distance_noisy", "<f8"), ("x", "<f8"), ("y", "<f8"), ("z", "<f8"),
                      ("x_noisy", "<f8"), ("y_noisy", "<f8"), ("z_noisy", "<f8"), ("red", "<f8"),
                      ("green", "<f8"), ("blue", "<f8"), ("object_id", "<u8")])
assert EVD_DTYPE.itemsize == RECORD.size == 120


def evd_points(result: ScanResult, noisy: bool = False) -> F64:
    """(N, 3) float64 m points of ``result`` as EVD stores them: world coordinates, or
    sensor-frame coordinates in BlenSor's axes (REP-103 ones turned back: x = -y_ros,
    y = z_ros, z = -x_ros, exact)."""
    p = result.points(noisy)
    if result.frame_of_reference == "sensor" and result.axes == "ros":
        p = np.stack([-p[:, 1], p[:, 2], -p[:, 0]], axis=1)
    return p


def evd_records(result: ScanResult) -> Records:
    """The N records of ``result``'s EVD block: (N,) structured array, dtype
    :data:`EVD_DTYPE` (its bytes are the block after the int32 count); points in
    BlenSor's axes (:func:`evd_points`)."""
    rec = np.empty(len(result), dtype=EVD_DTYPE)
    rec["timestamp"] = result.timestamp
    rec["yaw"] = result.azimuth
    rec["pitch"] = result.elevation
    rec["distance"] = result.range
    rec["distance_noisy"] = result.range_noisy
    for noisy, suffix in ((False, ""), (True, "_noisy")):
        p = evd_points(result, noisy)
        for i, a in enumerate("xyz"):
            rec[a + suffix] = p[:, i]
    for i, c in enumerate(("red", "green", "blue")):
        rec[c] = result.color[:, i]
    rec["object_id"] = result.object_id
    return rec


TERMINATOR = struct.pack("<i", -1)


class EvdWriter:
    """Appends blocks to ``<path>`` through a unique temporary file that is a complete,
    terminated EVD after every block: each block is written together with the -1
    terminator, and the next block overwrites that terminator. A write that fails
    (ENOSPC) is rolled back to the last whole block, so a full disk, a signal or a
    killed process never leaves a truncated block, and :meth:`close` has nothing left
    to write: it fsyncs and renames. Unbuffered: the bytes are in the file when
    :meth:`write` returns.

    Raises (constructor): FileExistsError/OSError if the temporary file cannot be
    created exclusively.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = StagedFile(path)
        self.path, self.tmp = self._file.path, self._file.tmp
        self._end = 0  # offset of the terminator = end of the last whole block
        self.blocks = 0
        try:
            self._file.put(0, TERMINATOR)
        except BaseException:
            self.discard()
            raise

    def write(self, result: ScanResult) -> None:
        """Append one block (a frame) and the terminator.

        Raises:
            OSError: the write failed; the file is rolled back to the blocks before.
        """
        rec = evd_records(result)
        try:
            self._file.put(self._end, struct.pack("<i", len(rec)), rec, TERMINATOR)
        except BaseException:
            self._rollback()
            raise
        self._end += 4 + rec.nbytes
        self.blocks += 1

    def _rollback(self) -> None:
        try:  # overwriting 4 allocated bytes needs no free space
            self._file.truncate(self._end + 4)
            self._file.put(self._end, TERMINATOR)
        except OSError:
            pass

    def close(self) -> None:
        """Fsync the (already terminated) file and rename it to its final name
        (idempotent).

        Raises:
            OSError: fsync or rename failed; the temporary file is left for inspection.
        """
        self._file.commit()

    def discard(self) -> None:
        """Close and delete the temporary file (idempotent)."""
        self._file.discard()

    def __enter__(self) -> EvdWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_evd(path: str | os.PathLike[str]) -> list[Records]:
    """Read an EVD file: list of structured arrays (dtype :data:`EVD_DTYPE`), one per block.

    Raises:
        ValueError: truncated file or missing terminator.
    """
    data = Path(path).read_bytes()
    blocks: list[Records] = []
    pos = 0
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


class EvdFormat(Writer):
    """One ``scan.evd`` for the whole run (:class:`EvdWriter`), clean and noisy points in
    one record as the original."""

    name = "evd"
    description = "the original BlenSor's binary format, one file for the run"
    files = "scan.evd"
    outputs = (r"scan\.evd",)
    multi_frame = True
    #: one block per scene frame, as the original wrote it
    needs = WriterNeeds(packets="frame")

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._w = EvdWriter(self.folder / "scan.evd")

    def append(self, result: ScanResult) -> None:
        self._w.write(result)

    def close(self, status: str) -> None:
        if self._w.blocks:
            try:
                self._w.close()
            except OSError:
                self._w.discard()
                raise
        else:  # nothing scanned: no empty EVD
            self._w.discard()

    def discard(self) -> None:
        self._w.discard()


WRITER = EvdFormat
