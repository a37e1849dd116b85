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
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from .. import __version__
from ..core.errors import SettingsError
from ..scene.scanner import Scanner
from .atomic import atomic_write_bytes
from .evd import EvdWriter
from .npz import write_npz
from .pcd import write_pcd

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
    frames = list(frames)
    lo, hi = scene.frame_start, scene.frame_end
    allowed = f"integers within the scene's frame range {lo}-{hi}"
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


@dataclass
class RangeScanJob:
    """A range scan advanced one frame at a time (the UI's modal operator steps it; the
    CLI and :func:`scan_range` loop over it).

    Args:
        camera_object, frames, out_dir, formats, seed, backend, frame_of_reference,
        pcd_ascii: see :func:`scan_range`.
    Raises (on construction, before any file is written):
        SettingsError: bad camera, setting, frames, formats or output folder.
    """

    camera_object: object
    frames: list
    out_dir: object
    formats: tuple = ("npz",)
    seed: int | None = None
    backend: str = "auto"
    frame_of_reference: str = "sensor"
    pcd_ascii: bool = False
    done: list = field(default_factory=list)
    objects: list = field(default_factory=list)
    status: str = "running"

    def __post_init__(self) -> None:
        self.formats = parse_formats(self.formats)
        self.scene = bpy.context.scene
        self.frames = check_frames(self.scene, self.frames)
        self.scanner = Scanner(self.camera_object, backend=self.backend, seed=self.seed,
                               frame_of_reference=self.frame_of_reference)
        try:
            self.out = check_output_dir(self.out_dir)
        except SettingsError:
            self.scanner.close()
            raise
        self._old_frame = self.scene.frame_current
        self._evd = EvdWriter(self.out / "scan.evd") if "evd" in self.formats else None
        self.points = 0

    @property
    def remaining(self) -> int:
        """Frames not scanned yet."""
        return len(self.frames) - len(self.done)

    def step(self) -> dict:
        """Scan and write the next frame; returns its manifest entry."""
        f = self.frames[len(self.done)]
        result = self.scanner.scan_frame(f, "range")
        files = []
        if "npz" in self.formats:
            write_npz(result, self.out / f"scan{f:05d}.npz")
            files.append(f"scan{f:05d}.npz")
        if "pcd" in self.formats:
            for noisy, name in ((False, f"scan{f:05d}.pcd"), (True, f"scan_noisy{f:05d}.pcd")):
                write_pcd(result, self.out / name, noisy=noisy, binary=not self.pcd_ascii)
                files.append(name)
        if self._evd is not None:
            self._evd.write(result)
        entry = {"frame": f, "points": len(result), "rays": result.num_rays, "files": files,
                 "geometry_hash": self.scanner.last_snapshot.geometry.hash()}
        self.done.append(entry)
        self.points += len(result)
        self.objects = result.objects
        return entry

    def finish(self, status: str = "complete") -> Path:
        """Close the EVD file, write ``manifest.json``, restore the scene frame and free
        the ray caster. Safe to call once after any number of steps. Returns the
        manifest path."""
        self.status = status
        try:
            if self._evd is not None:
                if self.done:
                    self._evd.close()
                else:  # nothing scanned: leave no empty EVD behind
                    self._evd.discard()
            manifest = self.manifest()
            path = self.out / "manifest.json"
            atomic_write_bytes(path, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
            return path
        finally:
            self.scanner.close()
            if self.scene.frame_current != self._old_frame:
                self.scene.frame_set(self._old_frame)

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
            "sensor": self.scanner.settings.to_dict(),
            "seed": int(self.scanner.settings.seed),
            "backend": self.scanner.backend.name,
            "frame_of_reference": self.frame_of_reference,
            "formats": list(self.formats),
            "frames_requested": self.frames,
            "frames": self.done,
            "geometry_hash": h.hexdigest(),
            "objects": self.objects,
            "status": self.status,
        }


def scan_range(camera_object, frames, out_dir, formats=("npz",), seed: int | None = None, *,
               backend: str = "auto", frame_of_reference: str = "sensor", pcd_ascii: bool = False,
               progress=None, should_cancel=None) -> RangeScanJob:
    """Scan ``frames`` of ``camera_object`` into ``out_dir``.

    Args:
        frames: iterable of scene frame numbers (within the scene's range).
        out_dir: folder (created if missing; ``//`` = relative to the .blend).
        formats: subset of ``("npz", "evd", "pcd")`` or a comma-separated string.
        seed: overrides the camera's seed if not None.
        progress: called as ``progress(0, total, None)`` once the input is validated, then
            as ``progress(done, total, entry)`` after each frame.
        should_cancel: called before each frame; True stops the scan (status
            ``"cancelled"``; finished frames are kept).
    Returns:
        the finished :class:`RangeScanJob` (``done`` entries, ``points``, ``status``).
    Raises:
        SettingsError: bad input, before any file is written. Any error during the scan
        is re-raised after the finished frames and the manifest (status ``"failed"``)
        are written.
    """
    job = RangeScanJob(camera_object, list(frames), out_dir, formats, seed, backend,
                       frame_of_reference, pcd_ascii)
    status = "failed"
    try:
        if progress is not None:
            progress(0, len(job.frames), None)
        while job.remaining:
            if should_cancel is not None and should_cancel():
                status = "cancelled"
                break
            entry = job.step()
            if progress is not None:
                progress(len(job.done), len(job.frames), entry)
        else:
            status = "complete"
    finally:
        job.finish(status)
    return job
