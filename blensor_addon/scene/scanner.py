"""Scanning a camera in Blender: the camera's sensor settings, one packet -> ScanResult.

Owns :class:`Scanner` (a camera's sensor over the scene's :class:`~.timeline.Timeline`,
one packet of :mod:`blensor_addon.core.packets` after another, each scanned in a
:class:`~.context.TimelineContext` and reported in a
:class:`~blensor_addon.core.packets.PacketRecord`), the module-level single :func:`scan`,
and reading a camera's stored sensor settings (:func:`read_sensor`).

The sensor type (``Camera.blensor.sensor_type``) picks a module of
:mod:`blensor_addon.core.sensors`; this layer gives it a scan context over the
evaluated scene (ray casting through mirrors, surface attributes, the camera's view
frame) and never knows which sensor it runs.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import bpy
import numpy as np

from ..core.axes import check_axes, to_axes
from ..process.alloc import keep_freed_memory
from ..process.blas import single_blas_thread
from ..core.classes import semantic_of_objects
from ..core.errors import SettingsError
from ..core.packets import Packet, PacketRecord
from ..core.result import ScanResult
from ..core.sensors import COMMON, DEFAULT_TYPE, SENSORS, get_sensor, make_settings
from ..core.sensors.budget import MAX_PIXELS_SIDE
from ..core.sensors.raypattern import CameraFrame
from ..core.settings import FRAMES_OF_REFERENCE
from ..raycast import get_backend, shared_backend
from .context import TimelineContext
from .extract import SceneExtractor
from .objects import sensor_pose
from .timeline import Timeline, non_finite_transform
from .visibility import apply_render_visibility

#: time steps of a scene frame at most in the continuous time model: each step is a scene
#: evaluation, so ``time_step`` is at least frame_time / MAX_TIME_STEPS (4.2e-6 s at 24 fps)
MAX_TIME_STEPS = 10_000
#: the largest magnitude of an entry of a sensor's or a scanned object's world matrix (m for
#: the translation, unitless for the rotation-and-scale part): a million km, far beyond any
#: sensor's range; the ray caster's float32 geometry is meaningless long before the native
#: library's own limit (:data:`blensor_addon.raycast.native.MAX_TRANSFORM`, 1e30)
MAX_WORLD_COORDINATE = 1e9


def check_camera(camera_object) -> None:
    """Raise SettingsError unless ``camera_object`` is a camera object."""
    if not isinstance(camera_object, bpy.types.Object) or camera_object.type != "CAMERA":
        name = camera_object.name if isinstance(camera_object, bpy.types.ID) else camera_object
        raise SettingsError("camera", "a camera object", name)


def sensor_props(camera_object):
    """The camera's BlenSor settings (``Camera.blensor``, a property group), or None
    where the add-on's properties are not registered (a script that scans without
    :func:`blensor_addon.register`)."""
    if "blensor" not in bpy.types.Camera.bl_rna.properties:
        return None
    return camera_object.data.blensor


def settings_group(props, sensor):
    """The property group holding ``sensor``'s own settings on ``Camera.blensor``."""
    return props if not sensor.storage else getattr(props, sensor.storage, None)


def stored_values(camera_object, sensor) -> dict:
    """The values of ``sensor``'s settings stored on the camera (empty where the
    add-on's properties are not registered). ``floats`` settings are typed text there
    and parsed (a bad list raises SettingsError naming the setting)."""
    props = sensor_props(camera_object)
    if props is None:
        return {}
    group = settings_group(props, sensor)
    values = {}
    for f in dataclasses.fields(sensor.Settings):
        src = props if f.name in COMMON else group
        if src is None:
            continue
        meta = f.metadata["blensor"]
        value = getattr(src, f.name)
        if meta.kind == "floats":
            shown = meta.show_if
            if shown is not None and values.get(shown[0], getattr(src, shown[0], None)) != shown[1]:
                continue  # not used (e.g. elevations of a non-generic preset): keep the default
            value = meta.parse(f.name, value)
        values[f.name] = value
    return values


