"""Range scans: scan a list of frames of one camera into files.

The runner drives Blender and the scanner; the files come from the writers of the
format registry (:mod:`blensor_addon.io.formats`: npz, EVD, PCD, ...), each with its own
file names. Beside them, ``manifest.json`` (settings, seed, formats and options, frames with
the sensor pose of each, versions, .blend path, geometry hashes, status) and
``trajectory.tum`` (the sensor's poses, TUM layout). Every file appears only complete
(temporary name + rename); a cancelled or failed scan keeps every finished frame,
finished multi-frame files (a terminated ``scan.evd``) and a manifest whose ``status``
says what happened.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import threading
from time import monotonic
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from .. import __version__
from ..core.blas import single_blas_thread
from ..core.errors import OutputError, SettingsError
from ..io import trajectory
from ..io.atomic import atomic_write_bytes, commit_files, remove_quietly
from ..io.formats import WRITERS, RunInfo, make_options, parse_formats
from ..io.outdir import FolderLock, prepare, previous_outputs
from ..scene.scanner import Scanner, frame_time
from .signals import Signals


def tum_bytes(entries: list[dict], frame_time: float, lines: dict | None = None) -> bytes:
    """``trajectory.tum``: the sensor's pose per finished frame, TUM RGB-D layout
    ``t tx ty tz qx qy qz qw`` (t = frame x frame time, s; the pose as scanned: world
    position and orientation of the sensor frame in the run's axes). ``lines``: a cache
    frame -> TUM line kept across the calls of one run (whose frame time is fixed), so
    a run rewriting the file after each frame encodes each pose once (6,000 frames
    otherwise cost 210 s of re-encoding)."""
    lines = {} if lines is None else lines
    rows = []
    for e in sorted(entries, key=lambda e: e["frame"]):
        if "pose" in e:
            if e["frame"] not in lines:
                lines[e["frame"]] = trajectory.tum_line(e["frame"] * frame_time, np.reshape(e["pose"], (4, 4)))
            rows.append(lines[e["frame"]])
    return "".join(rows).encode()


def check_frames(scene, frames) -> list[int]:
    """Validate frame numbers against the scene's range.

    Raises:
        SettingsError (``frames``): empty, not integers, a frame twice, or outside
            frame_start..frame_end.
    """
    lo, hi = scene.frame_start, scene.frame_end
    allowed = f"integers within the scene's frame range {lo}-{hi}"
    if isinstance(frames, range) and frames:  # the ends first (O(1), any size) before building a list
        a, b = sorted((frames[0], frames[-1]))
        if a < lo or b > hi:
            raise SettingsError("frames", allowed, f"{a}-{b}")
    try:
        frames = list(frames)
    except TypeError:
        raise SettingsError("frames", allowed, frames) from None
    if not frames or not all(isinstance(f, (int, np.integer)) and not isinstance(f, bool) for f in frames):
        raise SettingsError("frames", allowed, frames)
    if min(frames) < lo or max(frames) > hi:
        raise SettingsError("frames", allowed, f"{min(frames)}-{max(frames)}")
    frames = [int(f) for f in frames]
    seen: set = set()
    for f in frames:  # a frame twice would give two manifest entries for one file
        if f in seen:
            raise SettingsError("frames", "distinct " + allowed, f"frame {f} more than once")
        seen.add(f)
    return frames


def check_time_interval(scene, interval) -> tuple[float, float]:
    """Validate a time interval ``(t0, t1)`` in seconds against the scene's frames
    (frame ``f`` spans ``[f, f + 1) * frame_time``).

    Raises:
        SettingsError (``time``): not two finite numbers t0 < t1 within the scene's frames.
    """
    ft = frame_time(scene)
    lo, hi = scene.frame_start * ft, (scene.frame_end + 1) * ft
    allowed = f"an interval t0-t1 (s) with t0 < t1 within the scene's frames, {lo:.6g}-{hi:.6g} s"
    try:
        t0, t1 = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise SettingsError("time", allowed, interval) from None
    if not (np.isfinite(t0) and np.isfinite(t1) and t0 < t1) or t0 < lo - 1e-9 or t1 > hi + 1e-9:
        raise SettingsError("time", allowed, f"{t0:g}-{t1:g}")
    return t0, t1


def sweeps_in(t0: float, t1: float, period: float, what: str, unit: str = "sweep",
              shown: str | None = None) -> range:
    """Indices k of the packets (sweeps, or scene frames with ``unit="frame"``)
    ``[k P, (k + 1) P)`` that start within ``[t0, t1)``: a packet is scanned whole, so
    the last one may end after ``t1`` (the scene is evaluated there too). Sweeps and
    frames follow the same rule.

    Raises:
        SettingsError (``what``): no packet starts in the interval (the value shown is
            ``shown``, else the interval in seconds).
    """
    eps = 1e-9 * max(1.0, abs(t1) / period)
    k0 = int(np.ceil(t0 / period - eps))
    k1 = int(np.ceil(t1 / period - eps))  # sweeps k0 .. k1 - 1 start before t1
    if k1 <= k0:
        raise SettingsError(what, f"an interval in which a {unit} starts (one every {period:.6g} s)",
                            shown or f"{t0:.6g}-{t1:.6g} s")
    return range(k0, k1)


def output_path(out_dir) -> Path:
    """``out_dir`` as a path (``//``: relative to the .blend, as Blender's paths).

    Raises:
        SettingsError (``out``): not a str or path, or empty (it would be the current
            folder without a word).
    """
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir).strip():
        raise SettingsError("out", "a folder path", out_dir)
    return Path(bpy.path.abspath(str(out_dir))) if str(out_dir).startswith("//") else Path(out_dir)


def check_output_dir(out_dir) -> Path:
    """Create ``out_dir`` if needed and check it is a writable folder.

    Raises:
        SettingsError (``out``): not creatable, not a folder, or not writable.
    """
    p = output_path(out_dir)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError("out", "a writable folder", f"{out_dir} ({exc.strerror})") from None
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        raise SettingsError("out", "a writable folder", str(out_dir))
    return p


class WriterThread:
    """Runs a range scan's writing on one background thread, in order, while the main
    thread scans the next frame: encoding every format, staging, fsyncing and renaming
    the frame's files, the multi-frame files and the manifest. File writes and fsync
    release the GIL, and so does the ray cast, so the disk work of frame k overlaps the
    scan of frame k + 1 (a run writing every format to this VM's disk: see
    ``benchmarks/writers.py``). The writers run on this one thread only, one frame after
    the other, so they see exactly the calls of a serial run and write the same bytes.

    At most one frame waits while another is written (:meth:`submit` blocks), so memory
    stays at a few frames' results. After a job fails, later jobs are dropped and the
    error is raised by the next :meth:`submit` or by :meth:`drain`.
    """

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=1)
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

    def submit(self, job) -> None:
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
        interrupted, stopping = None, False
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


#: manifest keys that must match for ``resume`` to reuse an earlier run's frames
RESUME_KEYS = ("camera", "sensor_type", "sensor", "seed", "backend", "frame_of_reference", "axes", "formats",
               "options", "packets")


@dataclass
class RangeScanJob:
    """A range scan advanced one frame at a time (the UI's modal operator steps it; the
    CLI and :func:`scan_range` loop over it).

    The folder is locked for the run (:class:`~blensor_addon.io.outdir.FolderLock`);
    ``manifest.json`` is written when the job starts (status ``running``), after the
    frames (every frame at first, then O(log n) times plus once every 5 s at most:
    :meth:`_manifest_due`) and at the end, so even a killed run (SIGKILL) leaves a
    manifest listing finished frames, which ``resume`` reuses. A frame's files appear
    together after all of them were written, or not at all. Frames are written on a
    :class:`WriterThread` while the next is scanned (on the main thread if a writer is
    not :attr:`Writer.threaded`).

    Args:
        camera_object, frames, out_dir, formats, seed, backend, frame_of_reference,
        pcd_ascii, overwrite, resume, overrides, options: see :func:`scan_range`.
    Raises (on construction; nothing is written on bad input):
        SettingsError: bad camera, setting, frames, formats or output folder, a folder
        in use by another run, or holding another run's files.
    """

    camera_object: object
    frames: list
    out_dir: object
    formats: tuple = ("npz",)
    seed: int | None = None
    backend: str = "auto"
    frame_of_reference: str = "sensor"
    pcd_ascii: bool = False
    overwrite: bool = False
    resume: bool = False
    overrides: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    axes: str = "blensor"
    time: tuple | None = None
    done: list = field(default_factory=list)
    status: str = "running"

    def __post_init__(self) -> None:
        self.formats = parse_formats(self.formats)
        for name in ("pcd_ascii", "overwrite", "resume"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(name, "True or False", getattr(self, name))
        if self.overwrite and self.resume:
            raise SettingsError("overwrite", "False with resume=True (overwrite deletes what resume keeps)",
                                True)
        if not isinstance(self.options, (dict, type(None))):
            raise SettingsError("options", "a dict of format options, e.g. {'pcd.ascii': True}", self.options)
        opts = dict(self.options or {})
        if self.pcd_ascii and "pcd" in self.formats:
            if "pcd.ascii" in opts:
                raise SettingsError("pcd_ascii", "not given with the option pcd.ascii (one or the other)",
                                    f"pcd_ascii and pcd.ascii={opts['pcd.ascii']}")
            opts["pcd.ascii"] = True
        self._options = make_options(self.formats, opts)
        self.scene = bpy.context.scene
        ft = frame_time(self.scene)
        if self.time is not None:
            interval = check_time_interval(self.scene, self.time)
            self._requested = {"time": list(interval)}
        else:
            frames = check_frames(self.scene, self.frames)
            interval = (frames[0] * ft, (frames[-1] + 1) * ft)
            contiguous = frames == list(range(frames[0], frames[-1] + 1))
            self._requested = [frames[0], frames[-1]] if contiguous else list(frames)
        self.scanner = Scanner(self.camera_object, backend=self.backend, seed=self.seed,
                               frame_of_reference=self.frame_of_reference, overrides=self.overrides,
                               axes=self.axes, packet_hashes=True)
        self._lock = None
        self._created = False  # this run made the output folder
        self.writers = []
        self._writing = None  # WriterThread, started with the first frame
        self._threaded = False  # every writer may run on the writer thread
        self._static = None  # the manifest's fields that stay the same during the run
        self._manifest_at, self._manifest_time = 0, 0.0  # frames listed at its last write, and when
        self._next = 0  # frames scanned (or reused) and handed to the writer thread
        self._tum_lines: dict = {}  # frame -> trajectory.tum line (see tum_bytes)
        self.dropped: list = []  # formats whose multi-frame file could not be closed (removed)
        self._old_frame = self.scene.frame_current
        try:
            #: "sweep": one output per full sweep; "frame": one per scene frame
            self.packets = self.scanner.packets(self.formats)
            self.packet_time = ft
            if self.packets == "sweep":
                if self.time is None and not contiguous:
                    raise SettingsError("frames", "a contiguous range A-B with packets=sweep", self._requested)
                self.packet_time = self.scanner.sweep_period
                shown = None if self.time is not None else \
                    f"frames {frames[0]}-{frames[-1]} ({interval[0]:.6g}-{interval[1]:.6g} s)"
                what = "time" if self.time is not None else "frames"
                self.frames = sweeps_in(*interval, self.packet_time, what, shown=shown)
            elif self.time is not None:
                self.frames = list(sweeps_in(*interval, ft, "time", "frame"))
            else:
                self.frames = frames
            for f in self.formats:
                if WRITERS[f].needs_image and not self.scanner.sensor.organized:
                    raise SettingsError("formats", f"formats for image sensors ({f} needs a tof, kinect or depth "
                                        "sensor)", f"{f} with sensor type {self.scanner.sensor_type}")
            self.scanner.check_budget(self.frames[0], "range", self.packet_time)
            if self.scanner.timed:  # refuse a NaN/inf transform before anything is written
                first = self.frames[0] * self.packet_time
                last = (self.frames[-1] + 1) * self.packet_time
                self.scanner.check_transforms(range(int(np.floor(first / ft + 1e-9)),
                                                    int(np.floor(last / ft + 1e-9)) + 2))
            self._created = not output_path(self.out_dir).exists()  # removed again if nothing is written
            self.out = check_output_dir(self.out_dir)
            self._lock = FolderLock(self.out)
            self._reuse = self._resumable() if self.resume else {}
            for f in self.formats:  # before prepare() deletes an earlier run's files
                WRITERS[f].check_folder(self.out)
            prepare(self.out, overwrite=self.overwrite, resume=self.resume)
            run = RunInfo(camera=self.camera_object.name, sensor_type=self.scanner.sensor_type,
                          sensor=self.scanner.settings.to_dict(), seed=int(self.scanner.settings.seed),
                          frame_time=self.packet_time, frames=self.frames)
            for f in self.formats:
                self.writers.append(WRITERS[f](self.out, self._options[f], run))
            self._threaded = all(w.threaded for w in self.writers)
            self.points = 0
            self.reused = 0
            self._write_manifest()
        except OSError as exc:  # setting up the folder failed: nothing of the run is left
            self._abandon_setup()
            if isinstance(exc, OutputError):
                raise
            raise OutputError(exc.errno, f"cannot set up the output ({exc.strerror})",
                              exc.filename or str(self.out_dir)) from exc
        except BaseException:
            self._abandon_setup()
            raise

    def _abandon_setup(self) -> None:
        """Undo a set-up that failed: writers discarded, the folder released, and the
        folder removed if this run made it and it is still empty."""
        self._release()
        self._remove_created_folder()

    def _remove_created_folder(self) -> None:
        """Remove the output folder if this run made it and it is empty (else keep it)."""
        out = getattr(self, "out", None)
        if self._created and out is not None:
            try:
                out.rmdir()  # only if empty
            except OSError:
                pass

    def _resumable(self) -> dict:
        """Entries of the earlier run's manifest by frame, if its settings match.

        Raises:
            SettingsError (``resume``): no readable manifest, or other settings.
        """
        path = self.out / "manifest.json"
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            if not previous_outputs(self.out):
                return {}  # nothing to resume: a fresh run
            raise SettingsError("resume", "a folder whose manifest.json is readable", str(path)) from None
        mine = self.manifest()
        for key in RESUME_KEYS:
            a, b = old.get(key), mine[key]
            if a != b:
                if isinstance(a, dict) and isinstance(b, dict):  # name the settings that differ
                    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    key = f"{key} ({', '.join(keys)})"
                    a, b = ({k: d.get(k) for k in keys} for d in (a, b))
                raise SettingsError("resume", f"a folder scanned with the same {key}",
                                    f"{a!r} in {path}, {b!r} now")
        return {e["frame"]: e for e in old.get("frames", [])}

    @property
    def remaining(self) -> int:
        """Frames not scanned yet (``done`` lists the frames whose files are written:
        it trails the frames scanned by at most two until :meth:`finish`)."""
        return len(self.frames) - self._next

    @property
    def scanned(self) -> int:
        """Frames scanned (or reused) so far; their files may still be being written."""
        return self._next

    def _frame_files(self, result) -> list[tuple[str, bytes]]:
        return [item for w in self.writers for item in w.frame_files(result)]

    def _try_reuse(self, f: int) -> dict | None:
        """The earlier run's entry for frame ``f`` if its files are all there and the
        frame's geometry hash is unchanged (runs with a multi-frame file such as EVD
        rescan: the file needs every frame)."""
        old = self._reuse.get(f)
        if old is None or any(w.multi_frame for w in self.writers):
            return None
        if not all((self.out / n).is_file() for n in old["files"]):
            return None
        if self.scanner.packet_hash(f, self.packets) != old["geometry_hash"]:
            return None
        return old

    def _scan(self, packet: int):
        if self.packets == "sweep":
            return self.scanner.scan_sweep(packet)
        return self.scanner.scan_frame(packet, "range")

    def step(self) -> dict:
        """Scan the next frame and hand it to the writer thread (:class:`WriterThread`),
        which writes its files, the multi-frame files and the manifest while the next
        frame is scanned; returns the frame's manifest entry (its ``files`` are set once
        they are written). :meth:`finish` waits for every frame handed over.

        Raises:
            OSError: an earlier frame's files could not be written (its files are
            removed, the EVD rolled back to the frames before; later frames are not
            written).
        """
        if self._writing is None and self._threaded:
            self._writing = WriterThread()
        if self._writing is not None:
            self._writing.check()
        f = self.frames[self._next]
        entry = self._try_reuse(f)
        result = None
        if entry is not None:
            self.reused += 1
        else:
            result = self._scan(f)
            pose = [float(v) for v in np.asarray(result.sensor_to_world, dtype=np.float64).ravel()]
            entry = {"frame": f, "points": len(result), "rays": result.num_rays, "pose": pose, "files": [],
                     "geometry_hash": self.scanner.last_packet_hash}
            if self.packets == "sweep":
                entry["time"] = f * self.packet_time  # the sweep's start (s)
            if result.sensor_to_world_end is not None:
                entry["pose_end"] = [float(v) for v in np.asarray(result.sensor_to_world_end).ravel()]
        objects = list(self.scanner.extractor.table.table)  # as the main thread sees it now
        self._next += 1
        if self._writing is None:  # a writer that must stay on this thread (see Writer.threaded)
            self._write_frame(entry, result, objects)
        else:
            self._writing.submit(lambda: self._write_frame(entry, result, objects))
        return entry

    def _write_frame(self, entry: dict, result, objects: list) -> None:
        """On the writer thread: the frame's files (all or none), then the manifest."""
        with single_blas_thread():
            if result is not None:
                files = self._frame_files(result)
                tum = tum_bytes([*self.done, entry], result.frame_time, self._tum_lines)
                files.append(("trajectory.tum", tum))
                # multi-frame files (EVD) take the frame after its files are staged, before they appear
                written = commit_files(self.out, files, lambda: [w.append(result) for w in self.writers])
                entry["files"] = [p.relative_to(self.out).as_posix() for p in written
                                  if p.name != "trajectory.tum"]
            self.done.append(entry)
            self.points += entry["points"]
            if self._manifest_due():
                self._write_manifest(objects)

    #: the manifest is rewritten once the frames since its last write reach this share of
    #: the frames done, or after MANIFEST_SECONDS (see :meth:`_manifest_due`)
    MANIFEST_SHARE = 16
    MANIFEST_SECONDS = 5.0

    def _manifest_due(self) -> bool:
        """Whether the manifest is rewritten after this frame: when the frames since its
        last write reach 1/:attr:`MANIFEST_SHARE` of those done (so after every frame
        while fewer than 32 are done), or :attr:`MANIFEST_SECONDS` have passed. The
        manifest lists every frame, so rewriting it after each one costs O(n^2) over a
        run: 6,000 sweeps would write 24 GB of JSON (190 ms a frame at the end); so it
        is rewritten O(log n) times (plus once every 5 s at most), and a killed run loses
        at most 1/16 of its frames to ``resume`` (rescanned to the same bytes). The final
        manifest is the same either way."""
        n = len(self.done)
        return (n - self._manifest_at >= max(1, n // self.MANIFEST_SHARE)
                or monotonic() - self._manifest_time >= self.MANIFEST_SECONDS)

    def _write_manifest(self, objects: list | None = None) -> Path:
        path = self.out / "manifest.json"
        atomic_write_bytes(path, (json.dumps(self.manifest(objects), indent=2, sort_keys=True) + "\n").encode())
        self._manifest_at, self._manifest_time = len(self.done), monotonic()
        return path

    def finish(self, status: str = "complete", bad_input: bool = False) -> Path | None:
        """Close the writers' multi-frame files (EVD), write ``manifest.json`` with
        ``status``, release the folder, restore the scene frame and free the ray caster.
        Safe to call once after any number of steps. Returns the manifest path.

        ``bad_input``: the run stopped on bad input found while scanning (a
        :class:`SettingsError`, such as an unknown class name on an object). If no frame
        was finished (and the run does not resume an earlier one), nothing of the run is
        left: no manifest (a failed one would make the corrected rerun refuse the
        folder), and the folder itself if the run made it and it is empty; returns None
        then.

        Raises:
            OSError: a multi-frame file or the manifest could not be written (status
            ``failed`` where the manifest could still be written).
        """
        self.status = status
        interrupt = None
        forget = False
        try:
            error = None
            if self._writing is not None:  # every frame handed over is written (or dropped after an error)
                try:
                    error = self._writing.drain()
                except KeyboardInterrupt as exc:  # the frames are written: finish the files first
                    interrupt = exc
                    error = None if self._writing.raised else self._writing.error
                self._writing = None
            if error is not None:
                self.status = "failed"
            writers, self.writers = self.writers, []
            for w in writers:
                if not self.done:  # nothing scanned: leave no empty multi-frame file
                    w.discard()
                    continue
                try:
                    w.close(self.status)
                except OSError as exc:  # (a bag cannot be finished on a full disk)
                    self.status = "failed"
                    w.discard()
                    self.dropped.append(w.name)
                    error = error or exc
            if error is not None:
                # what is kept, for the message: the CLI reads these off the error
                error.blensor_frames = len(self.done)
                error.blensor_dropped = list(self.dropped)
                try:
                    self._write_manifest()
                    error.blensor_manifest = "failed"
                except OSError:  # the disk is still full: the last manifest stays
                    error.blensor_manifest = "stale"
                raise error
            if bad_input and not self.done and not self.resume:  # (a resumed run keeps the earlier manifest)
                forget = True
                remove_quietly(self.out / "manifest.json")
                return None
            path = self._write_manifest()
            if interrupt is not None:
                raise interrupt
            return path
        finally:
            self._release()
            if forget:
                self._remove_created_folder()
            if self.scene.frame_current != self._old_frame or self.scene.frame_subframe:
                self.scene.frame_set(self._old_frame)

    def _release(self) -> None:
        if self._writing is not None:  # not finished (an error on the main thread): stop writing first
            writing, self._writing = self._writing, None
            try:
                writing.drain()
            except KeyboardInterrupt:
                pass
        writers, self.writers = self.writers, []
        for w in writers:
            w.discard()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.scanner.close()

    def manifest(self, objects: list | None = None) -> dict:
        """The ``manifest.json`` content so far (JSON-ready dict); ``objects``: the object
        table to list (default: the scanner's, as it is now). What does not change during
        the run is read from Blender once, on the main thread (the writer thread calls
        this too and never touches bpy)."""
        if self._static is None:
            self._static = {
                "blensor_version": __version__,
                "blender_version": bpy.app.version_string,
                "blend_file": bpy.data.filepath,
                "camera": self.camera_object.name,
                "sensor_type": self.scanner.sensor_type,
                "sensor": self.scanner.settings.to_dict(),
                "seed": int(self.scanner.settings.seed),
                "backend": self.scanner.backend.name,
                "frame_of_reference": self.frame_of_reference,
                "axes": self.axes,
                "formats": list(self.formats),
                "options": {f: dataclasses.asdict(o) for f, o in self._options.items()},
                "packets": self.packets,  # "sweep": one output per full sweep; "frame": per scene frame
                "packet_time": self.packet_time,  # s per packet: the sweep period or the frame time
                "time_model": self.scanner.settings.time_model,
                "frames_requested": self._requested,  # [first, last] of a contiguous range, or {"time": [t0, t1]}
            }
        h = hashlib.sha256()
        for e in self.done:
            h.update(e["geometry_hash"].encode())
        out = {**self._static, "frames": self.done, "geometry_hash": h.hexdigest(),
               "objects": self.scanner.extractor.table.table if objects is None else objects,
               "status": self.status}
        if self.dropped:  # a failed run's multi-frame files that could not be closed
            out["dropped_formats"] = list(self.dropped)
        return out


def scan_range(camera_object, frames, out_dir, formats=("npz",), seed: int | None = None, *,
               backend: str = "auto", frame_of_reference: str = "sensor", pcd_ascii: bool = False,
               overwrite: bool = False, resume: bool = False, progress=None,
               should_cancel=None, options: dict | None = None, axes: str = "blensor",
               time: tuple | None = None, **overrides) -> RangeScanJob:
    """Scan ``frames`` (or the time interval ``time``) of ``camera_object`` into ``out_dir``.

    One output ("packet") per scene frame, or per full sweep of a swept sensor (setting
    ``packets``; ``auto``: sweeps in continuous time unless EVD is written): sweep k
    holds the rays fired in ``[k P, (k + 1) P)`` s (P = 1 / rotation_speed), is numbered
    k and stamped with its start ``k P``; the sweeps scanned are those that lie within
    the frames' time span (or ``time``).

    Args:
        frames: iterable (or range) of scene frame numbers, within the scene's range
            (contiguous for sweeps); ignored when ``time`` is given.
        time: (t0, t1) seconds within the scene's frames, instead of frames: every
            packet (sweep or scene frame) that starts within ``[t0, t1)``, scanned whole.
        out_dir: folder (created if missing; ``//`` = relative to the .blend).
        formats: format names of the registry (:data:`blensor_addon.io.formats.WRITERS`:
            npz, evd, pcd, ...) or a comma-separated string.
        axes: ``"blensor"`` or ``"ros"`` (REP-103) for sensor-frame outputs; KITTI and
            rosbag2 always write REP-103.
        options: format options, ``{"pcd.ascii": True, ...}`` (``pcd_ascii`` is the
            same as ``{"pcd.ascii": True}``).
        seed: overrides the camera's seed if not None.
        overwrite: delete an earlier run's files in ``out_dir`` first (else refused).
        resume: keep an earlier run's finished frames whose settings and geometry hash
            match its manifest (e.g. after SIGKILL) and scan the rest; the files are the
            bytes an uninterrupted run writes.
        progress: called as ``progress(0, total, None)`` once the input is validated, then
            as ``progress(scanned, total, entry)`` after each frame is scanned (its files
            are written meanwhile; ``entry["files"]`` is filled once they are).
        should_cancel: called before each frame; True stops the scan (status
            ``"cancelled"``; finished frames are kept).
        overrides: setting names of the sensor type plus ``sensor_type`` and ``preset``,
            applied over the camera's stored settings (as :func:`~..scene.scanner.scan`).
    Returns:
        the finished :class:`RangeScanJob` (``done`` entries, ``points``, ``status``;
        ``signal`` is the signal number if SIGINT/SIGTERM stopped it).
    Raises:
        SettingsError: bad input, before any file is written; or found while scanning
        (an unknown class name on an object that appears): nothing is left if no frame
        was finished, else the finished frames and a ``failed`` manifest.
        OSError: a write failed (disk full, permissions): finished frames, the EVD up to
        them and the manifest (status ``"failed"``) are kept.
        KeyboardInterrupt: a second SIGINT/SIGTERM; the current frame is dropped and the
        manifest says ``"cancelled"``.
        Any other error during the scan is re-raised likewise, after status ``"failed"``.
    """
    with Signals.scope() as sig:  # the command line tool's, or one for this scan (headless Blender)
        job = RangeScanJob(camera_object, frames, out_dir, formats, seed, backend, frame_of_reference,
                           pcd_ascii, overwrite, resume, overrides, options or {}, axes, time)
        job.signal = None
        status = "failed"
        bad_input = False
        with sig.finishing():  # the first signal: stop after this frame; a second: at once
            try:
                if progress is not None:
                    progress(0, len(job.frames), None)
                while job.remaining:
                    if sig.stop_requested or (should_cancel is not None and should_cancel()):
                        status = "cancelled"
                        break
                    entry = job.step()
                    if progress is not None:
                        progress(job.scanned, len(job.frames), entry)
                else:  # every frame done (a signal during the last one lost nothing)
                    status = "complete"
            except KeyboardInterrupt:
                status = "cancelled"
                raise
            except SettingsError:
                bad_input = True
                raise
            finally:
                job.signal = sig.signum if sig.stop_requested else None
                job.finish(status, bad_input)
    return job
