"""Input files checked before anything opens them (no bpy): reading a FIFO blocks until
someone writes to it, a device may never end, so every file BlenSor or Blender is about
to read (the .blend, its linked libraries, a calibration file, an image texture) must be
a regular file."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import SettingsError


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is no regular file is, in words: ``a folder``, ``a FIFO``,
    ``a device``, ``a socket`` or ``not a regular file``."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular_file(setting: str, path: str | os.PathLike[str],
                       what: str = "an existing .blend file") -> Path:
    """``path`` if it is a regular file (after symbolic links).

    Raises:
        SettingsError (``setting``): missing (``what``, the path), or a folder, a FIFO, a
        device or a socket (``what (a regular file)``, the path and what it is).
    """
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except (OSError, ValueError):  # (ValueError: a NUL byte in the path)
        raise SettingsError(setting, what, str(path)) from None
    if not stat.S_ISREG(mode):
        raise SettingsError(setting, f"{what} (a regular file)", f"{path} ({file_kind(mode)})")
    return p