def read_sensor(camera_object, seed: int | None = None, overrides: Mapping[str, Any] | None = None):
    """(Sensor, settings) of the camera: the stored sensor type and values, then
    ``overrides`` (setting names of the sensor type, plus ``sensor_type`` and
    ``preset``), then ``seed``; validated. The camera is not changed.

    Returns:
        (:class:`~blensor_addon.core.sensors.sensor.Sensor`, its settings dataclass).
    Raises:
        SettingsError: not a camera, unknown name, or a setting out of range.
    """
    check_camera(camera_object)
    overrides = dict(overrides or {})
    props = sensor_props(camera_object)
    stype = overrides.pop("sensor_type", None)
    if stype is None:
        stype = props.sensor_type if props is not None else DEFAULT_TYPE
    sensor = get_sensor(stype)
    if seed is not None:
        overrides["seed"] = seed
    return make_settings(stype, blend_paths(sensor, stored_values(camera_object, sensor)),
                         blend_paths(sensor, overrides))


def blend_paths(sensor, values: dict) -> dict:
    """``values`` with the sensor's file settings (``sensor.path_settings``, e.g. the
    pattern sensor's ``pattern_file``) that start with ``//`` made absolute: Blender's
    convention, relative to the open .blend (``bpy.path.abspath``)."""
    for name in sensor.path_settings:
        value = values.get(name)
        if isinstance(value, str) and value.startswith("//") and bpy.data.filepath:
            values[name] = bpy.path.abspath(value)
    return values


def camera_frame(camera_object, scene) -> CameraFrame:
    """The Blender camera's image as a :class:`CameraFrame`: render resolution times
    percentage (Blender's integer rounding), and the view frame Blender itself projects
    with (lens or field of view, sensor size and fit, shift, pixel aspect).

    Raises:
        SettingsError: a non-perspective camera (``camera.type``), or an image side
        outside 1..16384 pixels (``resolution``).
    """
    cam = camera_object.data
    if cam.type != "PERSP":
        raise SettingsError("camera.type", "PERSP (a perspective camera) for this sensor", cam.type)
    r = scene.render
    w = int(r.resolution_x * r.resolution_percentage / 100)
    h = int(r.resolution_y * r.resolution_percentage / 100)
    for value in (w, h):
        if not 1 <= value <= MAX_PIXELS_SIDE:
            raise SettingsError("resolution", f"1 to {MAX_PIXELS_SIDE} pixels a side (render resolution "
                                "times percentage)", f"{w} x {h}")
    corners = [tuple(v) for v in cam.view_frame(scene=scene)]
    xs = [c[0] for c in corners]
    ys = [c[1] for c in corners]
    return CameraFrame(w, h, min(xs), max(xs), min(ys), max(ys), corners[0][2])


def frame_time(scene) -> float:
    """Seconds per scene frame: fps_base / fps."""
    return float(scene.render.fps_base) / float(scene.render.fps)


