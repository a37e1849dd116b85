"""Range scans: scan a list of frames of one camera into files.

Output folder layout (names as the original's, reference 10.2; frame numbers %05d):
``scan00001.npz``, ``scan00001.pcd`` + ``scan_noisy00001.pcd``, one ``scan.evd`` for
all frames, and ``manifest.json`` (settings, seed, frames, versions, .blend path,
geometry hashes, status). Every file appears only complete (temporary name + rename);
a cancelled or failed scan keeps every finished frame, a terminated ``scan.evd`` and a
manifest whose ``status`` says what happened.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from .. import __version__
from ..core.errors import SettingsError
from ..scene.scanner import Scanner
from .atomic import atomic_write_bytes, commit_files
from .evd import EvdWriter
from .npz import npz_bytes
from .outdir import FolderLock, prepare, previous_outputs
from .pcd import pcd_bytes

FORMATS = ("npz", "evd", "pcd")


def parse_formats(formats) -> tuple[str, ...]:
    """Normalise ``"npz,evd"`` or an iterable to a tuple of known formats.

    Raises:
        SettingsError (``formats``): empty or unknown format.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in FORMATS for f in items):
        raise SettingsError("formats", "a comma-separated subset of " + ",".join(FORMATS), formats)
    return tuple(dict.fromkeys(items))


def check_frames(scene, frames) -> list[int]:
    """Validate frame numbers against the scene's range.

    Raises:
        SettingsError (``frames``): empty, not integers, or outside frame_start..frame_end.
    """
    lo, hi = scene.frame_start, scene.frame_end
    allowed = f"integers within the scene's frame range {lo}-{hi}"
    if isinstance(frames, range) and len(frames):  # check the ends (O(1)) before building a list
        a, b = sorted((frames[0], frames[-1]))
        if a < lo or b > hi:
            raise SettingsError("frames", allowed, f"{a}-{b}")
    frames = list(frames)
    if not frames or not all(isinstance(f, (int, np.integer)) and not isinstance(f, bool) for f in frames):
        raise SettingsError("frames", allowed, frames)
    if min(frames) < lo or max(frames) > hi:
        raise SettingsError("frames", allowed, f"{min(frames)}-{max(frames)}")
    return [int(f) for f in frames]


def check_output_dir(out_dir) -> Path:
    """Create ``out_dir`` if needed and check it is a writable folder.

    Raises:
        SettingsError (``out``): not creatable, not a folder, or not writable.
    """
    p = Path(bpy.path.abspath(str(out_dir))) if str(out_dir).startswith("//") else Path(out_dir)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError("out", "a writable folder", f"{out_dir} ({exc.strerror})") from None
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        raise SettingsError("out", "a writable folder", str(out_dir))
    return p


#: manifest keys that must match for ``resume`` to reuse an earlier run's frames
RESUME_KEYS = ("camera", "sensor_type", "sensor", "seed", "backend", "frame_of_reference", "formats", "pcd_ascii")


