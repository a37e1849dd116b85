"""Batch ray casting: one interface, two backends (native library, BVHTree fallback).

Owns choosing a backend (:func:`get_backend`, the process-wide :func:`shared_backend`)
and re-exports the interface (:mod:`.base`) and mirror tracing (:mod:`.trace`).
"""
from __future__ import annotations

import atexit

from ..core.errors import NativeLibraryError, SettingsError
from .base import Backend, ClosestHits, MeshData, SceneGeometry
from .trace import TraceResult, trace

BACKENDS = ("auto", "native", "bvhtree")
_warned = False


def get_backend(name: str = "auto", threads: int | None = None) -> Backend:
    """Create a ray-cast backend.

    Args:
        name: ``"native"`` (the C library; error if it cannot load), ``"bvhtree"``
            (Blender's BVHTree) or ``"auto"`` (native if it loads, else BVHTree with a
            one-time warning on stderr).
        threads: native worker threads (default: all cores).
    Raises:
        SettingsError: unknown name. NativeLibraryError: ``native`` unavailable.
    """
    global _warned
    if name not in BACKENDS:
        raise SettingsError("backend", "one of " + ", ".join(BACKENDS), name)
    if name in ("auto", "native"):
        from .native import NativeBackend
        try:
            return NativeBackend(threads)
        except NativeLibraryError as exc:
            if name == "native":
                raise
            if not _warned:
                import sys
                print(f"blensor: {exc}; using the slower BVHTree fallback", file=sys.stderr)
                _warned = True
    from .bvhtree import BVHTreeBackend
    return BVHTreeBackend()


_shared: dict[tuple[str, int | None], Backend] = {}


def shared_backend(name: str = "auto", threads: int | None = None) -> Backend:
    """A backend kept between calls (one per ``(name, threads)``), so repeated single
    scans of an unchanged scene reuse every mesh BVH (they are cached by content). Its
    memory is bounded by the last scene scanned: meshes that the next geometry does not
    use are freed by ``set_geometry``, and :func:`release_shared` (called when a file is
    loaded and when the add-on is unregistered) frees everything.

    Raises:
        SettingsError, NativeLibraryError: as :func:`get_backend`.
    """
    key = (name, threads)
    backend = _shared.get(key)
    if backend is None:
        if not _shared:
            atexit.register(release_shared)  # free native memory before ctypes goes away
        backend = _shared[key] = get_backend(name, threads)
    return backend


def release_shared() -> None:
    """Free the backends of :func:`shared_backend` (idempotent)."""
    while _shared:
        _shared.popitem()[1].close()


__all__ = ["shared_backend", "release_shared", "Backend", "ClosestHits", "MeshData", "SceneGeometry", "TraceResult",
           "trace", "get_backend", "BACKENDS"]
