"""The two files every range scan writes beside its formats' files, as ordinary writers
(the :class:`~blensor_addon.io.formats.Writer` interface, plus :meth:`finished`, called
once a packet's files are on disk or an earlier run's packet is reused):

- :class:`TrajectoryWriter`: ``trajectory.tum``, the sensor's pose per finished packet
  (TUM RGB-D layout ``t tx ty tz qx qy qz qw``; t = the packet's start, s; the pose as
  scanned: world position and orientation of the sensor frame in the run's axes),
  rewritten with each packet's files (so it appears together with them).
- :class:`ManifestWriter`: ``manifest.json`` (settings, seed, formats and options,
  packets with the sensor pose, files, sizes and sha256 of each, versions, .blend path,
  geometry hashes, status), written when the run starts (status ``running``), on the
  output folder's schedule (:meth:`~blensor_addon.io.outdir.OutputFolder.manifest_due`)
  and at the end with the run's status.

Both run on the pipeline's writer thread and never touch bpy.
"""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from ..io import trajectory
from ..io.atomic import atomic_write_bytes
from ..io.formats import Writer, output_patterns
from ..io.outdir import LOCK_NAME, ManifestText, OutputFolder, files_matching
from ..core.ndtypes import F64
from . import signals

TRAJECTORY = "trajectory.tum"
MANIFEST = "manifest.json"

#: a finished packet's entry in the manifest (JSON-ready: "frame", "pose", "points", "files", ...)
Entry = dict[str, Any]


class PacketPose(Protocol):
    """What the trajectory reads of a packet's scan: a :class:`~blensor_addon.core.result.ScanResult`
    or a cluster worker's summary (:class:`~blensor_addon.jobs.pipeline.PacketResult`).

    Attributes:
        frame: the packet's index. sensor_to_world: (4, 4) float64 pose at its start.
    """

    @property
    def frame(self) -> int: ...

    @property
    def sensor_to_world(self) -> F64: ...


class TrajectoryWriter(Writer):
    """``trajectory.tum`` (see the module docstring). ``packet_time``: s per packet (the
    frame time or the sweep period): a packet's time is ``index * packet_time``."""

    name = "trajectory"
    description = "the sensor's pose per finished packet (TUM RGB-D)"
    files = TRAJECTORY
    outputs = (r"trajectory\.tum",)

    def __init__(self, folder: Path, packet_time: float) -> None:
        super().__init__(folder)
        self.packet_time = packet_time
        self._lines: dict[int, str] = {}  # packet index -> line of a finished packet (each pose encoded once)
        self._dirty = False  # finished packets (reused ones) not in the file on disk yet

    def _line(self, index: int, pose: ArrayLike) -> str:
        return trajectory.tum_line(index * self.packet_time, np.reshape(np.asarray(pose, np.float64), (4, 4)))

    def _bytes(self, extra: dict[int, str] | None = None) -> bytes:
        lines = {**self._lines, **(extra or {})}
        return "".join(lines[k] for k in sorted(lines)).encode()

    def frame_files(self, result: PacketPose) -> list[tuple[str, bytes]]:
        """The whole file with this packet's pose added (it appears with the packet's files):
        ``result`` a ScanResult or a cluster worker's summary (its frame and pose)."""
        self._dirty = False
        return [(TRAJECTORY, self._bytes({result.frame: self._line(result.frame, result.sensor_to_world)}))]

    def finished(self, entry: Entry, written: bool) -> None:
        """Keep the pose of a finished packet (``written``: its files were written in this
        run; else it was reused from an earlier one)."""
        if "pose" in entry:
            self._lines[entry["frame"]] = self._line(entry["frame"], entry["pose"])
            self._dirty = self._dirty or not written

    def close(self, status: str) -> None:
        """Rewrite the file if packets were reused after the last one written (a resumed
        run whose last packets were all reused keeps no stale lines)."""
        if self._dirty and self._lines:
            atomic_write_bytes(self.folder / TRAJECTORY, self._bytes())
            self._dirty = False