@dataclass
class RangeScanJob:
    """A range scan advanced one frame at a time (the UI's modal operator steps it; the
    CLI and :func:`scan_range` loop over it).

    The folder is locked for the run (:class:`~blensor_addon.io.outdir.FolderLock`);
    ``manifest.json`` is written when the job starts (status ``running``) and after
    every frame, so even a killed run (SIGKILL) leaves a manifest listing its finished
    frames, which ``resume`` reuses. A frame's files appear together after all of them
    were written, or not at all.

    Args:
        camera_object, frames, out_dir, formats, seed, backend, frame_of_reference,
        pcd_ascii, overwrite, resume: see :func:`scan_range`.
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
    done: list = field(default_factory=list)
    status: str = "running"

    def __post_init__(self) -> None:
        self.formats = parse_formats(self.formats)
        self.scene = bpy.context.scene
        self.frames = check_frames(self.scene, self.frames)
        f = self.frames
        self._requested = [f[0], f[-1]] if f == list(range(f[0], f[-1] + 1)) else list(f)
        self.scanner = Scanner(self.camera_object, backend=self.backend, seed=self.seed,
                               frame_of_reference=self.frame_of_reference, overrides=self.overrides)
        self._lock = self._evd = None
        try:
            self.scanner.check_budget(self.frames[0], "range")
            self.out = check_output_dir(self.out_dir)
            self._lock = FolderLock(self.out)
            self._reuse = self._resumable() if self.resume else {}
            prepare(self.out, overwrite=self.overwrite, resume=self.resume)
            self._evd = EvdWriter(self.out / "scan.evd") if "evd" in self.formats else None
            self._old_frame = self.scene.frame_current
            self.points = 0
            self.reused = 0
            self._write_manifest()
        except BaseException:
            self._release()
            raise

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
            if old.get(key) != mine[key]:
                raise SettingsError("resume", f"a folder scanned with the same {key}",
                                    f"{old.get(key)!r} in {path}, {mine[key]!r} now")
        return {e["frame"]: e for e in old.get("frames", [])}

    @property
    def remaining(self) -> int:
        """Frames not scanned yet."""
        return len(self.frames) - len(self.done)

    def _frame_files(self, result) -> list[tuple[str, bytes]]:
        f = result.frame
        files = []
        if "npz" in self.formats:
            files.append((f"scan{f:05d}.npz", npz_bytes(result)))
        if "pcd" in self.formats:
            for noisy, name in ((False, f"scan{f:05d}.pcd"), (True, f"scan_noisy{f:05d}.pcd")):
                files.append((name, pcd_bytes(result, noisy, not self.pcd_ascii)))
        return files

    def _try_reuse(self, f: int) -> dict | None:
        """The earlier run's entry for frame ``f`` if its files are all there and the
        frame's geometry hash is unchanged (EVD runs rescan: the EVD needs every block)."""
        old = self._reuse.get(f)
        if old is None or self._evd is not None:
            return None
        if not all((self.out / n).is_file() for n in old["files"]):
            return None
        if self.scanner.snapshot(f).geometry.hash() != old["geometry_hash"]:
            return None
        return old

    def step(self) -> dict:
        """Scan and write the next frame; returns its manifest entry.

        Raises:
            OSError: a file could not be written (the frame's files are removed, the
            EVD rolled back to the frames before).
        """
        f = self.frames[len(self.done)]
        entry = self._try_reuse(f)
        if entry is not None:
            self.reused += 1
        else:
            result = self.scanner.scan_frame(f, "range")
            # the EVD block is appended after the frame's files are staged, before they appear
            written = commit_files(self.out, self._frame_files(result),
                                   (lambda: self._evd.write(result)) if self._evd is not None else None)
            entry = {"frame": f, "points": len(result), "rays": result.num_rays,
                     "files": [p.name for p in written],
                     "geometry_hash": self.scanner.last_snapshot.geometry.hash()}
        self.done.append(entry)
        self.points += entry["points"]
        self._write_manifest()
        return entry

    def _write_manifest(self) -> Path:
        path = self.out / "manifest.json"
        atomic_write_bytes(path, (json.dumps(self.manifest(), indent=2, sort_keys=True) + "\n").encode())
        return path

    def finish(self, status: str = "complete") -> Path:
        """Close the EVD file, write ``manifest.json`` with ``status``, release the
        folder, restore the scene frame and free the ray caster. Safe to call once after
        any number of steps. Returns the manifest path.

        Raises:
            OSError: the EVD or the manifest could not be written (status ``failed``
            where the manifest could still be written).
        """
        self.status = status
        try:
            if self._evd is not None:
                evd, self._evd = self._evd, None
                if self.done:
                    try:
                        evd.close()
                    except OSError:
                        self.status = "failed"
                        evd.discard()
                        self._write_manifest()
                        raise
                else:  # nothing scanned: leave no empty EVD behind
                    evd.discard()
            return self._write_manifest()
        finally:
            self._release()
            if self.scene.frame_current != self._old_frame:
                self.scene.frame_set(self._old_frame)

    def _release(self) -> None:
        if self._evd is not None:
            self._evd.discard()
            self._evd = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.scanner.close()

    def manifest(self) -> dict:
        """The ``manifest.json`` content so far (JSON-ready dict)."""
        h = hashlib.sha256()
        for e in self.done:
            h.update(e["geometry_hash"].encode())
        return {
            "blensor_version": __version__,
            "blender_version": bpy.app.version_string,
            "blend_file": bpy.data.filepath,
            "camera": self.camera_object.name,
            "sensor_type": self.scanner.sensor_type,
            "sensor": self.scanner.settings.to_dict(),
            "seed": int(self.scanner.settings.seed),
            "backend": self.scanner.backend.name,
            "frame_of_reference": self.frame_of_reference,
            "formats": list(self.formats),
            "pcd_ascii": bool(self.pcd_ascii),
            "frames_requested": self._requested,  # [first, last] of a contiguous range
            "frames": self.done,
            "geometry_hash": h.hexdigest(),
            "objects": self.scanner.extractor.table.table,
            "status": self.status,
        }


