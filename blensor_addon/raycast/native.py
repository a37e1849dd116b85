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
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from ..core.errors import NativeLibraryError
from ..core.ndtypes import F32, F64, I32, U8, Array, Bool, Floating
from .base import (Backend, ClosestHits, GeometryContent, MeshData, SceneGeometry, index_array,
                   mesh_triangles, mesh_vertices)
from .motion import regular

API_VERSION = 5
_ADDON_DIR = Path(__file__).resolve().parent.parent

_lib: ctypes.CDLL | None = None
_load_error: str | None = None

_f32p = ctypes.POINTER(ctypes.c_float)
_f64p = ctypes.POINTER(ctypes.c_double)
_i32p = ctypes.POINTER(ctypes.c_int32)
_u8p = ctypes.POINTER(ctypes.c_uint8)
_ERRORS = {-1: "bad argument", -2: "triangle index out of range", -3: "out of memory"}

if TYPE_CHECKING:
    _F32P = ctypes._Pointer[ctypes.c_float]
    _F64P = ctypes._Pointer[ctypes.c_double]
    _I32P = ctypes._Pointer[ctypes.c_int32]
    _U8P = ctypes._Pointer[ctypes.c_uint8]


class _Api(Protocol):
    """The functions of ``blensor_rt`` this module calls, as :func:`_declare` declares
    them to ctypes (``argtypes``/``restype``; native_patch/src/blensor_rt.h): what each
    takes and returns on the Python side. ``int64_t``/``int`` counts are Python ints,
    ``brt_mesh **``/``brt_scene **`` outputs ``ctypes.byref`` of a ``c_void_p``."""

    def brt_api_version(self) -> int: ...

    def brt_kernel(self) -> bytes: ...

    def brt_bundle_recasts(self) -> int: ...

    def brt_crash_message(self, before: bytes | None, after: bytes | None, code: int) -> int: ...

    def brt_mesh_create(self, verts: _F32P, nverts: int, tris: _I32P, ntris: int,
                        out: ctypes._CArgObject) -> int: ...

    def brt_mesh_free(self, mesh: ctypes.c_void_p) -> None: ...

    def brt_scene_create_motion(self, meshes: ctypes.Array[ctypes.c_void_p], nmeshes: int, inst_mesh: _I32P,
                                inst_xform: _F32P, motion: _F64P | None, moving: _U8P | None, ninst: int,
                                out: ctypes._CArgObject) -> int: ...

    def brt_scene_free(self, scene: ctypes.c_void_p) -> None: ...

    def brt_intersect_bundled(self, scene: ctypes.c_void_p, org: _F32P, dir: _F32P, time: _F32P | None,
                              tmax: _F32P | None, tmax_default: float, nrays: int, bundle: int, nthreads: int,
                              t_out: _F32P, inst_out: _I32P, prim_out: _I32P, ng_out: _F32P,
                              uv_out: _F32P) -> int: ...


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


def load_library() -> ctypes.CDLL:
    """Load the library once and return the ctypes handle (its functions typed for this
    module by :class:`_Api`).

    Raises:
        NativeLibraryError: not found (lists the paths searched and the build command),
        or built for another ABI version.
    """
    global _lib, _load_error
    if _lib is not None:
        return _lib
    if _load_error is not None:
        raise NativeLibraryError(_load_error)
    tried: list[str] = []
    for p in candidate_paths():
        if not p.is_file():
            tried.append(str(p))
            continue
        try:
            lib = ctypes.CDLL(str(p))
        except OSError as exc:
            tried.append(f"{p} ({exc})")
            continue
        lib.brt_api_version.argtypes = []
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


def kernel() -> str:
    """The traversal kernel the library runs on this CPU: ``"avx"``, ``"sse2"`` or
    ``"portable"``.

    Raises:
        NativeLibraryError: the library cannot be loaded.
    """
    return _api().brt_kernel().decode()


def crash_message(before: str | None, after: str = "", code: int = 2) -> bool:
    """While set, a crash of this process (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints
    ``before`` + the signal's name + ``after`` on stderr and exits with ``code`` instead
    (the command line tool sets it while Blender reads a .blend: its reader crashes on
    some corrupt files). ``before`` None: the handlers from before are back. Returns
    False where it cannot be set (no library, Windows).

    Raises:
        ValueError: the text is over 2,047 bytes (UTF-8).
    """
    try:
        lib = _api()
    except NativeLibraryError:
        return False
    if before is None:
        return lib.brt_crash_message(None, None, 0) == 0
    b, a = before.encode(), after.encode()
    if len(b) + len(a) > 2047:
        raise ValueError(f"crash message must be at most 2047 bytes, got {len(b) + len(a)}")
    return lib.brt_crash_message(b, a, int(code)) == 0


