"""Freed memory kept for reuse while BlenSor scans (glibc, Linux).

A scan makes and drops many arrays of a few MB each (a revolution of 133k rays: ranges,
hits, normals, the per-step parts and their reordering). glibc returns freed memory at
the top of its heap to the kernel once more than its trim threshold is free, so every
scan asks for those pages again and the kernel zeroes each one on first touch. On this
2-core VM a repeated HDL-64E ``scan()`` of the demo crossing took 269k page faults in 24
scans and 0.061 s each (median); with 64 MB of heap kept at the top (``M_TOP_PAD``) it
took 43k faults and 0.045 s, at the same peak RSS (313 MB) (2026-11-24).

:func:`keep_freed_memory` sets that once per process, at the first scan. It is a
process-wide setting of the C allocator: blocks below :data:`MMAP_THRESHOLD` come from the
heap, and the process keeps up to :data:`TOP_PAD` bytes of freed heap instead of
returning them. (``M_TOP_PAD`` alone fixes glibc's mmap threshold at 128 KB, and the
writers' multi-MB buffers then faulted in fresh pages: all formats for frames 1-24 took
1.52 s, against 1.37 s without the setting and 1.16 s with both.) Nothing is done on
other platforms, with other C libraries, or when ``BLENSOR_KEEP_HEAP=0`` is set.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

#: bytes of freed memory kept at the top of the heap (glibc ``M_TOP_PAD``)
TOP_PAD = 64 << 20
#: blocks below this size come from the heap, so freed ones are reused (glibc
#: ``M_MMAP_THRESHOLD``; 32 MB is the upper limit mallopt(3) documents for 64-bit)
MMAP_THRESHOLD = 32 << 20
_M_TOP_PAD, _M_MMAP_THRESHOLD = -2, -3  # glibc malloc.h
_state: bool | None = None  # None: not tried yet; else whether the setting is in force
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Ask glibc to serve blocks below :data:`MMAP_THRESHOLD` from its heap and to keep
    :data:`TOP_PAD` bytes of freed heap for reuse (once per process); returns whether
    both settings are in force. Raises nothing: this is only a speed setting, and a scan
    goes on without it."""
    global _state
    with _lock:
        if _state is None:
            _state = _tune_heap()
        return _state


def _tune_heap() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("BLENSOR_KEEP_HEAP") == "0":
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: leave them alone
            return False
        # setting any of these ends glibc's adaptive mmap threshold (128 KB, rising as
        # mapped blocks are freed): a fixed one keeps blocks below it in the heap
        threshold: bool = libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(MMAP_THRESHOLD)) == 1
        pad: bool = libc.mallopt(ctypes.c_int(_M_TOP_PAD), ctypes.c_int(TOP_PAD)) == 1
        return threshold and pad
    except (OSError, AttributeError):
        return False