class _Signals:
    """SIGINT and SIGTERM during a range scan: the first asks the scan to stop after the
    current frame (``signum`` is set), a second raises KeyboardInterrupt at once (the
    current frame is then dropped whole). Installed only in the main thread of a
    background (headless) process; a Blender UI keeps its own handlers (ESC cancels)."""

    def __init__(self) -> None:
        self.signum = None
        self._old = {}

    def _handler(self, signum, _frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self):
        if bpy.app.background and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def scan_range(camera_object, frames, out_dir, formats=("npz",), seed: int | None = None, *,
               backend: str = "auto", frame_of_reference: str = "sensor", pcd_ascii: bool = False,
               overwrite: bool = False, resume: bool = False, progress=None,
               should_cancel=None, **overrides) -> RangeScanJob:
    """Scan ``frames`` of ``camera_object`` into ``out_dir``.

    Args:
        frames: iterable (or range) of scene frame numbers, within the scene's range.
        out_dir: folder (created if missing; ``//`` = relative to the .blend).
        formats: subset of ``("npz", "evd", "pcd")`` or a comma-separated string.
        seed: overrides the camera's seed if not None.
        overwrite: delete an earlier run's files in ``out_dir`` first (else refused).
        resume: keep an earlier run's finished frames whose settings and geometry hash
            match its manifest (e.g. after SIGKILL) and scan the rest; the files are the
            bytes an uninterrupted run writes.
        progress: called as ``progress(0, total, None)`` once the input is validated, then
            as ``progress(done, total, entry)`` after each frame.
        should_cancel: called before each frame; True stops the scan (status
            ``"cancelled"``; finished frames are kept).
        overrides: setting names of the sensor type plus ``sensor_type`` and ``preset``,
            applied over the camera's stored settings (as :func:`~..scene.scanner.scan`).
    Returns:
        the finished :class:`RangeScanJob` (``done`` entries, ``points``, ``status``;
        ``signal`` is the signal number if SIGINT/SIGTERM stopped it).
    Raises:
        SettingsError: bad input, before any file is written.
        OSError: a write failed (disk full, permissions): finished frames, the EVD up to
        them and the manifest (status ``"failed"``) are kept.
        KeyboardInterrupt: a second SIGINT/SIGTERM; the current frame is dropped and the
        manifest says ``"cancelled"``.
        Any other error during the scan is re-raised likewise, after status ``"failed"``.
    """
    job = RangeScanJob(camera_object, frames, out_dir, formats, seed, backend,
                       frame_of_reference, pcd_ascii, overwrite, resume, overrides)
    job.signal = None
    status = "failed"
    with _Signals() as sig:
        try:
            if progress is not None:
                progress(0, len(job.frames), None)
            while job.remaining:
                if sig.signum is not None or (should_cancel is not None and should_cancel()):
                    status = "cancelled"
                    break
                entry = job.step()
                if progress is not None:
                    progress(len(job.done), len(job.frames), entry)
            else:  # every frame done (a signal during the last one lost nothing)
                status = "complete"
        except KeyboardInterrupt:
            status = "cancelled"
            raise
        finally:
            job.signal = sig.signum
            job.finish(status)
    return job
