"""Write files so that a reader never sees a half-written one.

Data goes to a temporary sibling first, is flushed and fsynced, then renamed over the
target (``os.replace``: atomic on POSIX and Windows). Temporary names are unique per
process and call (``.<name>.<pid>.<random>.part``), so two runs writing into one folder
never share one, and they are created exclusively (``O_CREAT | O_EXCL``, plus
``O_NOFOLLOW`` where the OS has it): a file or symlink planted at that name makes the
write fail instead of being followed. On every error path the temporary file is removed.

A group of files that must appear together (:func:`commit_files`: one packet's files)
is staged whole first; on Linux one ``syncfs(2)`` of the file system (per file system the
group's files are on) then makes the data of every staged file durable at once, before
any of them is renamed, instead of one ``fsync`` per file (elsewhere each file is still
fsynced as it is staged). Either way a file at its final name holds its whole data on
disk, even after a power loss; the renames themselves reach the disk with the next sync
(the next group's, or the manifest's fsync, which on a journalling file system such as
ext4 or XFS commits the renames made before it).

A target that exists and is not a regular file (a FIFO, a device node, a socket, a
folder, a symlink) is never replaced: every writer checks it (:func:`check_target`)
before it writes and again just before the rename, and raises :class:`NotRegularError`
(``rename(2)`` would put a regular file in the node's place: ``/dev/null`` as root).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeAlias, cast

if TYPE_CHECKING:
    from ..core.ndtypes import Array

#: a file or folder path as the writers take it: a str or a :class:`os.PathLike` of str
#: (a :class:`~pathlib.Path`)
StrPath: TypeAlias = "str | os.PathLike[str]"

#: Suffix of every temporary file BlenSor writes; a folder holding such files after a
#: run has ended was left by a killed process (SIGKILL) and the files can be removed.
PART_SUFFIX = ".part"


#: longest file name (bytes) on the file systems BlenSor writes to (ext4, APFS, NTFS: 255)
NAME_MAX = 255


class NotRegularError(OSError):
    """Something other than a regular file is at a target (``errno.EEXIST``):
    ``filename`` the target, ``kind`` what is there (:func:`kind_of`). Nothing was written
    there and the node is as it was."""

    def __init__(self, path: StrPath, kind: str) -> None:
        super().__init__(errno.EEXIST, f"{kind} is there, not a regular file (never replaced)", str(path))
        self.kind = kind


def kind_of(mode: int) -> str:
    """What an ``st_mode`` (``os.lstat``) is, for messages: ``"a regular file"``,
    ``"a folder"``, ``"a FIFO"``, ``"a device"``, ``"a socket"``, ``"a symbolic link"``
    or ``"not a regular file"``."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "not a regular file"


