"""Scanning a camera in Blender: settings from the camera, one frame -> ScanResult."""
from __future__ import annotations

import dataclasses

import bpy
import numpy as np

from ..core.errors import SettingsError
from ..core.lidar import RayPattern, assemble, chunk_columns, iter_patterns, returns_mask, scan_columns
from ..core.result import ScanResult
from ..core.settings import FRAMES_OF_REFERENCE, LidarSettings, parse_elevations
from ..raycast import TraceResult, get_backend, shared_backend, trace
from .extract import SceneExtractor, sensor_pose
from .visibility import apply_render_visibility

#: LidarSettings fields read as-is from camera.data.blensor (same names); ``elevations``
#: is a comma-separated string there and is parsed.
SETTING_NAMES = tuple(f.name for f in dataclasses.fields(LidarSettings) if f.name != "elevations")


def check_camera(camera_object) -> None:
    """Raise SettingsError unless ``camera_object`` is a camera object."""
    if not isinstance(camera_object, bpy.types.Object) or camera_object.type != "CAMERA":
        name = getattr(camera_object, "name", camera_object)
        raise SettingsError("camera", "a camera object", name)


def read_settings(camera_object, seed: int | None = None) -> LidarSettings:
    """LidarSettings from ``camera_object.data.blensor`` (defaults where the add-on's
    properties are not registered), validated.

    Raises:
        SettingsError: not a camera, or a setting out of range.
    """
    check_camera(camera_object)
    props = getattr(camera_object.data, "blensor", None)
    kw = {}
    if props is not None:
        for name in SETTING_NAMES:
            kw[name] = getattr(props, name)
        if kw.get("preset") == "generic":
            kw["elevations"] = parse_elevations(props.elevations)
    if seed is not None:
        kw["seed"] = seed
    return LidarSettings(**kw).validate()


def frame_time(scene) -> float:
    """Seconds per scene frame: fps_base / fps."""
    return float(scene.render.fps_base) / float(scene.render.fps)


