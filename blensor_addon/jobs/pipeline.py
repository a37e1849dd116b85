"""The range scan's pipeline: drives the scanner packet by packet and hands each result
to the writers on a background thread (:class:`WriterThread`), reusing an earlier run's
verified packets on ``resume``; :meth:`Pipeline.finish` closes the writers and the
manifest with the run's status and raises the typed failures of
:mod:`~blensor_addon.jobs.failures`.

The pipeline reads a scanner and its results through two protocols: a
:class:`PacketScanner` (``scan(packet) -> (PacketResult, PacketRecord)``,
``packet_hash(packet)``, ``lookahead`` and ``expect``), a :class:`PacketResult` (the
packet's numbers, the files a worker encoded already and the whole
:class:`~blensor_addon.core.result.ScanResult` where there is one). One process's
:class:`~blensor_addon.scene.scanner.Scanner` is used through :class:`LocalScanner`
(its results as :class:`WholeResult`); a cluster's
:class:`~blensor_addon.jobs.cluster.RemoteScanner` implements the protocol itself. The
writers are used through the :class:`~blensor_addon.io.formats.Writer` interface, the
trajectory and the manifest being writers too (:mod:`~blensor_addon.jobs.run_files`).
"""
from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..core.ndtypes import F64
from ..core.packets import Packet, PacketRecord
from ..core.result import ScanResult
from ..process.blas import single_blas_thread
from ..io.atomic import Staged, commit_files
from ..io.formats import Writer
from ..io.outdir import OutputFolder, file_record, verify_file
from .failures import RunFailed, RunInterrupted, writer_failure
from .plan import Plan
from .run_files import TRAJECTORY, Entry, ManifestWriter, PacketPose, TrajectoryWriter

if TYPE_CHECKING:
    from ..scene.scanner import Scanner

_T = TypeVar("_T")

#: a format's files of one packet: (name relative to the output folder, bytes)
Files = list[tuple[str, bytes]]
#: a format's files of one packet that a cluster's worker encoded: their bytes, or where the
#: worker wrote them into the shared output folder already (:class:`~blensor_addon.io.atomic.Staged`)
Encoded = list[tuple[str, "bytes | Staged"]]


class PacketResult(PacketPose, Protocol):
    """What the pipeline reads of one packet's scan.

    Attributes:
        frame, sensor_to_world: as :class:`~.run_files.PacketPose` (the trajectory's line).
        num_rays: rays cast. ``len()``: points (returns).
        encoded: format -> the packet's files a cluster's worker encoded already (their
            writers are not called here): their bytes, or the :class:`Staged` files the
            worker wrote into the output folder (renamed here); empty: none.
        file_checks: file name -> its record (:func:`~blensor_addon.io.outdir.file_record`)
            for the ``encoded`` files.
        whole: the :class:`ScanResult`, for the writers that encode or append it here;
            None: a worker's summary, every format's files being ``encoded``.
    """

    @property
    def num_rays(self) -> int: ...

    def __len__(self) -> int: ...

    @property
    def encoded(self) -> Mapping[str, Encoded]: ...

    @property
    def file_checks(self) -> Mapping[str, dict[str, Any]]: ...

    @property
    def whole(self) -> ScanResult | None: ...


class PacketScanner(Protocol):
    """What the pipeline uses of a scanner.

    Attributes:
        lookahead: packets to hand over ahead of the one scanned (:meth:`expect`); 0: none.
    """

    @property
    def lookahead(self) -> int: ...

    def expect(self, packets: Sequence[Packet]) -> None:
        """Take the next packets to scan ahead (earlier ones first)."""

    def scan(self, packet: Packet) -> tuple[PacketResult, PacketRecord]:
        """The packet's scan and its record."""

    def packet_hash(self, packet: Packet) -> str | None:
        """sha256 (hex) of the geometry the packet is cast in (resume compares it)."""


