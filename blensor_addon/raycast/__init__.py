"""Batch ray casting: one interface, two backends (native library, BVHTree fallback)."""
from __future__ import annotations

from ..core.errors import NativeLibraryError, SettingsError
from .base import Backend, Hits, MeshData, SceneGeometry
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


__all__ = ["Backend", "Hits", "MeshData", "SceneGeometry", "TraceResult", "trace", "get_backend",
           "BACKENDS"]
