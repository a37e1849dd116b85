"""Write files so that a reader never sees a half-written one: write to a temporary
name in the same folder, flush, then rename over the target (atomic on POSIX and on
Windows via ``os.replace``)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def temp_name(path: Path) -> Path:
    """Temporary sibling of ``path`` (same folder, so the rename stays on one file system)."""
    return path.with_name(f".{path.name}.part")


@contextmanager
def atomic_open(path, mode: str = "wb"):
    """Open a temporary sibling for writing; on success rename it to ``path``, on an
    exception remove it and re-raise. Yields the open file."""
    path = Path(path)
    tmp = temp_name(path)
    f = open(tmp, mode)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