class Scanner:
    """Scans one camera, frame after frame, reusing acceleration structures.

    Args:
        camera_object: a camera object in the current scene.
        backend: ``"auto"``, ``"native"`` or ``"bvhtree"``.
        seed: overrides the camera's ``seed`` setting if not None.
        frame_of_reference: ``"sensor"`` or ``"world"`` output coordinates.
        threads: native worker threads (default: all cores).
        shared: use the process-wide backend of
            :func:`~blensor_addon.raycast.shared_backend` (single scans: mesh BVHs are
            reused across calls) instead of one owned (and freed) by this scanner.
    Raises:
        SettingsError: bad camera, setting, backend or frame of reference.
    """

    def __init__(self, camera_object, *, backend: str = "auto", seed: int | None = None,
                 frame_of_reference: str = "sensor", threads: int | None = None, shared: bool = False) -> None:
        self.settings = read_settings(camera_object, seed)
        if frame_of_reference not in FRAMES_OF_REFERENCE:
            raise SettingsError("frame_of_reference", "one of sensor, world", frame_of_reference)
        scene = bpy.context.scene
        if scene.objects.get(camera_object.name) is None:
            raise SettingsError("camera", f"an object of the scene '{scene.name}'", camera_object.name)
        sensor_pose(camera_object.matrix_world)  # refuse a zero, negative or non-finite scale now
        self.camera = camera_object
        self.scene = scene
        self.frame_of_reference = frame_of_reference
        self._shared = shared
        self.backend = shared_backend(backend, threads) if shared else get_backend(backend, threads)
        self.extractor = SceneExtractor()
        self.last_snapshot = None
        self._visibility = None  # VisibilitySwitch while the render visibility is applied

    def snapshot(self, frame: int):
        """Evaluate scene frame ``frame`` and extract it (no ray is cast); also kept as
        :attr:`last_snapshot`. Returns a :class:`~blensor_addon.scene.extract.SceneSnapshot`."""
        render = self.settings.visibility == "render"
        if render and self._visibility is None:
            self._visibility = apply_render_visibility(self.scene, bpy.context.view_layer)
        if self.scene.frame_current != frame:
            self.scene.frame_set(frame)
        self.last_snapshot = self.extractor.extract(bpy.context.evaluated_depsgraph_get(), self.camera, render)
        return self.last_snapshot

    def scan_frame(self, frame: int, mode: str = "single") -> ScanResult:
        """Evaluate scene frame ``frame`` and scan it.

        ``mode="single"``: the sector start..end at this frame. ``mode="range"``: the
        azimuth sector the head sweeps during this frame (seed 000 3.2; reference 9).
        Rays are generated and cast in chunks (:data:`~blensor_addon.core.lidar.CHUNK_RAYS`)
        and only the returns are kept, so memory grows with the returns.

        Raises:
            SettingsError: the scan would cast more rays than allowed (named setting).
        """
        s = self.settings
        ft = frame_time(self.scene)
        azimuth, stamp = scan_columns(s, frame, ft, mode)  # checks the ray budget first
        snap = self.snapshot(frame)
        self.backend.set_geometry(snap.geometry)
        pose = snap.sensor_to_world
        mats = snap.materials

        one_chunk = azimuth.shape[0] <= chunk_columns(s)
        parts, rays = [], 0
        for pattern in iter_patterns(s, azimuth, stamp):
            dirs = pattern.directions.astype(np.float64) @ pose[:3, :3].T
            # geometry is relative to the sensor position: rays start at the origin
            tr = trace(self.backend, np.zeros_like(dirs), dirs, s.max_range,
                       mats.is_mirror if mats.mirror.any() else None, s.max_bounces)
            mat = mats.lookup(tr.instance, tr.primitive)
            keep = returns_mask(tr, mats, s, mat)
            rays += len(pattern)
            if one_chunk:  # nothing to compact
                parts.append((pattern, tr, mat, keep))
            else:  # keep only the returns: memory grows with them, not with the rays
                parts.append((pattern.take(keep), tr.take(keep), mat[keep], None))
        if one_chunk:
            pattern, tr, mat, keep = parts[0]
        else:
            pattern = RayPattern.concat([p for p, _, _, _ in parts])
            tr = TraceResult.concat([t for _, t, _, _ in parts])
            mat = np.concatenate([m for _, _, m, _ in parts])
            keep = np.ones(len(pattern), bool)
        ids = (snap.instance_object_id, snap.instance_instancer_id, snap.instance_index)
        return assemble(pattern, tr, mats, ids, s, frame=frame, frame_time=ft, sensor_to_world=pose,
                        frame_of_reference=self.frame_of_reference, objects=snap.objects, num_rays=rays,
                        keep=keep, mat=mat)

    def close(self) -> None:
        """Undo the render-visibility switches and free the ray caster's native memory
        (idempotent)."""
        if self._visibility is not None:
            self._visibility.restore()
            self._visibility = None
        if not self._shared:
            self.backend.close()


def scan(camera_object, *, frame: int | None = None, seed: int | None = None, backend: str = "auto",
         frame_of_reference: str = "sensor") -> ScanResult:
    """Single scan of ``camera_object`` at ``frame`` (default: the current frame).

    The scene's current frame is restored afterwards.

    Returns:
        ScanResult (see :class:`blensor_addon.core.result.ScanResult`).
    Raises:
        SettingsError: bad camera, setting, frame or backend.
    """
    scene = bpy.context.scene
    if frame is not None and (not isinstance(frame, (int, np.integer)) or isinstance(frame, bool)):
        raise SettingsError("frame", "an integer frame number", frame)
    scanner = Scanner(camera_object, backend=backend, seed=seed, frame_of_reference=frame_of_reference,
                      shared=True)
    old = scene.frame_current
    try:
        return scanner.scan_frame(old if frame is None else int(frame), "single")
    finally:
        scanner.close()
        if scene.frame_current != old:
            scene.frame_set(old)


__all__ = ["Scanner", "scan", "read_settings", "frame_time", "check_camera"]