def check_target(path: StrPath) -> None:
    """Whether a writer may put a file at ``path``: nothing there, or a regular file
    (``os.lstat``: a symlink is not followed and counts as not regular).

    Raises:
        NotRegularError: a FIFO, device, socket, folder or symlink is there.
        OSError: ``path`` cannot be looked at (a folder on the way not searchable).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotRegularError(path, kind_of(mode))


def temp_name(path: StrPath) -> Path:
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


def open_exclusive(path: StrPath, mode: str = "wb", buffering: int = -1) -> IO[Any]:
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


def remove_quietly(path: StrPath) -> None:
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

    Raises (constructor): NotRegularError if something other than a regular file is at
    ``path`` (:func:`check_target`); FileExistsError/OSError if the temporary file cannot
    be created.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        check_target(self.path)
        self.tmp = temp_name(self.path)
        self._f: IO[bytes] | None = open_exclusive(self.tmp, "wb", buffering=0)

    @property
    def closed(self) -> bool:
        """True once committed or discarded."""
        return self._f is None

    def put(self, offset: int, *parts: bytes | bytearray | memoryview | Array) -> None:
        """Write the buffers ``parts`` one after the other from byte ``offset`` (no copy
        of them is made: an EVD block is tens of MB).

        Raises:
            OSError: the write failed (ENOSPC); the caller rolls back (:meth:`truncate`).
        """
        f = cast("IO[bytes]", self._f)  # open until commit/discard (the callers' order)
        f.seek(offset)
        for data in parts:
            # an ndarray exports the buffer protocol; numpy 1.26's stubs say so on Python >= 3.12 only
            view = memoryview(data).cast("B")  # type: ignore[arg-type]
            while view:
                view = view[f.write(view):]

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (a rollback; needs no free space)."""
        cast("IO[bytes]", self._f).truncate(size)  # open until commit/discard (the callers' order)

    def commit(self, before_rename: Callable[[], object] | None = None) -> None:
        """Fsync and close the file, call ``before_rename()`` (a file written beside it
        first), then rename it to ``path`` (idempotent).

        Raises:
            NotRegularError: something other than a regular file is at ``path`` now; the
                file stays open (:meth:`discard` removes it).
            OSError: fsync or rename failed; the temporary file is left for inspection.
        """
        if self._f is None:
            return
        check_target(self.path)
        f, self._f = self._f, None
        try:
            os.fsync(f.fileno())
        finally:
            f.close()
        if before_rename is not None:
            before_rename()
        check_target(self.path)
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
def atomic_open(path: StrPath, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a unique temporary sibling of ``path`` for writing; on success fsync and
    rename it to ``path``, on any exception (including KeyboardInterrupt) remove it and
    re-raise. Yields the open file.

    Raises:
        NotRegularError: something other than a regular file is at ``path`` (checked
            before and just before the rename; it is left as it was).
        OSError: the write, fsync or rename failed (e.g. ENOSPC); nothing is left behind.
    """
    path = Path(path)
    check_target(path)
    tmp = temp_name(path)
    f = open_exclusive(tmp, mode)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        check_target(path)
        os.replace(tmp, path)
    except BaseException:
        try:
            f.close()
        except OSError:
            pass
        remove_quietly(tmp)
        raise


def _load_syncfs() -> Callable[[int], None] | None:
    """``syncfs(2)`` of the C library (Linux 2.6.39+, glibc 2.14+) as a function of a file
    descriptor that raises OSError on failure (Linux 5.8+ reports the file system's
    write-back errors there), or None where the platform has none (macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int

    def syncfs(fd: int) -> None:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed ({os.strerror(err)})")
    return syncfs


#: ``syncfs(fd)``: flushes the data and metadata of the whole file system that ``fd`` is
#: on (:func:`_load_syncfs`); None where there is none (each file is fsynced instead)
_syncfs = _load_syncfs()


def sync_file_systems(paths: Iterable[StrPath]) -> int:
    """Make the data of the files ``paths`` durable with one ``syncfs(2)`` per file
    system they are on (told apart by ``st_dev``); where there is no ``syncfs``, one
    ``fsync`` per file. Returns the number of sync calls made.

    Raises:
        OSError: a file cannot be opened or the sync failed (EIO: the data may not be
            on disk).
    """
    if _syncfs is None:
        count = 0
        for p in paths:
            fd = os.open(p, os.O_RDWR | getattr(os, "O_BINARY", 0))  # (Windows' fsync needs write access)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            count += 1
        return count
    devices: dict[int, StrPath] = {}
    for p in paths:
        devices.setdefault(os.stat(p).st_dev, p)
    for p in devices.values():
        fd = os.open(p, os.O_RDONLY)
        try:
            _syncfs(fd)
        finally:
            os.close(fd)
    return len(devices)


def stage_bytes(path: StrPath, data: bytes, sync: bool = True) -> Path:
    """Write ``data`` to a fresh temporary sibling of ``path``, fsynced unless ``sync``
    is False (the caller syncs the group: :func:`sync_file_systems`), and return the
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
            if sync:
                os.fsync(f.fileno())
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def atomic_write_bytes(path: StrPath, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`).

    Raises:
        NotRegularError: something other than a regular file is at ``path``.
        OSError: the file cannot be written; no partial file is left.
    """
    with atomic_open(path, "wb") as f:
        f.write(data)


def ensure_folder(path: StrPath) -> Path:
    """Create folder ``path`` (and its parents) if missing; refuse a symlink there.

    Raises:
        OSError: not creatable, or a symlink (a planted link is never followed).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise OSError(errno.ELOOP, "not a plain folder (a symlink is not followed)", str(path))
    return path


@dataclass(frozen=True)
class Staged:
    """A file's data written already by another process (a cluster's worker) at ``path``,
    a temporary name on the file system of the folder it goes to, ``size`` bytes long;
    ``synced``: that process made it durable (else :func:`commit_files` syncs it with the
    files it stages itself)."""

    path: Path
    size: int
    synced: bool = False


def _check_staged(staged: Staged) -> Path:
    """``staged.path`` if it is a regular file (not a link) of ``staged.size`` bytes.

    Raises:
        OSError: it is missing, not a regular file, or of another size (``EIO``)."""
    st = os.lstat(staged.path)
    if not stat.S_ISREG(st.st_mode) or st.st_size != staged.size:
        raise OSError(errno.EIO, f"a staged file is {kind_of(st.st_mode)} of {st.st_size} bytes, not the "
                      f"regular file of {staged.size} bytes written there", str(staged.path))
    return staged.path


def commit_files(folder: StrPath, files: Iterable[tuple[str, bytes | Staged]],
                 before_rename: Callable[[], object] | None = None) -> list[Path]:
    """Write ``files`` (iterable of (name, bytes)) into ``folder`` so they appear
    together or not at all: each is staged under a temporary name (:func:`stage_bytes`),
    the data of all of them is made durable (one ``syncfs`` per file system on Linux,
    else one ``fsync`` per file: :func:`sync_file_systems`), ``before_rename()`` (if
    given) runs, then all are renamed. Returns the final paths. A :class:`Staged` in
    place of the bytes is a file written already (a cluster's worker wrote it into the
    shared output folder): it is checked (a regular file of its size), synced with the
    others unless ``synced``, and renamed with them; on failure it is removed too.

    Raises:
        NotRegularError: something other than a regular file is at one of the paths
            (checked before anything is staged and again before the renames).
        OSError (or what ``before_rename`` raises): nothing of this call is left.
    """
    staged: list[tuple[Path, Path]] = []
    unsynced: list[Path] = []
    items = list(files)
    try:
        for name, data in items:
            target = Path(folder) / name
            if target.parent != Path(folder):
                ensure_folder(target.parent)
            check_target(target)
            if isinstance(data, Staged):
                staged.append((_check_staged(data), target))
                if not data.synced:
                    unsynced.append(data.path)
                continue
            staged.append((stage_bytes(target, data, sync=_syncfs is None), target))
            if _syncfs is not None:
                unsynced.append(staged[-1][0])
        if unsynced:
            sync_file_systems(unsynced)
        if before_rename is not None:
            before_rename()
        for _, final in staged:
            check_target(final)
    except BaseException:
        for tmp, _ in staged:
            remove_quietly(tmp)
        for _, data in items:
            if isinstance(data, Staged):
                remove_quietly(data.path)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]