def available() -> bool:
    """True if the native library loads."""
    try:
        load_library()
        return True
    except NativeLibraryError:
        return False


def _api() -> _Api:
    """:func:`load_library`'s handle, seen through the functions :func:`_declare` declares.

    Raises:
        NativeLibraryError: as :func:`load_library`.
    """
    return cast("_Api", load_library())


def _declare(lib: ctypes.CDLL) -> None:
    vp = ctypes.c_void_p
    lib.brt_mesh_create.argtypes = [_f32p, ctypes.c_int64, _i32p, ctypes.c_int64, ctypes.POINTER(vp)]
    lib.brt_mesh_create.restype = ctypes.c_int
    lib.brt_mesh_free.argtypes = [vp]
    lib.brt_mesh_free.restype = None
    lib.brt_crash_message.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    lib.brt_crash_message.restype = ctypes.c_int
    lib.brt_bundle_recasts.argtypes = []
    lib.brt_bundle_recasts.restype = ctypes.c_int64
    lib.brt_kernel.argtypes = []
    lib.brt_kernel.restype = ctypes.c_char_p
    lib.brt_scene_free.argtypes = [vp]
    lib.brt_scene_free.restype = None
    lib.brt_scene_create_motion.argtypes = [ctypes.POINTER(vp), ctypes.c_int64, _i32p, _f32p, _f64p, _u8p,
                                            ctypes.c_int64, ctypes.POINTER(vp)]
    lib.brt_scene_create_motion.restype = ctypes.c_int
    lib.brt_intersect_timed.argtypes = [vp, _f32p, _f32p, _f32p, _f32p, ctypes.c_float, ctypes.c_int64,
                                        ctypes.c_int, _f32p, _i32p, _i32p, _f32p, _f32p]
    lib.brt_intersect_timed.restype = ctypes.c_int
    lib.brt_intersect_bundled.argtypes = [vp, _f32p, _f32p, _f32p, _f32p, ctypes.c_float, ctypes.c_int64,
                                          ctypes.c_int, ctypes.c_int, _f32p, _i32p, _i32p, _f32p, _f32p]
    lib.brt_intersect_bundled.restype = ctypes.c_int


def _f32(a: F32) -> _F32P:
    """``const float *`` to the data of the contiguous float32 array ``a``."""
    return a.ctypes.data_as(_f32p)


def _f64(a: F64) -> _F64P:
    """``const double *`` to the data of the contiguous float64 array ``a``."""
    return a.ctypes.data_as(_f64p)


def _i32(a: I32) -> _I32P:
    """``int32_t *`` to the data of the contiguous int32 array ``a``."""
    return a.ctypes.data_as(_i32p)


def _u8(a: U8) -> _U8P:
    """``const uint8_t *`` to the data of the contiguous uint8 array ``a``."""
    return a.ctypes.data_as(_u8p)


class _NativeMesh:
    """Owns one ``brt_mesh`` handle over vertices (V, 3) and triangles (T, 3), checked as
    :class:`MeshData` checks them (never reshaped).

    Raises:
        SettingsError (``vertices``/``triangles``): see :func:`.base.mesh_triangles`;
        NativeLibraryError: the library failed (out of memory).
    """

    def __init__(self, lib: _Api, vertices: Array, triangles: Array) -> None:
        self._lib = lib
        self.handle = ctypes.c_void_p()
        v = mesh_vertices(vertices)
        t = mesh_triangles(triangles, v.shape[0])
        rc = lib.brt_mesh_create(_f32(v), v.shape[0], _i32(t), t.shape[0],
                                 ctypes.byref(self.handle))
        if rc != 0:
            raise NativeLibraryError(f"brt_mesh_create failed: {_ERRORS.get(rc, rc)}")

    def free(self) -> None:
        if self.handle:
            self._lib.brt_mesh_free(self.handle)
            self.handle = ctypes.c_void_p()  # NULL, as NativeBackend._free_scene leaves its scene

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown: ctypes may be gone already
            pass


