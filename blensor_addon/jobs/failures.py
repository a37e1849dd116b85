"""How a range scan (or a depth export) ends when it does not complete: typed errors
whose attributes say what was kept, for the CLI's one line and the panel's report."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BlensorError


class RunFailed(BlensorError, OSError):
    """Writing failed during a run (disk full, permissions, a multi-frame file that
    could not be closed). An :class:`OSError` with the cause's ``errno``, ``strerror``
    and ``filename`` (raised ``from`` the cause).

    Attributes:
        cause: the OSError that stopped the run.
        finished_frames: int, packets whose files are whole on disk (listed in the
            manifest when ``manifest_status`` is ``"failed"``).
        manifest_path: Path of ``manifest.json``.
        manifest_status: ``"failed"`` (the manifest says so and lists every finished
            packet) or ``"stale"`` (it could not be rewritten; it lists the packets up to
            its last write).
        dropped_formats: list of formats whose multi-frame file could not be closed and
            was removed.
    """

    def __init__(self, cause: OSError, *, finished_frames: int, manifest_path: Path,
                 manifest_status: str, dropped_formats=()) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), cause.filename)
        self.cause = cause
        self.finished_frames = int(finished_frames)
        self.manifest_path = Path(manifest_path)
        self.manifest_status = manifest_status
        self.dropped_formats = list(dropped_formats)

    def __reduce__(self):  # pragma: no cover - pickling keeps the declared attributes
        return (_rebuild, (self.cause, self.finished_frames, self.manifest_path, self.manifest_status,
                           self.dropped_formats))

    def kept(self) -> str:
        """What is kept, in words (the end of the CLI's line)."""
        if self.manifest_status == "failed":
            kept = f"{self.finished_frames} finished frames and the manifest (status failed) are kept"
        else:
            kept = (f"{self.finished_frames} finished frames are kept; the manifest could not be rewritten "
                    "(the disk is still full?) and lists the frames up to its last write")
        if self.dropped_formats:
            kept += f" ({', '.join(self.dropped_formats)} could not be closed and was removed)"
        return kept


def _rebuild(cause, finished, path, status, dropped):  # pragma: no cover
    return RunFailed(cause, finished_frames=finished, manifest_path=path, manifest_status=status,
                     dropped_formats=dropped)


class RunInterrupted(KeyboardInterrupt):
    """A second SIGINT/SIGTERM (or Ctrl-C) stopped the run at once: the packet being
    scanned was dropped, finished packets are kept and the manifest says ``cancelled``.

    Attributes:
        finished_frames: int, packets whose files are whole on disk.
        manifest_path: Path of ``manifest.json``, or None if it could not be written.
    """

    def __init__(self, finished_frames: int, manifest_path: Path | None) -> None:
        super().__init__(f"interrupted after {finished_frames} finished frames")
        self.finished_frames = int(finished_frames)
        self.manifest_path = manifest_path


__all__ = ["RunFailed", "RunInterrupted"]
