"""Depth-map export (``blensor depth``, operator ``blensor.export_depth_map``): a range
scan of the camera as a ``depth`` sensor into the depth-map formats (exr, npy, pfm,
dmap; :mod:`blensor_addon.io.formats.depthmaps`): a range job like any other, so with
the range scan's output-folder policy (:class:`~blensor_addon.io.outdir.OutputFolder`:
lock, refusal of a used folder, overwrite of exactly the files its manifest lists)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.errors import SettingsError, did_you_mean
from ..io.formats import WRITERS, parse_formats

if TYPE_CHECKING:
    import bpy

    from .range_scan import RangeScanJob


def depth_formats() -> tuple[str, ...]:
    """The registered formats that need an image sensor (``WriterNeeds.image``): the
    depth-map formats, plug-ins registered since included."""
    return tuple(k for k, w in WRITERS.items() if w.needs.image)


def parse_depth_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    """Depth-map formats from ``"exr,npy"`` or an iterable.

    Raises:
        SettingsError (``formats``): empty, unknown or not a depth-map format.
    """
    known = depth_formats()
    allowed = "a comma-separated subset of " + ",".join(known)
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    unknown = [f for f in items if f and f not in known]
    hint = did_you_mean(unknown[0], known, formats) if unknown else ""
    try:
        out = parse_formats(formats)
    except SettingsError:
        raise SettingsError("formats", allowed, formats, hint) from None
    if any(f not in known for f in out):
        raise SettingsError("formats", allowed, formats, hint)
    return out


def export_depth(camera_object: bpy.types.Object, frames: Iterable[int], out_dir: str | os.PathLike[str],
                 formats: str | Iterable[str] = ("exr",), *, backend: str = "auto", overwrite: bool = False,
                 progress: Callable[[int, int, dict[str, Any] | None], object] | None = None,
                 **overrides: Any) -> RangeScanJob:
    """Depth maps of ``frames`` through the camera's own projection into ``out_dir``.

    ``overrides``: depth-camera settings (``max_range``, ``noise_mu``, ``noise_sigma``,
    ``seed``), and :func:`~.range_scan.scan_range`'s ``cluster`` and ``open_scene``.
    Returns the finished range-scan job (``done``: one entry per frame).

    Raises:
        SettingsError: bad camera, frames, formats, settings or folder, before anything
        is written.
        OSError: a write failed; finished frames are kept.
    """
    from .range_scan import scan_range  # (imports bpy: only once blensor depth started its cluster)
    formats = parse_depth_formats(formats)
    return scan_range(camera_object, frames, out_dir, formats, backend=backend, overwrite=overwrite,
                      progress=progress, resumable=False, **{**overrides, "sensor_type": "depth"})