class ManifestWriter(Writer):
    """``manifest.json`` (see the module docstring).

    Args:
        folder: the run's :class:`~blensor_addon.io.outdir.OutputFolder` (its schedule).
        static: the manifest's fields that stay the same during the run (read from
            Blender on the main thread once).
        objects: function () -> the object table as it is now (called on the main thread:
            :meth:`snapshot_objects`).
    Attributes:
        done: list of the finished packets' entries, in order. status: the run's status.
        dropped: formats whose multi-frame file could not be closed.
    """

    name = "manifest"
    description = "the run's settings, packets, files and status"
    files = MANIFEST
    outputs = (r"manifest\.json",)

    def __init__(self, folder: OutputFolder, static: dict[str, Any],
                 objects: Callable[[], Iterable[dict[str, Any]]]) -> None:
        super().__init__(folder.path)
        self.out = folder
        self.static = static
        self._objects = objects
        self.objects = list(objects())
        self.done: list[Entry] = []
        self.points = 0
        self.status = "running"
        self.dropped: list[str] = []
        self._lock = threading.Lock()
        self._hash = hashlib.sha256()  # of the finished entries' geometry hashes, in order
        self._text = ManifestText()  # each finished entry encoded once

    def doc(self) -> dict[str, Any]:
        """The manifest's content so far (JSON-ready dict)."""
        out = {**self.static, "frames": self.done, "geometry_hash": self._hash.hexdigest(),
               "objects": self.objects, "status": self.status}
        if self.dropped:  # a failed run's multi-frame files that could not be closed
            out["dropped_formats"] = list(self.dropped)
        return out

    def start(self) -> None:
        """The first manifest (status ``running``), before any packet."""
        self.out.write_manifest(self._text.encode(self.doc()), 0)
        self._if_stuck()

    def _if_stuck(self) -> None:
        """Tell the signal watchdog (:func:`~.signals.stop_actions`) what a stuck end
        leaves: before the first packet of a run that resumes nothing, nothing (the
        manifest, the lock and a folder the run made are removed), else this manifest with
        status ``cancelled`` (the packets it lists, as after SIGKILL) and no lock."""
        if not signals.watchdog_armed():
            return
        lock, manifest = self.out.path / LOCK_NAME, self.out.path / MANIFEST
        grace = f"Blender did not return within {signals.WATCHDOG_GRACE:g} s"
        if not self.done and self.out.earlier is None:  # (a resumed run keeps its manifest)
            actions = [(signals.REMOVE, manifest, None), (signals.REMOVE, lock, None)]
            if self.out.created:
                actions.append((signals.REMOVE_EMPTY_FOLDER, self.out.path, None))
            signals.stop_actions(f"; nothing written ({grace})", actions)
            return
        data = self._text.encode({**self.doc(), "status": "cancelled"})
        signals.stop_actions(f" after {len(self.done)} finished packets ({grace}); the packets listed in "
                             f"{manifest} are kept (manifest: cancelled)",
                             [(signals.WRITE, manifest, data), (signals.REMOVE, lock, None)])

    def finished(self, entry: Entry, objects: list[dict[str, Any]] | None = None) -> None:
        """A packet is finished: list it; rewrite the manifest if the schedule says so."""
        self.done.append(entry)
        self._text.add(entry)
        self._hash.update(str(entry["geometry_hash"]).encode())
        self.points += entry["points"]
        if objects is not None:
            self.objects = objects
        if self.out.manifest_due(len(self.done)):
            self.out.write_manifest(self._text.encode(self.doc()), len(self.done))
            self._if_stuck()

    def close(self, status: str) -> None:
        """The final manifest with ``status`` and the run-level files (``files``: every
        file of the run's formats that no packet lists, such as ``scan.evd``).

        Raises:
            OSError: it could not be written (the last one stays).
        """
        self.status = status
        listed = {n for e in self.done for n in e.get("files", ())}
        formats = self.static.get("formats", [])
        run = [p.relative_to(self.out.path).as_posix()
               for p in files_matching(self.out.path, output_patterns(formats))]
        self.static = {**self.static, "files": sorted(n for n in run if n not in listed and n != MANIFEST)}
        self.out.write_manifest(self._text.encode(self.doc()), len(self.done), final=True)
        signals.stop_actions("; the run had ended", [])  # its final manifest is written


__all__ = ["TrajectoryWriter", "ManifestWriter", "TRAJECTORY", "MANIFEST"]
