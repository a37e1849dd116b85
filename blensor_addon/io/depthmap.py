"""Float depth maps of the depth camera (a job of the product: ``blensor depth``,
operator ``blensor.export_depth_map``).

Per frame f and format (pixel (row, col) = Blender's own camera projection; misses NaN):

- ``exr``: ``depth%05d.exr``, 32-bit float OpenEXR written through Blender's own image
  API, one file with channels R = planar depth z (m), G = radial range (m), B = object
  id (exact up to 2^24; 0 = nothing), A = 1 where something returned, else 0.
- ``npy``: ``depth%05d_z.npy``, ``depth%05d_range.npy`` (float32, (H, W), row 0 at the
  top) and ``depth%05d_object_id.npy`` (uint32).
- ``pfm``: ``depth%05d.pfm``, the portable float map of z (``Pf``, little-endian: scale
  -1, rows bottom to top as the format says).
- ``dmap``: ``depth%05d.dmap``, the original's layout (reference 10.5): int32 width,
  int32 height, then width x height float64 radial distances, bottom row first
  (little-endian; misses are NaN).

Every file is written under a temporary name and renamed; a frame's files appear
together or not at all.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ..core.errors import SettingsError
from ..core.result import ScanResult
from .atomic import commit_files, remove_quietly


def depth_images(result: ScanResult, noisy: bool = False) -> dict[str, np.ndarray]:
    """Images of a depth-camera result taken in the sensor frame: ``z`` and ``range``
    (H, W) float32 m (NaN where nothing returned), ``object_id`` (H, W) uint32 (0).

    Raises:
        ValueError: the result has no image grid, or is not in the sensor frame.
    """
    if result.frame_of_reference != "sensor":
        raise ValueError("depth images need a result in the sensor frame")
    xyz = result.xyz_noisy if noisy else result.xyz
    rows, cols = result.grid_shape
    idx = result.ray_index.astype(np.int64)
    z = np.full(rows * cols, np.nan, np.float32)
    z[idx] = -xyz[:, 2]
    rng = np.full(rows * cols, np.nan, np.float32)
    rng[idx] = result.range_noisy if noisy else result.range
    oid = np.zeros(rows * cols, np.uint32)
    oid[idx] = result.object_id
    return {"z": z.reshape(rows, cols), "range": rng.reshape(rows, cols), "object_id": oid.reshape(rows, cols)}


def npy_bytes(a: np.ndarray) -> bytes:
    """The .npy file of ``a``."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def pfm_bytes(z: np.ndarray) -> bytes:
    """Portable float map (``Pf``, one channel, little-endian) of (H, W) float32 ``z``."""
    h, w = z.shape
    return f"Pf\n{w} {h}\n-1.0\n".encode() + np.ascontiguousarray(z[::-1], dtype="<f4").tobytes()


def dmap_bytes(radial: np.ndarray) -> bytes:
    """The original's ``.dmap`` (reference 10.5) of (H, W) radial distances."""
    h, w = radial.shape
    return struct.pack("<ii", w, h) + np.ascontiguousarray(radial[::-1], dtype="<f8").tobytes()


def exr_bytes(images: dict[str, np.ndarray]) -> bytes:
    """32-bit float OpenEXR (R = z, G = range, B = object id, A = returned) through
    Blender's image API (``bpy``; imported here so the other formats need no Blender)."""
    import tempfile

    import bpy
    z = images["z"]
    h, w = z.shape
    px = np.empty((h, w, 4), np.float32)
    px[..., 0] = z
    px[..., 1] = images["range"]
    px[..., 2] = images["object_id"]
    px[..., 3] = np.isfinite(z)
    img = bpy.data.images.new("blensor_depth", w, h, alpha=True, float_buffer=True, is_data=True)
    fd, tmp = tempfile.mkstemp(suffix=".exr")
    os.close(fd)
    try:
        img.pixels.foreach_set(px[::-1].ravel())  # Blender's rows start at the bottom
        img.filepath_raw = tmp
        img.file_format = "OPEN_EXR"
        img.use_half_precision = False
        img.save()
        return Path(tmp).read_bytes()
    finally:
        bpy.data.images.remove(img)
        remove_quietly(Path(tmp))


#: format -> function(frame, images) -> list of (file name, bytes)
FORMATS = {
    "exr": lambda f, im: [(f"depth{f:05d}.exr", exr_bytes(im))],
    "npy": lambda f, im: [(f"depth{f:05d}_{k}.npy", npy_bytes(im[k])) for k in ("z", "range", "object_id")],
    "pfm": lambda f, im: [(f"depth{f:05d}.pfm", pfm_bytes(im["z"]))],
    "dmap": lambda f, im: [(f"depth{f:05d}.dmap", dmap_bytes(im["range"]))],
}


def parse_depth_formats(formats) -> tuple[str, ...]:
    """``"exr,npy"`` or an iterable -> tuple of known depth formats.

    Raises:
        SettingsError (``formats``): empty or unknown.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in FORMATS for f in items):
        raise SettingsError("formats", "a comma-separated subset of " + ",".join(FORMATS), formats)
    return tuple(dict.fromkeys(items))


def write_depth_frame(result: ScanResult, out: Path, formats: tuple[str, ...]) -> list[str]:
    """Write one frame's depth maps into folder ``out``; returns the file names.

    Raises:
        OSError: a file could not be written (none of this frame's files is left).
    """
    images = depth_images(result)
    files = (item for fmt in formats for item in FORMATS[fmt](result.frame, images))
    return [p.name for p in commit_files(out, files)]


def export_depth(camera_object, frames, out_dir, formats=("exr",), *, backend: str = "auto", overwrite=False,
                 progress=None, **overrides) -> list[dict]:
    """Scan ``frames`` with the camera as a depth camera (its own intrinsics; the
    camera's depth settings plus ``overrides``) and write depth maps into ``out_dir``.

    Returns:
        one entry per frame: {"frame", "points", "files"}.
    Raises:
        SettingsError: bad camera, frames, formats, settings or folder (a folder in use
        by another run, or holding other files unless ``overwrite``), before anything
        is written.
        OSError: a write failed; finished frames are kept.
    """
    import bpy

    from ..scene.scanner import Scanner
    from .outdir import FolderLock
    from .range import check_frames, check_output_dir
    formats = parse_depth_formats(formats)
    scene = bpy.context.scene
    frames = check_frames(scene, frames)
    overrides = {"sensor_type": "depth", **overrides}
    scanner = Scanner(camera_object, backend=backend, frame_of_reference="sensor", overrides=overrides)
    lock = None
    old = scene.frame_current
    done = []
    try:
        scanner.check_budget(frames[0], "single")
        out = check_output_dir(out_dir)
        lock = FolderLock(out)
        taken = sorted(p.name for p in out.glob("depth*") if p.is_file())
        if taken and not overwrite:
            raise SettingsError("out", "a folder without earlier depth maps (or use overwrite)",
                                f"{out} holds {taken[0]} and {len(taken) - 1} more")
        for name in taken:  # overwrite: no stale frames of the earlier export stay
            remove_quietly(out / name)
        for f in frames:
            result = scanner.scan_frame(f, "single")
            done.append({"frame": f, "points": len(result), "files": write_depth_frame(result, out, formats)})
            if progress is not None:
                progress(len(done), len(frames), done[-1])
        return done
    finally:
        if lock is not None:
            lock.release()
        scanner.close()
        if scene.frame_current != old:
            scene.frame_set(old)
