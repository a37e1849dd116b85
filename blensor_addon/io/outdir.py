"""The output folder of a range scan: one run at a time, no mixing with an old run.

- :class:`FolderLock`: an advisory lock (``flock`` on POSIX, ``msvcrt.locking`` on
  Windows) on ``.blensor.lock`` in the folder, held for the whole run. The OS releases
  it when the process dies, even by SIGKILL, so a stale lock file never blocks a later
  run; a second live run into the same folder is refused.
- :func:`previous_outputs`: files a range scan leaves (``manifest.json`` and what the
  formats of the registry declare, :func:`blensor_addon.io.formats.output_patterns`, in
  the folder and its subfolders); a folder holding them is refused unless the user asks
  to overwrite or resume. A motion export checks its own files (:func:`files_matching`
  with its patterns): motion data may go beside the scan it describes, and a scan
  beside motion data.
- :func:`stale_parts`: temporary files of a killed run (``.<name>.<pid>.<hex>.part``).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from pathlib import Path

from ..core.errors import OutputError, SettingsError
from .atomic import PART_SUFFIX, remove_quietly

LOCK_NAME = ".blensor.lock"
_PART = re.compile(r"^\..+\.\d+\.[0-9a-f]{16}" + re.escape(PART_SUFFIX) + "$")
#: subfolder depth searched for earlier outputs (``clean/``, ``velodyne/``, a bag folder)
_DEPTH = 2


def _files(folder: Path):
    folder = Path(folder)
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if len(rel.parts) <= _DEPTH + 1 and p.is_file() and not p.is_symlink():
            yield p, rel.as_posix()


def files_matching(folder: Path, patterns) -> list[Path]:
    """Files in ``folder`` (and its subfolders) whose path relative to it fully matches
    one of the regular expressions ``patterns``, sorted."""
    pat = re.compile("^(" + "|".join(patterns) + ")$")
    return sorted(p for p, rel in _files(folder) if pat.match(rel))


def previous_outputs(folder: Path) -> list[Path]:
    """Files of an earlier range scan in ``folder`` (and its subfolders), sorted. A
    motion export's files (``blensor motion``) are not among them: motion data may sit
    beside the scan it describes."""
    from .formats import output_patterns
    return files_matching(folder, output_patterns())


def stale_parts(folder: Path) -> list[Path]:
    """Temporary files and folders (a bag being written) BlenSor left in ``folder`` (a
    run killed by SIGKILL), sorted."""
    dirs = [p for p in Path(folder).iterdir() if p.is_dir() and not p.is_symlink() and _PART.match(p.name)]
    return sorted([p for p, _ in _files(folder) if _PART.match(p.name) and not any(d in p.parents for d in dirs)]
                  + dirs)


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
        symlink = SettingsError("out", f"a folder without a symlink at {LOCK_NAME} (never followed)", str(folder))
        for _ in range(100):  # another run removing its lock meanwhile: try again
            if not hasattr(os, "O_NOFOLLOW") and self.path.is_symlink():  # Windows: no O_NOFOLLOW
                raise symlink
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP or self.path.is_symlink():
                    raise symlink from None
                raise OutputError(exc.errno, f"cannot create the lock file ({exc.strerror})",
                                  str(self.path)) from None
            try:
                if sys.platform == "win32":
                    import msvcrt
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                else:
                    import fcntl
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    holder = (os.pread(fd, 64, 0).decode(errors="replace").strip()
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


def listed_in_manifest(path: Path, key: str) -> list | None:
    """The strings of the list ``key`` in the BlenSor manifest at ``path`` (a JSON object
    with ``blensor_version``: a range scan's ``manifest.json``, a motion export's
    ``motion.json``), or None when there is none (no file, not JSON, not BlenSor's, or no
    such list)."""
    import json
    try:
        man = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or "blensor_version" not in man or not isinstance(man.get(key), list):
        return None
    return [v for v in man[key] if isinstance(v, str)]


def earlier_run_formats(folder: Path) -> list | None:
    """The formats of the BlenSor run whose ``manifest.json`` is in ``folder``, or None
    when there is none (see :func:`listed_in_manifest`)."""
    return listed_in_manifest(Path(folder) / "manifest.json", "formats")


def _holds(folder: Path, files: list) -> str:
    return (f"{folder} (holds {files[0].relative_to(folder).as_posix()}"
            f"{' and more' if len(files) > 1 else ''}")


def prepare(folder: Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse a folder holding another run's files unless ``overwrite`` (delete them)
    or ``resume`` (keep them); delete stale temporary files either way. Call with the
    folder's :class:`FolderLock` held.

    ``overwrite`` deletes only what the earlier BlenSor run wrote: the files of the
    formats its ``manifest.json`` lists. Files of BlenSor's names that no such run
    wrote (a KITTI sequence of another tool, a folder without a BlenSor manifest) are
    never deleted: the folder is refused.

    Raises:
        SettingsError (``out``): earlier outputs present and neither flag given, or
            files of BlenSor's names that the earlier run (if any) did not write.
    """
    from .formats import output_patterns
    old = previous_outputs(folder)
    if old and not (overwrite or resume):
        raise SettingsError("out", "an empty folder or one without BlenSor output (use --overwrite, or "
                            "Overwrite in the panel, to replace the earlier run's files; --resume "
                            "to continue it)", _holds(folder, old) + ")")
    if overwrite and not resume and old:
        formats = earlier_run_formats(folder)
        ours = files_matching(folder, output_patterns(formats)) if formats is not None else []
        foreign = sorted(set(old) - set(ours))
        if foreign:
            raise SettingsError("out", "a folder whose files of BlenSor's names are an earlier BlenSor run's "
                                "(--overwrite deletes only what the run in its manifest.json wrote; "
                                "choose another folder)", _holds(folder, foreign) + ", not written by "
                                + ("the run of its manifest.json)" if formats is not None
                                   else "a BlenSor run: no BlenSor manifest.json)"))
        for p in ours:
            p.unlink()
    for p in stale_parts(folder):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            remove_quietly(p)