#: the largest magnitude (m, or unitless for the 3x3 part) of a finite transform entry the
#: library takes: beyond about 1e33 an instance's swept bounds overflow float32 and it is
#: missed (non-finite entries keep their meaning: such an instance is not hit)
MAX_TRANSFORM = 1e30


def _check_transforms(name: str, xf: F32) -> None:
    """Refuse finite entries of ``xf`` beyond :data:`MAX_TRANSFORM`.

    Raises:
        ValueError: naming ``name`` (instance_matrix or instance_matrix_end), the
        instance and the allowed range.
    """
    big = np.isfinite(xf) & (np.abs(xf) > MAX_TRANSFORM)
    if big.any():
        i = int(np.flatnonzero(big.any(axis=(1, 2)))[0])
        raise ValueError(f"{name} entries must be within +-{MAX_TRANSFORM:g} (or non-finite: the instance "
                         f"is not hit), got {float(np.abs(xf[i][big[i]]).max()):g} at instance {i}")


def _singular(xf: F32) -> Bool:
    """(I,) bool: finite instance transforms (I, 4, 4) whose 3x3 part the library cannot
    invert (|det| <= :data:`.motion.MIN_DET` in double precision, its own test)."""
    singular: Bool = np.isfinite(xf).all(axis=(1, 2)) & ~regular(xf)
    return singular


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
    bundles = True

    def __init__(self, threads: int | None = None) -> None:
        self._lib = _api()
        self.threads = max(1, int(threads or os.cpu_count() or 1))
        self._meshes: dict[str, _NativeMesh] = {}
        self._scene = ctypes.c_void_p()
        self.blas_builds = 0  # number of per-mesh BVH builds so far (tests, benchmarks)
        self.moving_instances = 0  # instances of the latest geometry that move within its step
        self.scene_builds = 0  # number of top-level builds so far (tests, benchmarks)
        self._built: GeometryContent | None = None  # SceneGeometry.content() of the current top level

    def set_geometry(self, geometry: SceneGeometry) -> None:
        """Build the top level over ``geometry`` (per-mesh BVHs are reused by content key;
        the top level itself is kept when ``geometry`` has the last one's content,
        :meth:`SceneGeometry.has_content`: the steps of a static scene seen by a sensor
        standing still, in continuous time, 10^6 Geometry Nodes instances, would
        otherwise rebuild it every scene frame).

        Instances whose transform is singular (a scale of 0 on some axis: the object is
        flat, yet it renders and Blender's BVHTree hits it) cannot move rays into their
        mesh's frame; their triangles are baked into world space as a mesh of their own
        under an identity transform, keeping the instance and triangle indices.

        With ``geometry.instance_matrix_end`` the instances whose two transforms differ
        move (:mod:`.motion` records go to the library, which meets them at each ray's
        time). An instance singular at the start is baked at its start transform and does
        not move; one that is regular at the start but singular or non-finite at the end
        stays at its start transform (motion cannot be interpolated through a singular
        end).

        Raises:
            ValueError: instance_mesh outside the mesh list or not integers, arrays of the
            wrong shape, or a finite transform entry beyond +-:data:`MAX_TRANSFORM`.
            NativeLibraryError: the library failed (out of memory).
        """
        if self._scene and geometry.has_content(self._built):
            return
        im = index_array("instance_mesh", geometry.instance_mesh)
        xf = np.ascontiguousarray(geometry.instance_matrix, dtype=np.float32)
        if xf.shape != (im.shape[0], 4, 4):
            raise ValueError(f"instance_matrix must be ({im.shape[0]}, 4, 4), got {xf.shape}")
        if im.size and (im.min() < 0 or im.max() >= len(geometry.meshes)):
            raise ValueError(f"instance_mesh must index the {len(geometry.meshes)} meshes")
        _check_transforms("instance_matrix", xf)
        if geometry.instance_matrix_end is not None:
            end = np.asarray(geometry.instance_matrix_end, dtype=np.float32)
            _check_transforms("instance_matrix_end", end)
        meshes = list(geometry.meshes)
        keys = [m.key for m in meshes]
        singular = _singular(xf)
        rec_ptr: _F64P | None = None
        mov_ptr: _U8P | None = None
        motion = geometry.motion()
        self.moving_instances = 0
        if motion is not None:
            rec, moving = motion
            moving &= ~singular  # baked at the start transform below
            self.moving_instances = int(moving.sum())
            if moving.any():
                rec = np.ascontiguousarray(rec, dtype=np.float64)
                mov = np.ascontiguousarray(moving, dtype=np.uint8)
                rec_ptr, mov_ptr = _f64(rec), _u8(mov)
        if singular.any():
            im = im.copy()
            xf = xf.copy()
            for i in np.flatnonzero(singular):
                m = meshes[im[i]]
                world = m.vertices.astype(np.float64) @ xf[i, :3, :3].T.astype(np.float64) + xf[i, :3, 3]
                baked = MeshData(world.astype(np.float32), m.triangles)
                meshes.append(baked)
                keys.append(baked.key)
                im[i] = len(meshes) - 1
                xf[i] = np.eye(4, dtype=np.float32)
        for m in meshes:
            if m.key not in self._meshes:
                self._meshes[m.key] = _NativeMesh(self._lib, m.vertices, m.triangles)
                self.blas_builds += 1
        used = set(keys)
        for k in [k for k in self._meshes if k not in used]:
            self._meshes.pop(k).free()
        self._free_scene()
        handles = (ctypes.c_void_p * max(1, len(keys)))(*[self._meshes[k].handle.value for k in keys])
        rc = self._lib.brt_scene_create_motion(handles, len(keys), _i32(im), _f32(xf), rec_ptr,
                                               mov_ptr, im.shape[0], ctypes.byref(self._scene))
        if rc != 0:
            raise NativeLibraryError(f"brt_scene_create_motion failed: {_ERRORS.get(rc, rc)}")
        self._built = geometry.content()
        self.scene_builds += 1

    def intersect(self, origins: Floating, directions: Floating, tmax: Floating | float | np.floating[Any],
                  time: Floating | None = None, bundle: int = 1) -> ClosestHits:
        """Closest hits (see :meth:`Backend.intersect`). Rays with a NaN/inf origin,
        direction, tmax or time, or a zero direction, miss. ``bundle`` > 1: the rays come
        in consecutive groups of that many from one origin at one time (a beam's sub-rays),
        traversed together (``brt_intersect_bundled``): the same
        answers, bit for bit, in about half the time for 7 sub-rays.

        Raises:
            ValueError: origins and directions are not both (N, 3), tmax is neither a
            scalar nor (N,), or time is not (N,); checked here, so no mismatched buffer
            reaches the library.
            NativeLibraryError: no geometry set.
        """
        if not self._scene:
            raise NativeLibraryError("set_geometry() must be called before intersect()")
        o = np.ascontiguousarray(origins, dtype=np.float32)
        d = np.ascontiguousarray(directions, dtype=np.float32)
        if o.ndim != 2 or o.shape[1] != 3 or d.shape != o.shape:
            raise ValueError(f"origins and directions must both be (N, 3), got {o.shape} and {d.shape}")
        n = o.shape[0]
        t = np.empty(n, np.float32)
        inst = np.empty(n, np.int32)
        prim = np.empty(n, np.int32)
        ng = np.empty((n, 3), np.float32)
        uv = np.empty((n, 2), np.float32)
        tm_ptr: _F32P | None
        if np.ndim(tmax) == 0:
            tm_ptr, tm_default = None, float(tmax)
        else:
            tm = np.ascontiguousarray(tmax, dtype=np.float32)
            if tm.shape != (n,):
                raise ValueError(f"tmax must be a scalar or ({n},), got {tm.shape}")
            tm_ptr, tm_default = _f32(tm), 0.0
        time_ptr: _F32P | None = None
        if time is not None:

            ts = np.ascontiguousarray(time, dtype=np.float32)
            if ts.shape != (n,):
                raise ValueError(f"time must be None or ({n},), got {ts.shape}")
            time_ptr = _f32(ts)
        rc = self._lib.brt_intersect_bundled(self._scene, _f32(o), _f32(d), time_ptr, tm_ptr,
                                             tm_default, n, max(1, int(bundle)), self.threads, _f32(t),
                                             _i32(inst), _i32(prim), _f32(ng),
                                             _f32(uv))
        if rc != 0:
            raise NativeLibraryError(f"brt_intersect_bundled failed: {_ERRORS.get(rc, rc)}")
        return ClosestHits(t, inst, prim, ng, uv)

    def _free_scene(self) -> None:
        self._built = None
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
