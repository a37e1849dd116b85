"""How a range scan (or a depth export) ends when it does not complete: typed errors
whose attributes say what was kept, for the CLI's one line and the panel's report."""
from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from ..core.errors import BlensorError

#: sqlite3 primary result codes (https://www.sqlite.org/rescode.html) -> errno, for the one line
_SQLITE_ERRNO = {3: errno.EPERM, 5: errno.EBUSY, 6: errno.EBUSY, 7: errno.ENOMEM, 8: errno.EROFS,
                 10: errno.EIO, 13: errno.ENOSPC, 14: errno.EACCES, 23: errno.EACCES}


def writer_failure(exc: BaseException, writer: str, folder: Path | str) -> OSError | None:
    """``exc``, raised by the writer of format ``writer`` into ``folder``, as the OSError
    of a write failure; None if it is not one (a programming error, bad input).

    A writer's own library reports a failed write in its own types: sqlite3 (a rosbag2
    bag in sqlite3 storage) raises ``sqlite3.OperationalError('database or disk is
    full')`` on a full disk and ``'disk I/O error'`` past the file size limit, rosbags
    its ``WriterError``. Those (sqlite3.Error, and any exception whose class is defined
    outside Python's built-ins and this add-on) become ``OSError(errno, message,
    "<writer> files in <folder>")``, errno from the sqlite3 result code (SQLITE_FULL:
    ENOSPC, SQLITE_IOERR: EIO, ...; EIO otherwise). An OSError is returned as it is.
    """
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        num = _SQLITE_ERRNO.get(code & 0xFF, errno.EIO) if isinstance(code, int) else errno.EIO
        text = str(exc) or type(exc).__name__
    else:
        root = type(exc).__module__.partition(".")[0]
        if not isinstance(exc, Exception) or root in ("builtins", __name__.partition(".")[0]):
            return None
        num, text = errno.EIO, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return OSError(num, text, f"{writer} files in {folder}")


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
                 manifest_status: str, dropped_formats: Iterable[str] = ()) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), cause.filename)
        self.cause = cause
        self.finished_frames = int(finished_frames)
        self.manifest_path = Path(manifest_path)
        self.manifest_status = manifest_status
        self.dropped_formats = list(dropped_formats)

    def __reduce__(self) -> tuple[Callable[..., RunFailed], tuple[object, ...]]:  # pragma: no cover
        # pickling keeps the declared attributes
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


def _rebuild(cause: OSError, finished: int, path: Path, status: str,
             dropped: list[str]) -> RunFailed:  # pragma: no cover
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


__all__ = ["RunFailed", "RunInterrupted", "writer_failure"]
