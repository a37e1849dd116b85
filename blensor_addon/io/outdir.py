"""Output folders of BlenSor's jobs (range scans, depth maps, motion exports): one run at
a time, no mixing with an earlier run, nothing deleted that no run listed.

- :class:`FolderLock`: an advisory lock (``flock`` on POSIX, ``msvcrt.locking`` on
  Windows) on ``.blensor.lock`` in the folder, held for the whole run. The OS releases
  it when the process dies, even by SIGKILL, so a stale lock file never blocks a later
  run; a second live run into the same folder is refused. The lock file also holds a
  reserve of disk space (zeros after the pid) that is given back to write the final
  manifest on a full disk.
- :class:`OutputFolder`: the policy every job shares: create and lock the folder, find
  an earlier run's files (its manifest lists them), refuse the folder unless told to
  overwrite or resume (and refuse files of BlenSor's names that the earlier run did not
  list), and only then, once the new run has been validated, delete exactly the listed
  files and the folders that become empty; verify an earlier run's files (size and
  sha256 from its manifest) before a resume trusts them; and the manifest's schedule
  (:meth:`OutputFolder.manifest_due`: O(log n) rewrites over a run by packets and by
  time, so the bytes of all its rewrites add up to a small multiple of the last one).
- :class:`ManifestText`: a manifest's JSON, each packet's entry encoded once.
- :func:`read_regular`: reads a file BlenSor expects (``manifest.json``,
  ``motion.json``) only if it is a regular file: a FIFO, device, folder or symlink there
  is refused instead of blocking the run.
- :func:`stale_parts`: temporary files of a killed run (``.<name>.<pid>.<hex>.part``).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from time import monotonic
from typing import Any, TypeAlias, TypedDict

from ..core.errors import OutputError, SettingsError
from .atomic import PART_SUFFIX, StrPath, remove_quietly

LOCK_NAME = ".blensor.lock"
_PART = re.compile(r"^\..+\.\d+\.[0-9a-f]{16}" + re.escape(PART_SUFFIX) + "$")
#: subfolder depth searched for earlier outputs (``clean/``, ``velodyne/``, a bag folder)
_DEPTH = 2
#: largest manifest read (bytes; a larger one is refused unread): a run of 10^6 packets
#: lists about 200 MB
MANIFEST_MAX_BYTES = 1 << 28


class ManifestText:
    """The bytes of a manifest, ``json.dumps(doc, indent=2, sort_keys=True) + "\n"``
    byte for byte, whose list ``frames`` grows by one entry per finished packet: each
    entry is encoded once, when it is added (:meth:`add`), and a rewrite joins their
    texts (JSON's indentation depends only on the depth, so an entry's text is the same
    in every rewrite) instead of encoding every entry again with ``json``'s pure-Python
    indenting encoder. The other fields are encoded at each rewrite; a field whose
    value equals the one of the last rewrite (the object table: compared with a copy
    of its list and of the dicts in it) keeps its text. An entry changed after
    :meth:`add` is written as it was then."""

    _KEY = "frames"

    def __init__(self) -> None:
        self.frames: list[str] = []
        self._kept: dict[str, tuple[Any, str]] = {}  # field -> (its value, its text) at the last rewrite

    def add(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` (a JSON-ready dict) to the list ``frames``."""
        import json
        self.frames.append("    " + json.dumps(entry, indent=2, sort_keys=True).replace("\n", "\n    "))

    def encode(self, doc: dict[str, Any], big: Iterable[str] = ("objects",)) -> bytes:
        """The manifest ``doc`` (a JSON-ready dict whose ``frames`` are the entries
        added so far) as bytes; ``big``: fields whose text is kept while their value
        stays equal.

        Raises:
            ValueError: ``doc["frames"]`` does not hold as many entries as were added.
        """
        import json
        if len(doc.get(self._KEY, ())) != len(self.frames):
            raise ValueError(f"the manifest lists {len(doc.get(self._KEY, ()))} frames, "
                             f"{len(self.frames)} were added")
        texts: dict[str, str] = {}
        for key in big:
            if key in doc and key != self._KEY:
                kept = self._kept.get(key)
                if kept is None or kept[0] != doc[key]:
                    value = doc[key]
                    copy = ([dict(x) if isinstance(x, dict) else x for x in value] if isinstance(value, list)
                            else value)  # (a list changed in place later differs from it)
                    kept = (copy, json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  "))
                    self._kept[key] = kept
                texts[key] = kept[1]
        if self.frames:
            texts[self._KEY] = "[\n" + ",\n".join(self.frames) + "\n  ]"
        # each long field as an empty list, then its text put in: a top-level key is the
        # only one indented by two spaces (a string holds no raw newline)
        text = json.dumps({**doc, **{k: [] for k in texts}}, indent=2, sort_keys=True)
        for key, value in texts.items():
            marker = "\n  " + json.dumps(key) + ": []"
            at = text.index(marker) + len(marker) - 2
            text = text[:at] + value + text[at + 2:]
        return (text + "\n").encode()


class PatternListing(TypedDict):
    """An earlier run's files when its manifest does not list them all: ``files`` the
    relative paths it lists, ``pattern`` regular expressions of relative paths of which
    every match in the folder counts as the run's too."""

    files: set[str]
    pattern: list[str]


#: what a manifest says its run wrote (:class:`OutputFolder`'s ``listed``): the relative
#: paths, a :class:`PatternListing`, or None when the manifest does not say
Listing: TypeAlias = "set[str] | PatternListing | None"


def _components(pattern: str) -> list[str] | None:
    """The path components of the regular expression ``pattern`` of a relative path: it
    split at each ``/`` outside a group or a character class (``(clean|noisy)/scan\\d+``
    -> ``["(clean|noisy)", "scan\\d+"]``); None when a ``/`` sits inside a group."""
    parts: list[str] = []
    cur, depth, in_class, escaped = "", 0, False, False
    for ch in pattern:
        if escaped or ch == "\\":
            escaped = not escaped and ch == "\\"
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "/":
            if depth:
                return None
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return parts + [cur]


def _entries(folder: StrPath,
             patterns: Iterable[str] | None = None) -> Iterator[tuple[os.DirEntry[str], str]]:
    """Yield (``os.DirEntry``, relative POSIX path) of everything in ``folder`` and in the
    subfolders an output of ``patterns`` (regular expressions of relative paths) can sit
    in, at most :data:`_DEPTH` below: a subfolder is listed only if the components of
    some pattern match its path (``velodyne/`` for ``velodyne/\\d{6}\\.bin``), so a folder
    holding other files (200,000 images four levels down, or ``/proc`` below ``/``) costs
    one listing of the folder. ``patterns`` None (or a pattern with a ``/`` inside a
    group): every subfolder to that depth. Symlinks are never followed; a folder that
    cannot be listed is skipped."""
    layout: list[list[re.Pattern[str]] | None] = []
    for p in patterns if patterns is not None else [None]:
        parts = _components(p) if p is not None else None
        layout.append(None if parts is None else [re.compile(c) for c in parts])

    def may_hold(comps: list[str]) -> bool:
        return len(comps) <= _DEPTH and any(
            parts is None or (len(parts) > len(comps) and all(r.fullmatch(c) for r, c in zip(parts, comps)))
            for parts in layout)

    todo: list[tuple[str, list[str]]] = [(os.fspath(folder), [])]
    while todo:
        d, comps = todo.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            rel = comps + [e.name]
            yield e, "/".join(rel)
            try:
                sub = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if sub and may_hold(rel):
                todo.append((e.path, rel))


def _regular(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_file(follow_symlinks=False)
    except OSError:
        return False


def files_matching(folder: StrPath, patterns: Iterable[str]) -> list[Path]:
    """Regular files (not links) in ``folder`` (and the subfolders the patterns name, at
    most :data:`_DEPTH` deep: :func:`_entries`) whose path relative to it fully matches
    one of the regular expressions ``patterns``, sorted."""
    patterns = list(patterns)
    pat = re.compile("^(" + "|".join(patterns) + ")$")
    return sorted(Path(e.path) for e, rel in _entries(folder, patterns) if pat.match(rel) and _regular(e))


def nodes_matching(folder: StrPath, patterns: Iterable[str]) -> list[tuple[Path, str]]:
    """What sits in ``folder`` (and its subfolders, as deep as :func:`files_matching`
    looks) at a relative path that fully matches one of the regular expressions
    ``patterns`` and is not a regular file: (path, kind) pairs, sorted, ``kind`` as
    :func:`~.atomic.kind_of` says (a FIFO, a device, a socket, a folder, a symbolic
    link). Symlinks are not followed; only the subfolders the patterns name are listed
    (:func:`_entries`)."""
    from .atomic import kind_of
    patterns = list(patterns)
    pat = re.compile("^(" + "|".join(patterns) + ")$")
    out = []
    for e, rel in _entries(folder, patterns):
        if not pat.match(rel):
            continue
        try:
            mode = e.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            out.append((Path(e.path), kind_of(mode)))
    return sorted(out)


def stale_parts(folder: StrPath, patterns: Iterable[str] | None = None) -> list[Path]:
    """Temporary files and folders (a bag being written) BlenSor left in ``folder`` (a
    run killed by SIGKILL), sorted; looked for beside the outputs of ``patterns`` (every
    subfolder :data:`_DEPTH` deep where None: :func:`_entries`)."""
    found = [(Path(e.path), rel, e) for e, rel in _entries(folder, patterns) if _PART.match(e.name)]
    dirs = [p for p, rel, e in found if "/" not in rel and e.is_dir(follow_symlinks=False)]
    return sorted([p for p, _, e in found if _regular(e) and not any(d in p.parents for d in dirs)] + dirs)


class FolderLock:
    """Exclusive advisory lock on ``folder/.blensor.lock``, holding the pid of its run.

    The lock is taken on the open file; a run that opened the file just before its holder
    removed it would lock a deleted file, so the lock counts only if the file at the path
    is still the one locked (checked after locking; otherwise taken again).

    Raises (constructor):
        SettingsError (``out``): another live run holds the lock (its pid is named), or
            a symlink sits at the lock's name (never followed).
        OutputError: the lock file cannot be created or written (disk full,
            permissions); nothing is left.
    """

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_NAME
        self._fd = None
        symlink = SettingsError("out", f"a folder without a symlink at {LOCK_NAME} (never followed)",
                                str(folder))
        for _ in range(100):  # another run removing its lock meanwhile: try again
            if not hasattr(os, "O_NOFOLLOW") and self.path.is_symlink():  # Windows: no O_NOFOLLOW
                raise symlink
            self._refuse_node(symlink)  # a FIFO or device there is neither opened nor removed
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_NONBLOCK", 0), 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP or self.path.is_symlink():
                    raise symlink from None
                raise OutputError(exc.errno, f"cannot create the lock file ({exc.strerror})",
                                  str(self.path)) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # put there since the check: left as it is
                os.close(fd)
                self._refuse_node(symlink)
            try:
                if sys.platform == "win32":
                    import msvcrt
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                else:
                    import fcntl
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    holder = (os.pread(fd, 64, 0).split(b"\0")[0].decode(errors="replace").strip()
                              if hasattr(os, "pread") else "?")
                finally:
                    os.close(fd)
                raise SettingsError("out", "a folder no other BlenSor run is writing to",
                                    f"{folder} (in use by process {holder or '?'})") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
            except OSError:  # removed meanwhile
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise SettingsError("out", "a folder no other BlenSor run is writing to",
                                f"{folder} (its lock file keeps being replaced)")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:  # a full disk: leave no lock file behind
            _unlink_and_close(self.path, fd)
            raise OutputError(exc.errno, f"cannot write the lock file ({exc.strerror})",
                              str(self.path)) from None
        self._fd = fd
        self._pid_bytes = len(str(os.getpid()))
        self.reserved = 0

    def _refuse_node(self, symlink: SettingsError) -> None:
        """Raise ``symlink`` for a symlink at the lock's path, a SettingsError (``out``)
        for anything else that is not a regular file (a FIFO, device, socket, folder)."""
        from .atomic import kind_of
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise symlink
        if not stat.S_ISREG(mode):
            raise SettingsError("out", f"a folder whose {LOCK_NAME} is a regular file or missing (never a "
                                "FIFO, device, socket, folder or link)", f"{self.path} ({kind_of(mode)})")

    def reserve(self, nbytes: int) -> bool:
        """Grow the lock file to hold ``nbytes`` of disk space after the pid (never
        shrinks it): a reserve that :meth:`free_reserve` gives back when the disk is full.
        Returns False where the space is not there (the reserve stays as it was)."""
        if self._fd is None or nbytes <= self.reserved:
            return True
        try:
            if hasattr(os, "posix_fallocate"):  # Linux, FreeBSD: blocks without writing them
                os.posix_fallocate(self._fd, self._pid_bytes, nbytes)
            else:  # macOS, Windows: zeros written after the pid
                os.lseek(self._fd, self._pid_bytes + self.reserved, os.SEEK_SET)
                left = nbytes - self.reserved
                while left > 0:
                    left -= os.write(self._fd, b"\0" * min(left, 1 << 20))
        except OSError:
            return False
        self.reserved = nbytes
        return True

    def free_reserve(self) -> bool:
        """Give the reserve back to the file system (the lock file keeps the pid).
        Returns whether there was one."""
        if self._fd is None or not self.reserved:
            return False
        try:
            os.ftruncate(self._fd, self._pid_bytes)
        except OSError:
            return False
        self.reserved = 0
        return True

    def release(self) -> None:
        """Remove the lock file and release the lock (idempotent)."""
        if self._fd is None:
            return
        _unlink_and_close(self.path, self._fd)
        self._fd = None


def _unlink_and_close(path: Path, fd: int) -> None:
    """Remove the lock file and close it: on POSIX removed while still locked (no other
    run can lock the file in between), on Windows closed first (an open file cannot be
    deleted there)."""
    if sys.platform == "win32":
        os.close(fd)
        remove_quietly(path)
    else:
        remove_quietly(path)
        os.close(fd)


def read_regular(path: StrPath, setting: str = "out", max_bytes: int | None = None) -> bytes | None:
    """The bytes of the file at ``path``, or None when nothing is there. Only a regular
    file is read: checked with ``lstat`` first and opened with ``O_NONBLOCK`` and
    ``O_NOFOLLOW`` (a FIFO put there meanwhile cannot block the run). With ``max_bytes``,
    at most ``max_bytes + 1`` bytes are read (a longer file is known to be too long
    without holding it in memory).

    Raises:
        SettingsError (``setting``): a FIFO, device, socket, folder or symlink at
            ``path`` (named), or a file that cannot be read.
    """
    import stat
    path = Path(path)
    refuse = SettingsError(setting, f"a folder whose {path.name} is a regular file (BlenSor never reads a "
                           "FIFO, device, folder or link there)", str(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(setting, f"a folder whose {path.name} is readable", f"{path} ({exc.strerror})") \
            from None
    if not stat.S_ISREG(st.st_mode):
        raise refuse
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise refuse from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse
        chunks, left = [], (max_bytes + 1 if max_bytes is not None else None)
        while left is None or left > 0:
            b = os.read(fd, 1 << 20 if left is None else min(1 << 20, left))
            if not b:
                break
            chunks.append(b)
            if left is not None:
                left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_manifest(path: StrPath, setting: str = "out") -> dict[str, Any] | None:
    """The BlenSor manifest at ``path`` (a JSON object with ``blensor_version``: a range
    scan's ``manifest.json``, a motion export's ``motion.json``), or None when there is
    none (no file, not JSON, not BlenSor's).

    Raises:
        SettingsError (``setting``): something other than a regular file there
            (:func:`read_regular`).
        SettingsError (``PATH line L column C``): JSON nested deeper, or an integer
            longer, than :func:`~.safeload.load_json` reads (a planted file must not crash
            the decoder).
        SettingsError (``PATH``): a file larger than :data:`MANIFEST_MAX_BYTES` (refused
            after reading that many bytes, not the whole file).
    """
    from .safeload import load_json
    data = read_regular(path, setting, max_bytes=MANIFEST_MAX_BYTES)
    if data is None:
        return None
    try:
        if len(data) > MANIFEST_MAX_BYTES:
            raise SettingsError(str(path), f"a manifest of at most {MANIFEST_MAX_BYTES >> 20} MiB",
                                f"more than {MANIFEST_MAX_BYTES:,} bytes")
        man = load_json(data.decode("utf-8"), str(path), max_bytes=MANIFEST_MAX_BYTES)
    except SettingsError:
        raise
    except ValueError:  # (not UTF-8, not JSON)
        return None
    return man if isinstance(man, dict) and "blensor_version" in man else None


def file_record(data: bytes) -> dict[str, Any]:
    """What a manifest keeps of a finished file to verify it later: ``{"size": bytes,
    "sha256": hex}``."""
    import hashlib
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def verify_file(path: StrPath, record: object) -> bool:
    """Whether ``path`` is a regular file (not a link) of the size and sha256 in
    ``record`` (:func:`file_record`); False for a missing or malformed record."""
    import hashlib
    import stat
    if not isinstance(record, dict) or not isinstance(record.get("size"), int):
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != record["size"]:
            return False
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return False
    return h.hexdigest() == record.get("sha256")


def range_run_files(man: dict[str, Any]) -> Listing:
    """Relative paths of the files the range scan of manifest ``man`` wrote: its frames'
    files, its run-level files (``files``: multi-frame files such as ``scan.evd``), the
    manifest and the trajectory. A run that did not end (``status`` running: killed)
    may have finished frames its last manifest does not list yet (it is rewritten
    O(log n) times: :meth:`OutputFolder.manifest_due`), so for it (and for manifests
    without a ``files`` list, written before it existed) every file of its formats'
    names counts as its own. None for a manifest without a formats list."""
    from .formats import output_patterns
    formats = man.get("formats")
    if not isinstance(formats, list):
        return None
    out = {"manifest.json", "trajectory.tum"}
    for e in man.get("frames") or []:
        if isinstance(e, dict):
            out.update(f for f in e.get("files") or [] if isinstance(f, str))
    run_files = man.get("files")
    if isinstance(run_files, list):
        out.update(f for f in run_files if isinstance(f, str))
    if man.get("status") == "running" or not isinstance(run_files, list):
        return {"pattern": output_patterns([f for f in formats if isinstance(f, str)]), "files": out}
    return out


#: the operating system's folders (POSIX; macOS's under /private and its own): no output
#: folder is made in them or below them, but in their temporary folders
#: (:data:`TEMPORARY_FOLDERS`, the platform's :func:`tempfile.gettempdir`)
SYSTEM_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                  "/sbin", "/sys", "/usr", "/System", "/Library", "/private/etc")
#: folders that are the system's themselves and in their direct subfolders (``/var/log``,
#: ``/run/user``) but hold users' folders deeper down: ``/var/home/NAME`` (the home folders
#: of Fedora Silverblue), ``/run/media/NAME/DRIVE`` (removable drives), ``/var/lib/jenkins/...``
SHALLOW_SYSTEM_FOLDERS = ("/var", "/run", "/private/var")
TEMPORARY_FOLDERS = ("/var/tmp", "/dev/shm")


def system_folder(path: Path) -> str | None:
    """The operating system's folder that ``path`` is or lies in, or None: the root of a
    file system or a drive (``/``, ``C:\\``), a folder of :data:`SYSTEM_FOLDERS` (on
    Windows: ``%SystemRoot%``, ``%ProgramFiles%``, ``%ProgramFiles(x86)%``) or anything
    below one, a folder of :data:`SHALLOW_SYSTEM_FOLDERS` or one of its direct subfolders,
    but not what lies in a temporary folder (:data:`TEMPORARY_FOLDERS`, the platform's
    :func:`tempfile.gettempdir`). The rule is applied to the path with every
    symlink resolved (``os.path.realpath``: a link to ``/etc`` is ``/etc``), and the
    folder need not exist."""
    import tempfile
    real = Path(os.path.realpath(os.path.abspath(path)))
    if real.parent == real:
        return str(real)
    if sys.platform == "win32":
        system = [os.environ.get(k) for k in ("SystemRoot", "ProgramFiles", "ProgramFiles(x86)")]
    else:
        system = list(SYSTEM_FOLDERS)
    temporary = [Path(os.path.realpath(t)) for t in (*TEMPORARY_FOLDERS, tempfile.gettempdir())]
    if any(real == t or t in real.parents for t in temporary):
        return None
    for d in filter(None, system):
        for root in {Path(d), Path(os.path.realpath(d))}:
            if real == root or root in real.parents:
                return str(root)
    if sys.platform != "win32":
        for d in SHALLOW_SYSTEM_FOLDERS:
            for root in {Path(d), Path(os.path.realpath(d))}:
                if real == root or real.parent == root:
                    return str(real)
    return None


def _inside(name: object) -> bool:
    """Whether ``name`` (a manifest's entry) is a relative path inside the folder: a str
    of components none of which is empty, ``.`` or ``..``, with no drive, root or
    backslash."""
    return (isinstance(name, str) and bool(name) and "\\" not in name and ":" not in name
            and not name.startswith("/") and all(c not in ("", ".", "..") for c in name.split("/")))


def _holds(folder: Path, files: list[Path]) -> str:
    return (f"{folder} (holds {files[0].relative_to(folder).as_posix()}"
            f"{' and more' if len(files) > 1 else ''}")


class OutputFolder:
    """The output folder of one job, with the policy every job shares.

    Use: :meth:`open` (create the folder if missing and lock it; nothing else is
    touched), :meth:`check` (find an earlier run's files and refuse the folder, deleting
    nothing), validate everything else of the run, then :meth:`prepare` (delete what
    ``overwrite`` replaces, exactly the files the earlier manifest lists, and the
    folders that become empty), and :meth:`release` at the end.

    Args:
        path: the folder. manifest: the manifest's file name (``manifest.json``,
        ``motion.json``). patterns: regular expressions of every relative path such a
        job may leave (an earlier run's files are recognised by them). listed: function
        manifest dict -> the set of relative paths its run wrote, or a dict
        ``{"files": set, "pattern": [regex, ...]}`` when every file matching the patterns
        counts too, or None when the manifest does not say. what: ``"run"`` or
        ``"export"``, for messages.

    Attributes:
        path (Path), created (bool: this job made the folder), earlier (dict | None: the
        earlier manifest), lock (:class:`FolderLock` | None).
    """

    #: the manifest is rewritten once the entries since its last write reach 1/this
    #: of those done, or the time since its last write MANIFEST_SECONDS and 1/this of
    #: the time since its first (see :meth:`manifest_due`)
    MANIFEST_SHARE = 16
    MANIFEST_SECONDS = 5.0
    #: disk space kept in the lock file for the final manifest: this much plus twice the
    #: manifest's size
    RESERVE_BYTES = 64 * 1024

    def __init__(self, path: StrPath, *, manifest: str, patterns: Iterable[str],
                 listed: Callable[[dict[str, Any]], Listing], what: str = "run") -> None:
        self.path = Path(path)
        self.manifest_name = manifest
        self.patterns = list(patterns)
        self._listed = listed
        self.what = what
        self.created = False
        self.lock: FolderLock | None = None
        self.earlier: dict[str, Any] | None = None
        self._delete: list[Path] = []
        self._manifest_at, self._manifest_time = 0, 0.0
        self._manifest_start: float | None = None  # the clock at the first manifest write
        self.manifest_writes = 0
        #: the schedule's clock (s): time.monotonic
        self.clock = monotonic

    # -- set-up -----------------------------------------------------------------------

    def open(self, lock: bool = True) -> "OutputFolder":
        """Create the folder if missing, check it is writable and lock it.

        Raises:
            SettingsError (``out``): the operating system's folder or one in it
                (:func:`system_folder`: nothing is made there), not creatable, not a
                folder, not writable, or in use.
            OutputError: the lock file cannot be written (full disk); nothing is left.
        """
        if system_folder(self.path) is not None:
            names = ("a drive's root, the Windows folder, Program Files" if sys.platform == "win32" else
                     "the root /, /bin, /boot, /dev, /etc, /lib*, /proc, /sbin, /sys, /usr, macOS's /System, "
                     "/Library, /private/etc and what lies in them; /var, /run, /private/var and their "
                     "direct subfolders")
            raise SettingsError("out", f"a folder outside the operating system's folders ({names}; "
                                "temporary folders such as /var/tmp are allowed)", str(self.path))
        self.created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SettingsError("out", "a writable folder", f"{self.path} ({exc.strerror})") from None
        if not self.path.is_dir() or not os.access(self.path, os.W_OK | os.X_OK):
            raise SettingsError("out", "a writable folder", str(self.path))
        if lock:
            try:
                self.lock = FolderLock(self.path)
                if not self.lock.reserve(self.RESERVE_BYTES):
                    raise OutputError(errno.ENOSPC, "cannot write the lock file (No space left on device)",
                                      str(self.lock.path))
            except BaseException:
                self.release()
                raise
        return self

    def existing(self) -> list[Path]:
        """Files in the folder (and subfolders) matching :attr:`patterns`, sorted."""
        return files_matching(self.path, self.patterns)

    def check(self, *, overwrite: bool, resume: bool, resumable: bool = True) -> None:
        """Refuse the folder if it holds an earlier run's files and neither ``overwrite``
        nor ``resume`` is given, or, with ``overwrite``, files of BlenSor's names that the
        earlier run did not list (never deleted). Deletes nothing: :meth:`prepare` does,
        once the run has been validated. Reads the earlier manifest (:attr:`earlier`).
        ``resumable``: whether the job takes ``resume`` (a depth export does not), for
        the refusal's hint.

        Raises:
            SettingsError (``out``): as above; or (``out``) with ``overwrite`` or
            ``resume``, a manifest listing a path outside the folder (absolute, or with
            ``..``: never touched); or (``out``) a manifest that is not a
            regular file (a FIFO is never opened); or something other than a regular
            file (a FIFO, device, socket, folder, symlink) at a path of BlenSor's names
            (:func:`nodes_matching`: the run would rename its file over it).
        """
        self.earlier = read_manifest(self.path / self.manifest_name)
        nodes = nodes_matching(self.path, self.patterns + [re.escape(self.manifest_name)])
        if nodes:
            raise SettingsError("out", "a folder whose files of BlenSor's names are regular files (BlenSor "
                                "replaces no FIFO, device, socket, folder or link there)",
                                f"{nodes[0][0]} ({nodes[0][1]})")
        old = self.existing()
        if not (self.path / self.manifest_name).exists() and not old:
            return
        if old and not (overwrite or resume):
            if self.what == "run":
                allowed = ("an empty folder or one without BlenSor output (use --overwrite, or Overwrite in "
                           "the panel, to replace the earlier run's files"
                           + ("; --resume to continue it)" if resumable else ")"))
            else:
                allowed = (f"a folder without earlier motion files (use --overwrite, or Overwrite in the "
                           f"panel, to replace the earlier {self.what}'s files)")
            raise SettingsError("out", allowed, _holds(self.path, old) + ")")
        if not (overwrite or resume):
            return
        listed = self._listed(self.earlier) if self.earlier is not None else None
        if isinstance(listed, dict):
            pat = re.compile("^(" + "|".join(listed["pattern"]) + ")$")
            names = set(listed["files"]) | {p.relative_to(self.path).as_posix() for p in old
                                            if pat.match(p.relative_to(self.path).as_posix())}
        else:
            names = set(listed or ())
        outside = sorted(str(n) for n in names if not _inside(n))
        if outside:  # an edited manifest: nothing outside the folder is ever touched
            raise SettingsError("out", f"a folder whose {self.manifest_name} lists only files inside it "
                                "(--overwrite never deletes anything else; choose another folder)",
                                f"{self.path} (its {self.manifest_name} lists {outside[0]})")
        if resume:
            return
        foreign = [p for p in old if p.relative_to(self.path).as_posix() not in names]
        if foreign:
            raise SettingsError("out", f"a folder whose files of BlenSor's names are an earlier BlenSor "
                                f"{self.what}'s (--overwrite deletes only what the {self.what} in its "
                                f"{self.manifest_name} wrote; choose another folder)",
                                _holds(self.path, foreign) + ", not written by "
                                + (f"the {self.what} of its {self.manifest_name})" if self.earlier is not None
                                   else f"a BlenSor {self.what}: no BlenSor {self.manifest_name})"))
        self._delete = sorted(p for p in (self.path / n for n in names)
                              if p.is_file() and not p.is_symlink())

    def prepare(self, keep: Iterable[str] = ()) -> list[str]:
        """Delete what :meth:`check` found to overwrite (exactly the files the earlier
        manifest lists, but those in ``keep``: relative paths the new run has rewritten
        already), then the folders that deletion left empty, and stale temporary files of
        a killed run. Returns the relative paths deleted."""
        keep = set(keep)
        gone = self._remove([p for p in self._delete if p.relative_to(self.path).as_posix() not in keep])
        self._delete = []
        for p in stale_parts(self.path, self.patterns):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                remove_quietly(p)
        return gone

    def remove_listed(self, names: Iterable[str]) -> list[str]:
        """Delete the files ``names`` (relative paths; an earlier run's, listed in its
        manifest) and the folders that become empty. Returns those deleted."""
        return self._remove([self.path / n for n in sorted(set(names))])

    def _remove(self, paths: Iterable[Path]) -> list[str]:
        gone: list[str] = []
        parents: set[Path] = set()
        root = self.path.resolve()
        for p in paths:
            try:
                if p.is_symlink() or not p.is_file() or root not in p.resolve().parents:
                    continue
                p.unlink()
            except OSError:
                continue
            gone.append(p.relative_to(self.path).as_posix())
            parents.add(p.parent)
        for d in sorted(parents, key=lambda d: -len(d.parts)):  # the deepest first
            while d != self.path and self.path in d.parents:
                try:
                    d.rmdir()  # only if empty
                except OSError:
                    break
                d = d.parent
        return gone

    # -- the manifest -----------------------------------------------------------------

    def manifest_due(self, done: int, now: float | None = None) -> bool:
        """Whether the manifest is rewritten after entry number ``done``: when the
        entries since its last write (:meth:`write_manifest`) reach 1/:attr:`MANIFEST_SHARE`
        of those done (so after every entry while fewer than 32 are done), or the time
        since its last write reaches :attr:`MANIFEST_SECONDS` and 1/:attr:`MANIFEST_SHARE`
        of the time since its first. The manifest lists every entry, so rewriting it
        after each one costs O(n^2) over a run: 6,000 sweeps would write 24 GB of JSON
        (190 ms a frame at the end), and so would a rewrite every 5 s in a long run
        (10 minutes at 10 sweeps/s: 120 rewrites of up to 15 MB). Both rules space the
        rewrites geometrically, so a run rewrites it O(log n) times and the bytes of
        all rewrites add up to a small multiple of the final manifest's; a killed run
        loses at most 1/16 of its frames, and of its time (5 s in its first 80 s), to
        ``resume`` (rescanned to the same bytes). The final manifest is the same."""
        now = self.clock() if now is None else now
        start = self._manifest_time if self._manifest_start is None else self._manifest_start
        return (done - self._manifest_at >= max(1, done // self.MANIFEST_SHARE)
                or now - self._manifest_time >= max(self.MANIFEST_SECONDS,
                                                    (now - start) / self.MANIFEST_SHARE))

    def write_manifest(self, doc: dict[str, Any] | bytes, done: int, final: bool = False) -> Path:
        """Write the manifest ``doc`` (a dict written as JSON, or the bytes of it:
        :class:`ManifestText`) atomically; ``done``: the entries it lists (the schedule
        of :meth:`manifest_due` counts from here). The lock file's reserve
        grows to twice the manifest's size; a ``final`` write that finds the disk full
        gives the reserve back and tries once more, so a failed run's manifest can say
        ``failed``.

        Raises:
            OSError: the manifest could not be written (the last one stays).
        """
        import json

        from . import atomic
        path = self.path / self.manifest_name
        data = doc if isinstance(doc, bytes) else (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
        try:
            atomic.atomic_write_bytes(path, data)
        except OSError as exc:
            if not (final and exc.errno in (errno.ENOSPC, errno.EDQUOT) and self.lock is not None
                    and self.lock.free_reserve()):
                raise
            atomic.atomic_write_bytes(path, data)
        self._manifest_at, self._manifest_time = done, self.clock()
        if self._manifest_start is None:
            self._manifest_start = self._manifest_time
        self.manifest_writes += 1
        if self.lock is not None and not final:
            self.lock.reserve(self.RESERVE_BYTES + 2 * len(data))
        return path

    # -- the end ----------------------------------------------------------------------

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def remove_if_created_and_empty(self) -> None:
        """Remove the folder if this job made it and it is empty (else keep it)."""
        if self.created:
            try:
                self.path.rmdir()  # only if empty
            except OSError:
                pass
