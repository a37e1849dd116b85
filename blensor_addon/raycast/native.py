"""ctypes binding of the native batch ray-cast library ``blensor_rt`` (native_patch/).

The library has a plain C ABI, so one build per operating system serves every Blender
version and Python ABI. It is looked for, in order, at ``$BLENSOR_NATIVE_LIB``, in
``lib/`` beside this add-on (the extension zip carries it there) and in
``build/native/`` of the source checkout that holds the add-on
(``python native_patch/build.py`` puts it there).
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import numpy as np

from ..core.errors import NativeLibraryError
from .base import Backend, Hits, SceneGeometry

API_VERSION = 1
_ADDON_DIR = Path(__file__).resolve().parent.parent

_lib = None
_load_error: str | None = None

_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)
_ERRORS = {-1: "bad argument", -2: "triangle index out of range", -3: "out of memory"}


def library_filename() -> str:
    """Name of the shared library on this operating system."""
    if sys.platform == "darwin":
        return "libblensor_rt.dylib"
    if sys.platform == "win32":
        return "blensor_rt.dll"
    return "libblensor_rt.so"


def candidate_paths() -> list[Path]:
    """Where the loader looks, in order."""
    paths = []
    env = os.environ.get("BLENSOR_NATIVE_LIB")
    if env:
        paths.append(Path(env))
    paths.append(_ADDON_DIR / "lib" / library_filename())
    paths.append(_ADDON_DIR.parent / "build" / "native" / library_filename())
    return paths


def load_library():
    """Load the library once and return the ctypes handle.

    Raises:
        NativeLibraryError: not found (lists the paths searched and the build command),
        or built for another ABI version.
    """
    global _lib, _load_error
    if _lib is not None:
        return _lib
    if _load_error is not None:
        raise NativeLibraryError(_load_error)
    tried = []
    for p in candidate_paths():
        if not p.is_file():
            tried.append(str(p))
            continue
        try:
            lib = ctypes.CDLL(str(p))
        except OSError as exc:
            tried.append(f"{p} ({exc})")
            continue
        lib.brt_api_version.restype = ctypes.c_int
        if lib.brt_api_version() != API_VERSION:
            tried.append(f"{p} (ABI version {lib.brt_api_version()}, need {API_VERSION})")
            continue
        _declare(lib)
        _lib = lib
        return lib
    _load_error = ("native ray-cast library not found; build it with "
                   "'python native_patch/build.py'. Looked at: " + "; ".join(tried))
    raise NativeLibraryError(_load_error)


def available() -> bool:
    """True if the native library loads."""
    try:
        load_library()
        return True
    except NativeLibraryError:
        return False


def _declare(lib) -> None:
    vp = ctypes.c_void_p
    lib.brt_mesh_create.argtypes = [_f32p, ctypes.c_int64, _i32p, ctypes.c_int64, ctypes.POINTER(vp)]
    lib.brt_mesh_create.restype = ctypes.c_int
    lib.brt_mesh_free.argtypes = [vp]
    lib.brt_mesh_free.restype = None
    lib.brt_mesh_node_count.argtypes = [vp]
    lib.brt_mesh_node_count.restype = ctypes.c_int64
    lib.brt_scene_create.argtypes = [ctypes.POINTER(vp), ctypes.c_int64, _i32p, _f32p, ctypes.c_int64,
                                     ctypes.POINTER(vp)]
    lib.brt_scene_create.restype = ctypes.c_int
    lib.brt_scene_free.argtypes = [vp]
    lib.brt_scene_free.restype = None
    lib.brt_intersect.argtypes = [vp, _f32p, _f32p, _f32p, ctypes.c_float, ctypes.c_int64, ctypes.c_int,
                                  _f32p, _i32p, _i32p, _f32p, _f32p]
    lib.brt_intersect.restype = ctypes.c_int


def _ptr(a: np.ndarray, t):
    return a.ctypes.data_as(t)


class _NativeMesh:
    """Owns one ``brt_mesh`` handle."""

    def __init__(self, lib, vertices: np.ndarray, triangles: np.ndarray) -> None:
        self._lib = lib
        self.handle = ctypes.c_void_p()
        v = np.ascontiguousarray(vertices, dtype=np.float32)
        t = np.ascontiguousarray(triangles, dtype=np.int32)
        rc = lib.brt_mesh_create(_ptr(v, _f32p), v.shape[0], _ptr(t, _i32p), t.shape[0],
                                 ctypes.byref(self.handle))
        if rc != 0:
            raise NativeLibraryError(f"brt_mesh_create failed: {_ERRORS.get(rc, rc)}")

    def node_count(self) -> int:
        return int(self._lib.brt_mesh_node_count(self.handle))

    def free(self) -> None:
        if self.handle:
            self._lib.brt_mesh_free(self.handle)
            self.handle = ctypes.c_void_p()

    __del__ = free


class NativeBackend(Backend):
    """Batch ray casting in the native library (two-level BVH, pthreads).

    Per-mesh BVHs are cached by :attr:`MeshData.key`: a frame in which only instance
    transforms changed rebuilds only the top level. Meshes unused by the latest
    geometry are freed.

    Args:
        threads: worker threads (1 = serial); default: ``os.cpu_count()``.
    Raises:
        NativeLibraryError: the library cannot be loaded.
    """

    name = "native"

    def __init__(self, threads: int | None = None) -> None:
        self._lib = load_library()
        self.threads = max(1, int(threads or os.cpu_count() or 1))
        self._meshes: dict[str, _NativeMesh] = {}
        self._scene = ctypes.c_void_p()
        self.blas_builds = 0  # number of per-mesh BVH builds so far (tests, benchmarks)

    def set_geometry(self, geometry: SceneGeometry) -> None:
        keys = [m.key for m in geometry.meshes]
        for m in geometry.meshes:
            if m.key not in self._meshes:
                self._meshes[m.key] = _NativeMesh(self._lib, m.vertices, m.triangles)
                self.blas_builds += 1
        for k in [k for k in self._meshes if k not in set(keys)]:
            self._meshes.pop(k).free()
        self._free_scene()
        handles = (ctypes.c_void_p * max(1, len(keys)))(*[self._meshes[k].handle.value for k in keys])
        im = np.ascontiguousarray(geometry.instance_mesh, dtype=np.int32)
        xf = np.ascontiguousarray(geometry.instance_matrix, dtype=np.float32)
        rc = self._lib.brt_scene_create(handles, len(keys), _ptr(im, _i32p), _ptr(xf, _f32p),
                                        im.shape[0], ctypes.byref(self._scene))
        if rc != 0:
            raise NativeLibraryError(f"brt_scene_create failed: {_ERRORS.get(rc, rc)}")

    def intersect(self, origins, directions, tmax) -> Hits:
        if not self._scene:
            raise NativeLibraryError("set_geometry() must be called before intersect()")
        o = np.ascontiguousarray(origins, dtype=np.float32).reshape(-1, 3)
        d = np.ascontiguousarray(directions, dtype=np.float32).reshape(-1, 3)
        n = o.shape[0]
        t = np.empty(n, np.float32)
        inst = np.empty(n, np.int32)
        prim = np.empty(n, np.int32)
        ng = np.empty((n, 3), np.float32)
        uv = np.empty((n, 2), np.float32)
        if np.ndim(tmax) == 0:
            tm_ptr, tm_default = None, float(tmax)
        else:
            tm = np.ascontiguousarray(tmax, dtype=np.float32).reshape(-1)
            tm_ptr, tm_default = _ptr(tm, _f32p), 0.0
        rc = self._lib.brt_intersect(self._scene, _ptr(o, _f32p), _ptr(d, _f32p), tm_ptr,
                                     tm_default, n, self.threads, _ptr(t, _f32p), _ptr(inst, _i32p),
                                     _ptr(prim, _i32p), _ptr(ng, _f32p), _ptr(uv, _f32p))
        if rc != 0:
            raise NativeLibraryError(f"brt_intersect failed: {_ERRORS.get(rc, rc)}")
        return Hits(t, inst, prim, ng, uv)

    def _free_scene(self) -> None:
        if self._scene:
            self._lib.brt_scene_free(self._scene)
            self._scene = ctypes.c_void_p()

    def close(self) -> None:
        self._free_scene()
        for m in self._meshes.values():
            m.free()
        self._meshes.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