class Scanner:
    """Scans one camera, packet after packet (:meth:`scan`), reusing acceleration
    structures.

    Args:
        camera_object: a camera object in the current scene.
        backend: ``"auto"``, ``"native"`` or ``"bvhtree"``.
        seed: overrides the camera's ``seed`` setting if not None.
        frame_of_reference: ``"sensor"`` or ``"world"`` output coordinates.
        threads: native worker threads (default: all cores).
        shared: use the process-wide backend of
            :func:`~blensor_addon.raycast.shared_backend` (single scans: mesh BVHs are
            reused across calls) instead of one owned (and freed) by this scanner.
        overrides: setting name -> value, applied over the camera's stored settings
            (``sensor_type`` and ``preset`` included); the camera is not changed.
        axes: ``"ros"`` (REP-103, the default) or ``"blensor"`` for sensor-frame points,
            normals and the pose (:mod:`blensor_addon.core.axes`).
        packet_hashes: hash the geometry of every packet scanned
            (:attr:`PacketRecord.geometry_hash <blensor_addon.core.packets.PacketRecord>`,
            which the range-scan runner keeps in its manifest for ``--resume``); a sha256
            over every instance transform of every step, so single scans skip it.
        rig: a :class:`~.rig.RigSampler` shared by the scanners of a rig: the
            scene is evaluated once per sample time for all of them (it applies the render
            visibility and owns the extractor).
    Raises:
        SettingsError: bad camera, setting, backend or frame of reference.
    """

    def __init__(self, camera_object, *, backend: str = "auto", seed: int | None = None,
                 frame_of_reference: str = "sensor", threads: int | None = None, shared: bool = False,
                 overrides: dict | None = None, axes: str = "ros",
                 packet_hashes: bool = False, rig=None) -> None:
        keep_freed_memory()  # once per process: a scan's arrays reuse freed pages (process/alloc.py)
        self.sensor, self.settings = read_sensor(camera_object, seed, overrides)
        self.axes = check_axes(axes)
        if frame_of_reference not in FRAMES_OF_REFERENCE:
            raise SettingsError("frame_of_reference", "one of sensor, world", frame_of_reference)
        scene = bpy.context.scene
        if scene.objects.get(camera_object.name) is None:
            raise SettingsError("camera", f"an object of the scene '{scene.name}'", camera_object.name)
        sensor_pose(camera_object.matrix_world)  # refuse a zero, negative or non-finite scale now
        self.camera_frame = camera_frame(camera_object, scene) if self.sensor.uses_camera else None
        self.camera = camera_object
        self.scene = scene
        self.frame_of_reference = frame_of_reference
        self._shared = shared
        self.backend = shared_backend(backend, threads) if shared else get_backend(backend, threads)
        self._rig = rig
        if rig is not None and rig.render != (self.settings.visibility == "render"):
            raise SettingsError(
                "visibility",
                f"'{'render' if rig.render else 'viewport'}' as the rig's other "
                "sensors (one scene evaluation serves them all)",
                self.settings.visibility,
            )
        self.extractor = rig.extractor if rig is not None else SceneExtractor()
        self._visibility = None  # VisibilitySwitch while the render visibility is applied
        self._semantic = None  # class id per object id
        s = self.settings
        ft = frame_time(scene)
        if s.time_model == "continuous" and not (ft / MAX_TIME_STEPS * (1 - 1e-9) <= s.time_step
                                                 <= ft * (1 + 1e-9)):
            raise SettingsError("time_step", f"in [{ft / MAX_TIME_STEPS:.3g}, {ft:.6g}] s (at most one "
                                f"scene frame and at least 1/{MAX_TIME_STEPS} of one: a scene evaluation per "
                                f"step, at {scene.render.fps / scene.render.fps_base:g} fps)", s.time_step)
        self._timeline = None
        # whether this scanner has set the scene's frame once: until then the current frame's
        # evaluation may hold values typed over an animation (keyframe_insert elsewhere leaves the
        # typed value until the next frame change) that a subframe of the same sweep would not
        self._frame_set = False
        self.packet_hashes = packet_hashes

    @property
    def sweep_period(self) -> float | None:
        """Seconds per packet of a sensor that fires over time: a full sweep (timing
        ``sweep``) or a stream's packet (timing ``stream``, a pattern that never repeats),
        from the sensor's declared :attr:`capabilities`; None for image sensors."""
        timing = self.capabilities.timing
        return float(timing.period) if timing.kind in ("sweep", "stream") and timing.period else None

    @property
    def continuous(self) -> bool:
        """Whether rays are cast at their own firing times: continuous time and a sensor
        that fires over time (a sweep, or an image read out row by row). Otherwise a
        ``single`` or ``frame`` packet is its scene frame held still."""
        s = self.settings
        swept = (self.sweep_period is not None or self.sensor.exposure_time(s) > 0
                 or self.capabilities.timing.kind == "stream")  # a stream reported per scene frame
        return s.time_model == "continuous" and swept

    @functools.cached_property
    def capabilities(self):
        """The sensor's :class:`~blensor_addon.core.capabilities.Capabilities` with this
        scanner's settings and camera image (what the range-job plan, the scanner's
        timing and the writers read; fixed for the scanner's life)."""
        return self.sensor.capabilities(self.settings, self.camera_frame)

    def _ensure_visibility(self) -> bool:
        """Apply the render visibility (setting ``visibility = render``) once; returns
        whether it is the render evaluation that is scanned."""
        render = self.settings.visibility == "render"
        if render and self._visibility is None:
            self._visibility = apply_render_visibility(self.scene, bpy.context.view_layer)
        return render

    def _sample(self, frame: int, subframe: float):
        """Snapshot of the scene evaluated at ``frame + subframe`` (a rig's: the shared
        evaluation's snapshot for this camera). The first sample always sets the frame, the
        current one too, so that it evaluates the animation as it is now (an edited keyframe)
        as every later sample of the sweep does."""
        if self._rig is not None:
            return self._rig.sample(self.camera, frame, subframe)
        render = self._ensure_visibility()
        if (not self._frame_set or self.scene.frame_current != frame or subframe
                or self.scene.frame_subframe):
            self.scene.frame_set(frame, subframe=subframe)
            self._frame_set = True
        return self.extractor.extract(bpy.context.evaluated_depsgraph_get(), self.camera, render)

    @property
    def timeline(self) -> Timeline:
        """The scene sampled over time (continuous time, or held frames)."""
        if self._timeline is None:
            s = self.settings
            self._timeline = Timeline(self._sample, frame_time(self.scene), s.time_model == "continuous",
                                      s.time_step)
        return self._timeline

    def check_transforms(self, frames, cameras=None) -> None:
        """Evaluate ``frames`` (scene frame numbers) as the scan will (render visibility
        applied) and refuse, before anything is scanned or an earlier run's files are
        deleted, a world matrix out of reach at one of them: the sensor's and every
        scanned geometry object's (not hidden from render) must have every entry within
        +-:data:`MAX_WORLD_COORDINATE`; the sensor's must be finite, and in continuous
        time (:attr:`continuous`: transforms are interpolated) every object's too (frozen
        frames leave an object with a NaN/inf transform out with a warning instead). Each
        frame is one evaluation of the scene; no mesh is read. Instances (Geometry Nodes,
        collection instances, particles) are checked when their frame is scanned.
        ``cameras``: the sensors whose transforms are checked (default: this scanner's;
        a rig checks all of its cameras in one pass).

        Raises:
            SettingsError (``transform of object 'NAME'``): naming the first one found,
            the value and the time.
        """
        from .objects import GEOMETRY_TYPES
        render = self._rig.render if self._rig is not None else self._ensure_visibility()
        ft = frame_time(self.scene)
        old, old_sub = self.scene.frame_current, self.scene.frame_subframe
        names = {c.name for c in (cameras or [self.camera])}
        try:
            for f in frames:
                self.scene.frame_set(int(f))
                checked, sensors, mats = [], [], []  # the frame's matrices tested at once (one array)
                for ob in bpy.context.evaluated_depsgraph_get().objects:
                    orig = ob.original
                    sensor = orig.name in names
                    if not sensor and (ob.type not in GEOMETRY_TYPES or (render and orig.hide_render)):
                        continue
                    checked.append(orig)
                    sensors.append(sensor)
                    mats.append(ob.matrix_world)
                m = np.array(mats, dtype=np.float64).reshape(-1, 4, 4)[:, :3]
                finite = np.isfinite(m).all(axis=(1, 2))
                big = np.abs(np.where(finite[:, None, None], m, 0.0)).max(axis=(1, 2), initial=0.0)
                refused = (~finite & (np.array(sensors, dtype=bool) | self.continuous)) | \
                    (finite & (big > MAX_WORLD_COORDINATE))
                if refused.any():  # the first in the depsgraph's order, as one by one
                    i = int(np.argmax(refused))
                    if not finite[i]:
                        raise non_finite_transform(checked[i].name, int(f) * ft, int(f))
                    raise SettingsError(
                        f"transform of object '{checked[i].name}'",
                        f"finite and within +-{MAX_WORLD_COORDINATE:g} (m, every entry of its world "
                        "matrix) at every time scanned",
                        f"{float(big[i]):g} at t = {int(f) * ft:.6g} s (frame {int(f)})")
        finally:
            self.scene.frame_set(old, subframe=old_sub)

    def _plan(self, packet: Packet) -> tuple[int, float, str, float, float, bool]:
        """(frame, frame_time, mode, t0, t1, held) of ``packet``: what the sensor is
        asked for (``frame`` and ``frame_time`` of the result, ``mode`` ``"single"`` or
        ``"range"``), the packet's interval [t0, t1) s, and whether it is its scene frame
        held still (frozen time, or a sensor that fires all its rays at once).

        Raises:
            SettingsError (``packets``): a sweep packet for an image sensor.
        """
        if not isinstance(packet, Packet):
            raise SettingsError("packet", "a blensor_addon.core.packets.Packet", packet)
        ft = frame_time(self.scene)
        f = packet.index
        if packet.kind == "sweep":
            P = self.sweep_period
            if P is None:
                raise SettingsError("packets", f"frame for sensor type '{self.sensor.name}'", "sweep")
            return f, P, "range", f * P, (f + 1) * P, False
        mode = "single" if packet.kind == "single" else "range"
        if not self.continuous:
            return f, ft, mode, f * ft, (f + 1) * ft, True
        P = self.sweep_period
        if P is None and self.capabilities.timing.kind == "stream":
            P = ft  # a stream without a packet period (seed 003 report-frequency < 0.5): scene frames
        span = P if P is not None else self.sensor.exposure_time(self.settings)
        t1 = (f + 1) * ft if mode == "range" and P is not None else f * ft + span
        return f, ft, mode, f * ft, t1, False

    def check_budget(self, packet: Packet) -> int:
        """Refuse a scan of ``packet`` that would cast too many rays (SettingsError
        naming the setting), before anything is evaluated; returns the ray count."""
        frame, ftime, mode, _, _, _ = self._plan(packet)
        return self.sensor.check_budget(self.settings, frame, ftime, mode, self.camera_frame)

    def packet_hash(self, packet: Packet) -> str:
        """sha256 (hex) of the geometry ``packet`` is cast in: of every step of a timed
        packet (both ends of each step, so a change of the animation anywhere in the
        packet shows), else of its held frame's snapshot. Equal to the
        :class:`~blensor_addon.core.packets.PacketRecord`'s ``geometry_hash`` of that
        packet's scan; resume compares them."""
        _, _, _, t0, t1, held = self._plan(packet)
        if held:
            return self.timeline.held(packet.index).geometry.hash()
        return self.timeline.geometry_hash(t0, t1)

    def _semantic_of(self, objects) -> np.ndarray:
        """Semantic class id per object id of the object table ``objects`` (kept until the
        table grows; :func:`semantic_of_objects` refuses unknown class names)."""
        if self._semantic is None or self._semantic.shape[0] != len(objects) + 1:
            self._semantic = semantic_of_objects(objects)
        return self._semantic

    @property
    def sensor_type(self) -> str:
        """Name of the sensor type scanned."""
        return self.sensor.name

    def scan(self, packet: Packet) -> tuple[ScanResult, PacketRecord]:
        """Scan ``packet`` with the camera's sensor.

        ``Packet("single", f)``: one whole scan at scene frame ``f``. ``Packet("frame",
        f)``: what the sensor sees during frame ``f`` of a range scan (a rotating LiDAR's
        sector swept in the frame, a line or planar scanner's sweeps, one image of a
        camera sensor). ``Packet("sweep", i)``: one full revolution or field-of-view
        sweep, the rays fired in ``[i * P, (i + 1) * P)`` s (P = :attr:`sweep_period`),
        over however many scene frames it spans; the result's ``frame`` is ``i`` and its
        ``frame_time`` P. Rays are cast in chunks and only the returns are kept.

        Returns:
            (ScanResult in :attr:`axes`, PacketRecord): the record's ``time`` is the
            packet's start (s), ``pose`` and ``pose_end`` the result's
            ``sensor_to_world`` and ``sensor_to_world_end`` (the latter in continuous
            time only), ``geometry_hash`` :meth:`packet_hash` (None unless the scanner
            was made with ``packet_hashes``).
        Raises:
            SettingsError: too many rays (named setting), a sweep of an image sensor
            (``packets``), or an object with a NaN/inf transform at some time of the
            packet (continuous time).
        """
        frame, ftime, mode, t0, t1, held = self._plan(packet)
        self.sensor.check_budget(self.settings, frame, ftime, mode, self.camera_frame)
        tl = self.timeline
        with single_blas_thread():
            step = tl.held(frame) if held else None
            objects = (step or tl.step_at(t0)).snap.objects
            ctx = TimelineContext(self.backend, tl, t0, t1, self.frame_of_reference, self.camera_frame,
                                  self._semantic_of(objects), held=step)
            result = self.sensor.scan(self.settings, ctx, frame=frame, frame_time=ftime, mode=mode)
            moving = tl.moving_ids(t0, t1)  # the table's entries of moving objects get "moving": True
            result.objects = [dict(o, moving=True) if o["id"] in moving else o for o in result.objects]
            digest = None
            if self.packet_hashes:  # now: the timeline keeps only recent steps
                digest = step.geometry.hash() if held else tl.geometry_hash(t0, t1)
            result = to_axes(result, self.axes)
        record = PacketRecord(packet, float(t0), result.sensor_to_world, result.sensor_to_world_end, digest)
        return result, record

    def close(self) -> None:
        """Undo the render-visibility switches, free the ray caster's native memory and
        drop the scene samples (10^6 instances: ~100 MB each) at once, not at the next
        garbage collection (idempotent). The latest extraction stays in the process's
        :class:`~.extract.SceneCache` for the next scan (:func:`~.extract.forget_scene`
        drops it; loading a file does)."""
        self._timeline = None
        if self._visibility is not None:
            self._visibility.restore()
            self._visibility = None
        if not self._shared:
            self.backend.close()