@dataclass(frozen=True)
class WholeResult:
    """A :class:`PacketResult` holding the whole :class:`ScanResult` (``whole``), with the
    files a cluster's worker encoded already (none in one process)."""

    whole: ScanResult
    encoded: Mapping[str, Encoded] = field(default_factory=dict)
    file_checks: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def frame(self) -> int:
        """The result's frame (the packet's index)."""
        return self.whole.frame

    @property
    def sensor_to_world(self) -> F64:
        """The result's (4, 4) float64 pose."""
        return self.whole.sensor_to_world

    @property
    def num_rays(self) -> int:
        """Rays cast."""
        return self.whole.num_rays

    def __len__(self) -> int:
        return len(self.whole)


class LocalScanner:
    """One process's :class:`~blensor_addon.scene.scanner.Scanner` as a
    :class:`PacketScanner`: no look-ahead, every result whole (:class:`WholeResult`)."""

    lookahead = 0

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner

    def expect(self, packets: Sequence[Packet]) -> None:
        """Nothing is scanned ahead in one process."""

    def scan(self, packet: Packet) -> tuple[PacketResult, PacketRecord]:
        """:meth:`Scanner.scan <blensor_addon.scene.scanner.Scanner.scan>`, its result wrapped."""
        result, record = self.scanner.scan(packet)
        return WholeResult(result), record

    def packet_hash(self, packet: Packet) -> str | None:
        """:meth:`Scanner.packet_hash <blensor_addon.scene.scanner.Scanner.packet_hash>`."""
        return self.scanner.packet_hash(packet)


