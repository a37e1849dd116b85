"""What Blender's C code prints on stderr, passed on with names escaped.

Blender prints its warnings (a Python driver it refuses: ``BPY_driver_exec ...`` and
``For target: (type=Object, name="...")``) with ``fprintf(stderr, ...)`` on file
descriptor 2, past Python's ``sys.stderr``, and with the names of the .blend as they
are: an escape sequence or a bell in an object name reached the terminal raw. Everything
BlenSor prints itself goes through :func:`~blensor_addon.core.text.printable`; this
module puts Blender's messages through it too.

:class:`EscapedStderr` points file descriptor 2 at a pipe and passes what arrives there
on to the real stderr, line by line, escaped (tabs and newlines kept), from a thread;
``sys.stderr`` is pointed at the real stderr directly, so BlenSor's own lines (already
escaped), the progress bar and tracebacks do not wait for the thread. The pipe's write
end is non-blocking: C code that prints while holding Python's GIL must never wait for
the thread (which needs the GIL); when the pipe (1 MiB where Linux allows it) is full,
the rest of such a message is lost instead. Blender's lines may come out a moment after
BlenSor's lines printed later; :meth:`EscapedStderr.stop` passes on all of them.
POSIX only (:meth:`EscapedStderr.start` does nothing on Windows).
"""
from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

from ..core.text import printable

#: pipe size asked for (bytes; Linux ``F_SETPIPE_SZ``, up to ``/proc/sys/fs/pipe-max-size``)
PIPE_BYTES = 1 << 20


def escape_lines(data: bytes) -> bytes:
    """``data`` (text printed by C code: UTF-8, any bytes) with every character that is
    not printable escaped as :func:`~blensor_addon.core.text.printable` does, newlines
    and tabs kept; bytes that are not UTF-8 become ``\\xNN``."""
    text = data.decode("utf-8", errors="backslashreplace")
    lines = text.split("\n")
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in lines).encode()


class EscapedStderr:
    """File descriptor 2 through :func:`escape_lines` while started (see the module's
    docstring). Use :meth:`start` once Blender is loaded, :meth:`stop` before the
    process ends (``os._exit`` would drop what the thread has not passed on)."""

    def __init__(self) -> None:
        self._real: int | None = None  # a duplicate of the real stderr
        self._stderr: TextIO | None = None  # sys.stderr before start()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._thread is not None

    def start(self) -> "EscapedStderr":
        """Point file descriptor 2 at the pipe and ``sys.stderr`` at the real stderr;
        does nothing if started already, on Windows, or where the pipe cannot be made."""
        if self._thread is not None or sys.platform == "win32":
            return self
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        try:
            read, write = os.pipe()
        except OSError:
            return self
        try:
            import fcntl
            fcntl.fcntl(write, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except (OSError, ImportError):
            pass  # the default size (64 KiB)
        os.set_blocking(write, False)
        self._real = os.dup(2)
        os.dup2(write, 2)
        os.close(write)
        self._stderr = sys.stderr
        encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
        sys.stderr = open(os.dup(self._real), "w", encoding=encoding, errors="backslashreplace",
                          buffering=1, closefd=True)
        self._thread = threading.Thread(target=self._pass_on, args=(read, self._real),
                                        name="blensor-stderr", daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _pass_on(read: int, real: int) -> None:
        """The thread: read the pipe until every write end is closed, write each line
        escaped to ``real`` (a partial line waits for its end, or for the end of input)."""
        rest = b""
        try:
            while True:
                chunk = os.read(read, 1 << 16)
                if not chunk:
                    break
                rest += chunk
                cut = rest.rfind(b"\n") + 1
                if cut:
                    _write_all(real, escape_lines(rest[:cut]))
                    rest = rest[cut:]
            if rest:
                _write_all(real, escape_lines(rest))
        except OSError:
            pass
        finally:
            os.close(read)

    def stop(self, timeout: float = 5.0) -> None:
        """Point file descriptor 2 and ``sys.stderr`` back at the real stderr and wait (at
        most ``timeout`` s: a child process may still hold the pipe) until the thread has
        passed on what was printed (idempotent)."""
        if self._thread is None:
            return
        thread, self._thread = self._thread, None
        real = self._real
        assert real is not None  # set by start() together with the thread
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(real, 2)  # closes this process's write end of the pipe
        sys.stderr = self._stderr  # (the one made by start() stays open: a progress bar may hold it)
        thread.join(timeout)
        if not thread.is_alive():  # (else it may still write there: left open)
            os.close(real)
        self._real = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


__all__ = ["EscapedStderr", "escape_lines"]