#: Blender's largest frame number (MAXFRAME)
MAX_FRAME = 1048574


def scan(camera_object, *, frame: int | None = None, seed: int | None = None, backend: str = "auto",
         frame_of_reference: str = "sensor", axes: str = "ros", **overrides) -> ScanResult:
    """Single scan of ``camera_object`` at ``frame`` (default: the current frame).

    ``overrides``: setting names of the camera's sensor type (or of ``sensor_type``, if
    given) plus ``sensor_type`` and ``preset``, e.g. ``scan(cam, sensor_type="tof",
    preset="sr4000", backfolding=True)``; the camera's stored settings are not changed.
    ``axes``: sensor-frame points, normals and the pose in REP-103 axes (``"ros"``, the
    default: x forward, y left, z up) or the camera's (``"blensor"``).
    The scene's current frame is restored afterwards.

    Returns:
        ScanResult (see :class:`blensor_addon.core.result.ScanResult`).
    Raises:
        SettingsError: bad camera, setting (unknown name, value out of range: the
        message names the setting, its unit and allowed range), frame or backend.
    """
    scene = bpy.context.scene
    if frame is not None and (not isinstance(frame, (int, np.integer)) or isinstance(frame, bool)
                              or not -MAX_FRAME <= frame <= MAX_FRAME):
        raise SettingsError("frame", f"an integer frame number within Blender's -{MAX_FRAME}..{MAX_FRAME}",
                            frame)
    scanner = Scanner(camera_object, backend=backend, seed=seed, frame_of_reference=frame_of_reference,
                      shared=True, overrides=overrides, axes=axes)
    old = scene.frame_current
    try:
        return scanner.scan(Packet("single", old if frame is None else int(frame)))[0]
    finally:
        scanner.close()
        if scene.frame_current != old or scene.frame_subframe:
            scene.frame_set(old)


__all__ = ["Scanner", "scan", "read_sensor", "sensor_props", "frame_time", "check_camera", "camera_frame",
           "SENSORS"]