class WriterThread:
    """Runs a range scan's writing on one background thread, in order, while the main
    thread scans the next frame: encoding every format, staging, fsyncing and renaming
    the frame's files, the multi-frame files and the manifest. File writes and fsync
    release the GIL, and so does the ray cast, so the disk work of frame k overlaps the
    scan of frame k + 1 (a run writing every format to this VM's disk: see
    ``benchmarks/writers.py``). The writers run on this one thread only, one frame after
    the other, so they see exactly the calls of a serial run and write the same bytes.

    At most ``depth`` frames wait while another is written (:meth:`submit` blocks; 1 for
    one run, one per sensor for a rig's shared thread, whose sensors' packets differ in
    size), so memory stays at a few frames' results. After a job fails, later jobs are
    dropped and the error is raised by the next :meth:`submit` or by :meth:`drain`.
    """

    def __init__(self, depth: int = 1) -> None:
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max(1, int(depth)))
        self.error: BaseException | None = None
        self.raised = False  # the error was raised to the caller already
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="blensor-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while True:
                try:  # polled: a put interrupted (KeyboardInterrupt) before its notify wakes no one
                    job = self._q.get(timeout=0.05)
                except queue.Empty:
                    continue
                if job is None:
                    return
                if self.error is None:
                    try:
                        job()
                    except BaseException as exc:  # kept for the main thread, which raises it
                        self.error = exc
        finally:
            self._ended.set()

    def check(self) -> None:
        """Raise the error of a failed job (once)."""
        if self.error is not None and not self.raised:
            self.raised = True
            raise self.error

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job()`` behind the frames before it; blocks while one is waiting.

        Raises:
            the error of an earlier job, if one failed (``job`` is not queued).
        """
        self.check()
        self._q.put(job)

    def drain(self) -> BaseException | None:
        """Wait until every queued job ran (or was dropped after an error) and the thread
        ended. A SIGINT (KeyboardInterrupt) meanwhile does not stop the wait: a frame
        being written is finished whole; the interrupt is raised afterwards. (The end is
        an Event set by the thread itself: Python 3.11's ``Thread.join`` interrupted by
        KeyboardInterrupt can report a running thread as ended.) Returns the error of a
        failed job not raised yet."""
        interrupted: KeyboardInterrupt | None = None
        stopping = False
        while not self._ended.is_set():
            try:
                if not stopping:
                    self._q.put(None)  # a second None after an interrupted put is harmless
                    stopping = True
                self._ended.wait(0.1)
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted
        return None if self.raised else self.error


class Pipeline:
    """Scans the packets of a :class:`~blensor_addon.jobs.plan.Plan` one :meth:`step` at
    a time and writes them (see the module docstring).

    Args:
        scanner: the :class:`PacketScanner`.
        plan: the packets. folder: the run's :class:`OutputFolder`, locked and prepared.
        writers: the formats' writers, constructed. trajectory, manifest: the run's
        :class:`TrajectoryWriter` and :class:`ManifestWriter`.
        reuse: packet index -> an earlier run's manifest entry (``resume``), verified
            against the files before it is trusted.
        objects: function () -> the scanner's object table now (main thread), a list
            of dicts.
        writing: a :class:`WriterThread` shared with other pipelines (a rig's members:
            one thread writes every member's packets in the order they were
            scanned, so the rig's one bag has the same bytes in every run), drained by its
            owner before :meth:`finish`; None: the pipeline makes its own.
    Attributes:
        reused: packets taken over from the earlier run. dropped: formats whose
        multi-frame file could not be closed (removed).
    """

    def __init__(self, scanner: PacketScanner, plan: Plan, folder: OutputFolder, writers: Sequence[Writer],
                 trajectory: TrajectoryWriter, manifest: ManifestWriter, reuse: Mapping[int, Entry],
                 objects: Callable[[], Sequence[dict[str, Any]]],
                 writing: WriterThread | None = None) -> None:
        self.scanner, self.plan, self.folder = scanner, plan, folder
        self.writers = list(writers)
        self.trajectory, self.manifest = trajectory, manifest
        self._reuse = reuse
        self._objects = objects
        self._threaded = all(w.threaded for w in self.writers) or writing is not None
        self._writing: WriterThread | None = writing
        self._next = 0
        self.reused = 0
        self._checked: dict[int, Entry | None] = {}  # packet index -> the reuse decision (made once)
        self._ahead: collections.deque[int] = collections.deque()  # plan positions handed over ahead
        self._cursor = 0  # the next plan position to consider for that

    @property
    def done(self) -> list[Entry]:
        """Manifest entries of the finished packets (files on disk), in order."""
        return self.manifest.done

    @property
    def remaining(self) -> int:
        """Packets not scanned yet (``done`` trails the packets scanned by at most two
        until :meth:`finish`)."""
        return len(self.plan.packets) - self._next

    @property
    def scanned(self) -> int:
        """Packets scanned (or reused) so far; their files may still be being written."""
        return self._next

    def _try_reuse(self, packet: Packet) -> Entry | None:
        """The earlier run's entry for ``packet`` if every file it lists is on disk with
        the size and sha256 its manifest recorded, and the packet's geometry hash is
        unchanged (a run with a multi-frame file such as EVD rescans: the file needs
        every packet). An entry without recorded hashes is never trusted."""
        if packet.index in self._checked:
            return self._checked[packet.index]
        self._checked[packet.index] = entry = self._check_reuse(packet)
        return entry

    def _check_reuse(self, packet: Packet) -> Entry | None:
        old = self._reuse.get(packet.index)
        if old is None or any(w.multi_frame for w in self.writers):
            return None
        checks = old.get("file_checks")
        if not isinstance(checks, dict) or set(checks) != set(old.get("files", ())):
            return None
        if not all(verify_file(self.folder.path / n, checks[n]) for n in old["files"]):
            return None
        if self.scanner.packet_hash(packet) != old.get("geometry_hash"):
            return None
        return old

    def step(self) -> Entry:
        """Scan the next packet and hand it to the writer thread, which writes its files,
        the multi-frame files and the manifest while the next packet is scanned; returns
        the packet's manifest entry (its ``files`` are set once they are written).

        Raises:
            OSError: an earlier packet's files could not be written (its files are
            removed, the EVD rolled back to the packets before; later packets are not
            written). What the scanner raises (SettingsError on bad input).
        """
        if self._writing is None and self._threaded:
            self._writing = WriterThread()
        if self._writing is not None:
            self._writing.check()
        packet = self.plan.packets[self._next]
        ahead = self.scanner.lookahead
        if ahead:  # a cluster's scanner (jobs/cluster.py): the next packets to scan, submitted ahead
            self.scanner.expect(self._upcoming(ahead))
        entry = self._try_reuse(packet)
        result: PacketResult | None = None
        if entry is not None:
            self.reused += 1
        else:
            result, record = self.scanner.scan(packet)
            entry = {"frame": packet.index, "points": len(result), "rays": result.num_rays,
                     "pose": [float(v) for v in np.asarray(record.pose, dtype=np.float64).ravel()],
                     "files": [], "geometry_hash": record.geometry_hash}
            if packet.kind == "sweep":
                entry["time"] = record.time  # the sweep's start (s)
            if record.pose_end is not None:
                entry["pose_end"] = [float(v) for v in np.asarray(record.pose_end).ravel()]
        objects = list(self._objects())  # as the main thread sees it now
        self._next += 1
        if self._writing is None:  # a writer that must stay on this thread (see Writer.threaded)
            self._write_frame(entry, result, objects)
        else:
            done, kept = entry, result
            self._writing.submit(lambda: self._write_frame(done, kept, objects))
        return entry

    def _upcoming(self, n: int) -> list[Packet]:
        """The packets to hand to the scanner ahead so that ``n`` not reused from the
        current one on are handed over (each plan position is looked at once)."""
        ahead, packets = self._ahead, self.plan.packets
        while ahead and ahead[0] < self._next:
            ahead.popleft()
        self._cursor = max(self._cursor, self._next)
        out: list[Packet] = []
        while len(ahead) < n and self._cursor < len(packets):
            packet = packets[self._cursor]
            if self._try_reuse(packet) is None:
                ahead.append(self._cursor)
                out.append(packet)
            self._cursor += 1
        return out

    def _write_frame(self, entry: Entry, result: PacketResult | None, objects: list[dict[str, Any]]) -> None:
        """On the writer thread: the packet's files (all or none), then the manifest. A
        cluster's worker may have encoded some formats' files already (``result.encoded``:
        format -> files, ``result.file_checks``: their records); a worker's summary
        (``result.whole`` None) has every format's."""
        with single_blas_thread():
            if result is not None:
                encoded, whole = result.encoded, result.whole
                files: Encoded = [item for w in self.writers
                                  for item in (encoded[w.name] if w.name in encoded
                                               else self._call(w, w.frame_files, _whole(whole, w.name)))]
                known = result.file_checks
                checks = {name: known.get(name) or _record(data) for name, data in files}
                files += self.trajectory.frame_files(result)

                def append() -> None:  # multi-frame files (EVD): the packet, once its files are staged
                    if whole is not None:  # (a summary's formats are all per-frame: nothing to append)
                        for w in self.writers:
                            self._call(w, w.append, whole)
                written = commit_files(self.folder.path, files, append)
                entry["files"] = [p.relative_to(self.folder.path).as_posix() for p in written
                                  if p.name != TRAJECTORY]
                entry["file_checks"] = {n: checks[n] for n in entry["files"]}
            self.trajectory.finished(entry, result is not None)
            self.manifest.finished(entry, objects)

    def _call(self, writer: Writer, method: Callable[..., _T], *args: Any) -> _T:
        """``method(*args)`` of ``writer``; an error of the writer's library (sqlite3's
        'database or disk is full', ...) is raised as the OSError of a write failure
        (:func:`~.failures.writer_failure`), so the run ends as on any full disk.

        Raises:
            OSError: the write failed. Anything else the writer raised (not a write
                failure: a programming error) as it is.
        """
        try:
            return method(*args)
        except Exception as exc:
            failure = writer_failure(exc, writer.name, self.folder.path)
            if failure is None or failure is exc:
                raise
            raise failure from exc

    def finish(self, status: str, error: BaseException | None = None,
               stopped: Callable[[], bool] | None = None) -> None:
        """Wait for every packet handed over, close the writers' multi-frame files,
        the trajectory and the manifest with ``status``.

        Args:
            error: what stopped the run, if anything (the caller re-raises it unless this
                raises a typed failure instead).
            stopped: function () -> True if a signal asked the run to stop; asked once the
                packets handed over are written: a ``complete`` run ends ``cancelled`` then
                (the signal came while its last packets were written).
        Raises:
            RunFailed: writing failed (on the writer thread, when closing a multi-frame
                file, or ``error`` is an OSError): the manifest says ``failed`` where it
                could be written.
            RunInterrupted: ``error`` is a KeyboardInterrupt, or one came while the last
                packets were written (which are finished first).
        """
        interrupt = error if isinstance(error, KeyboardInterrupt) else None
        failure = error if isinstance(error, OSError) and not isinstance(error, RunFailed) else None
        other: BaseException | None = None
        if self._writing is not None:  # every packet handed over is written (or dropped after an error)
            writing, self._writing = self._writing, None
            try:
                late = writing.drain()
            except KeyboardInterrupt as exc:  # the packets are written: finish the files first
                interrupt = interrupt or exc
                late = None if writing.raised else writing.error
            if isinstance(late, OSError):
                failure = failure or late
            elif late is not None:
                other = late
        if status == "complete" and stopped is not None and stopped():
            status = "cancelled"
        if failure is not None or other is not None:
            status = "failed"
        writers, self.writers = self.writers, []
        dropped: list[str] = []
        for w in writers:
            if not self.done:  # nothing scanned: leave no empty multi-frame file
                self._call(w, w.discard)
                continue
            try:
                self._call(w, w.close, status)
            except OSError as exc:  # (a bag cannot be finished on a full disk)
                status = "failed"
                try:
                    self._call(w, w.discard)
                except OSError:  # (it is listed as dropped either way)
                    pass
                dropped.append(w.name)
                failure = failure or exc
        self.manifest.dropped = dropped
        try:
            self.trajectory.close(status)
        except OSError as exc:
            status, failure = "failed", failure or exc
        manifest_status = "failed"
        try:
            self.manifest.close(status)
        except OSError as exc:
            if failure is None and other is None:
                failure = exc
            manifest_status = "stale"
        if failure is not None:
            raise RunFailed(failure, finished_frames=len(self.done),
                            manifest_path=self.folder.path / self.folder.manifest_name,
                            manifest_status=manifest_status, dropped_formats=dropped) from failure
        if other is not None:
            raise other
        if interrupt is not None:
            raise RunInterrupted(len(self.done), self.folder.path / self.folder.manifest_name) from interrupt

    def abandon(self) -> None:
        """Stop without finishing (set-up failed, or after :meth:`finish`): drain the
        writer thread, discard unfinished multi-frame files (idempotent)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            try:
                writing.drain()
            except KeyboardInterrupt:
                pass
        writers, self.writers = self.writers, []
        for w in writers:
            try:
                self._call(w, w.discard)
            except OSError:  # clean-up after an end already reported: the rest is still discarded
                pass


def _record(data: bytes | Staged) -> dict[str, Any]:
    """:func:`~blensor_addon.io.outdir.file_record` of bytes encoded here.

    Raises:
        RuntimeError: a staged file without the worker's record (a programming error:
        the cluster's task records every file it writes)."""
    if isinstance(data, Staged):
        raise RuntimeError(f"a worker's staged file {data.path} without its record")
    return file_record(data)


def _whole(result: ScanResult | None, fmt: str) -> ScanResult:
    """The whole result a writer of ``fmt`` encodes here.

    Raises:
        RuntimeError: a worker's summary without ``fmt``'s files (a programming error:
        the cluster's task encodes every per-frame format when it sends no result)."""
    if result is None:
        raise RuntimeError(f"a worker's summary without the {fmt} files")
    return result


__all__ = ["Pipeline", "WriterThread", "PacketPose", "PacketResult", "PacketScanner", "WholeResult",
           "LocalScanner"]
