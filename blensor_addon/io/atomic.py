"""Write files so that a reader never sees a half-written one.

Data goes to a temporary sibling first, is flushed and fsynced, then renamed over the
target (``os.replace``: atomic on POSIX and Windows). Temporary names are unique per
process and call (``.<name>.<pid>.<random>.part``), so two runs writing into one folder
never share one, and they are created exclusively (``O_CREAT | O_EXCL``, plus
``O_NOFOLLOW`` where the OS has it): a file or symlink planted at that name makes the
write fail instead of being followed. On every error path the temporary file is removed.
"""
from __future__ import annotations

import errno
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

#: Suffix of every temporary file BlenSor writes; a folder holding such files after a
#: run has ended was left by a killed process (SIGKILL) and the files can be removed.
PART_SUFFIX = ".part"


#: longest file name (bytes) on the file systems BlenSor writes to (ext4, APFS, NTFS: 255)
NAME_MAX = 255


def temp_name(path: Path) -> Path:
    """A fresh, unique temporary sibling of ``path`` (same folder, so the rename stays on
    one file system): ``.<name>.<pid>.<16 hex>.part``, at most :data:`NAME_MAX` bytes: a
    long name (an object name of 255 bytes in a motion export) is cut to fit, with the
    first 8 hex digits of its SHA-1 after the cut (``.<name cut>~<8 hex>.<pid>...``)."""
    path = Path(path)
    tail = f".{os.getpid()}.{secrets.token_hex(8)}{PART_SUFFIX}"
    name = path.name
    if len(f".{name}{tail}".encode()) > NAME_MAX:
        import hashlib
        digest = hashlib.sha1(name.encode(errors="surrogateescape")).hexdigest()[:8]
        room = NAME_MAX - len(tail.encode()) - 1 - 9
        name = name.encode(errors="surrogateescape")[:room].decode(errors="ignore") + "~" + digest
    return path.with_name(f".{name}{tail}")


def open_exclusive(path: Path, mode: str = "wb", buffering: int = -1):
    """Create ``path`` exclusively and open it for writing.

    Raises:
        FileExistsError: something (a file, a symlink) is already there; it is not touched.
        OSError: the folder is not writable.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o644)
    try:
        return os.fdopen(fd, mode, buffering)
    except BaseException:
        os.close(fd)
        raise


def remove_quietly(path: Path) -> None:
    """Unlink ``path`` if it exists; errors are ignored (used on error paths)."""
    try:
        os.unlink(path)
    except OSError:
        pass


class StagedFile:
    """A file built in place under a unique temporary sibling of ``path``
    (:func:`temp_name`, created exclusively, unbuffered: bytes are in the file when
    :meth:`put` returns) and renamed over ``path`` by :meth:`commit`; :meth:`discard`
    deletes it. The writers that append a run's packets to one file (EVD, pcap) keep it
    whole after every append and roll a failed append back with :meth:`truncate`.

    Raises (constructor): FileExistsError/OSError if the temporary file cannot be created.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        self.tmp = temp_name(self.path)
        self._f = open_exclusive(self.tmp, "wb", buffering=0)

    @property
    def closed(self) -> bool:
        """True once committed or discarded."""
        return self._f is None

    def put(self, offset: int, *parts) -> None:
        """Write the buffers ``parts`` one after the other from byte ``offset`` (no copy
        of them is made: an EVD block is tens of MB).

        Raises:
            OSError: the write failed (ENOSPC); the caller rolls back (:meth:`truncate`).
        """
        f = self._f
        f.seek(offset)
        for data in parts:
            view = memoryview(data).cast("B")
            while view:
                view = view[f.write(view):]

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (a rollback; needs no free space)."""
        self._f.truncate(size)

    def commit(self, before_rename=None) -> None:
        """Fsync and close the file, call ``before_rename()`` (a file written beside it
        first), then rename it to ``path`` (idempotent).

        Raises:
            OSError: fsync or rename failed; the temporary file is left for inspection.
        """
        if self._f is None:
            return
        f, self._f = self._f, None
        try:
            os.fsync(f.fileno())
        finally:
            f.close()
        if before_rename is not None:
            before_rename()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Close and delete the temporary file (idempotent)."""
        if self._f is None:
            return
        f, self._f = self._f, None
        try:
            f.close()
        finally:
            remove_quietly(self.tmp)


@contextmanager
def atomic_open(path, mode: str = "wb"):
    """Open a unique temporary sibling of ``path`` for writing; on success fsync and
    rename it to ``path``, on any exception (including KeyboardInterrupt) remove it and
    re-raise. Yields the open file.

    Raises:
        OSError: the write, fsync or rename failed (e.g. ENOSPC); nothing is left behind.
    """
    path = Path(path)
    tmp = temp_name(path)
    f = open_exclusive(tmp, mode)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        try:
            f.close()
        except OSError:
            pass
        remove_quietly(tmp)
        raise


def stage_bytes(path, data: bytes) -> Path:
    """Write ``data`` to a fresh temporary sibling of ``path``, fsynced, and return the
    temporary path; the caller renames it (``os.replace``) when every file of a group
    is staged, or removes it.

    Raises:
        OSError: the write failed; the temporary file is removed.
    """
    path = Path(path)
    tmp = temp_name(path)
    try:
        with open_exclusive(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`).

    Raises:
        OSError: the file cannot be written; no partial file is left.
    """
    with atomic_open(path, "wb") as f:
        f.write(data)


def ensure_folder(path: Path) -> Path:
    """Create folder ``path`` (and its parents) if missing; refuse a symlink there.

    Raises:
        OSError: not creatable, or a symlink (a planted link is never followed).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise OSError(errno.ELOOP, "not a plain folder (a symlink is not followed)", str(path))
    return path


def commit_files(folder: Path, files, before_rename=None) -> list[Path]:
    """Write ``files`` (iterable of (name, bytes)) into ``folder`` so they appear
    together or not at all: each is staged under a temporary name (:func:`stage_bytes`),
    ``before_rename()`` (if given) runs, then all are renamed. Returns the final paths.

    Raises:
        OSError (or what ``before_rename`` raises): nothing of this call is left.
    """
    staged = []
    try:
        for name, data in files:
            target = Path(folder) / name
            if target.parent != Path(folder):
                ensure_folder(target.parent)
            staged.append((stage_bytes(target, data), target))
        if before_rename is not None:
            before_rename()
    except BaseException:
        for tmp, _ in staged:
            remove_quietly(tmp)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]
