"""Scanning a camera in Blender: the camera's sensor settings, one frame -> ScanResult.

The sensor type (``Camera.blensor.sensor_type``) picks a module of
:mod:`blensor_addon.core.sensors`; this layer gives it a :class:`ScanContext` over the
evaluated scene (ray casting through mirrors, surface attributes, the camera's view
frame) and never knows which sensor it runs.
"""
from __future__ import annotations

import dataclasses

import bpy
import numpy as np

from ..core.axes import check_axes, to_axes
from ..core.alloc import keep_freed_memory
from ..core.blas import single_blas_thread
from ..core.classes import semantic_of_objects
from ..core.errors import SettingsError
from ..core.result import ScanResult
from ..core.sensors import COMMON, DEFAULT_TYPE, SENSORS, get_sensor, make_settings
from ..core.sensors._base import FRAMES_OF_REFERENCE, MAX_PIXELS_SIDE, CameraFrame
from ..raycast import TraceResult, get_backend, shared_backend, trace
from ..raycast.trace import facing_normals
from .extract import SceneExtractor, sensor_pose
from .timeline import TimedContext, Timeline, non_finite_transform
from .visibility import apply_render_visibility

#: time steps of a scene frame at most in the continuous time model: each step is a scene
#: evaluation, so ``time_step`` is at least frame_time / MAX_TIME_STEPS (4.2e-6 s at 24 fps)
MAX_TIME_STEPS = 10_000


def check_camera(camera_object) -> None:
    """Raise SettingsError unless ``camera_object`` is a camera object."""
    if not isinstance(camera_object, bpy.types.Object) or camera_object.type != "CAMERA":
        name = getattr(camera_object, "name", camera_object)
        raise SettingsError("camera", "a camera object", name)


def settings_group(props, sensor):
    """The property group holding ``sensor``'s own settings on ``Camera.blensor``."""
    return props if not sensor.storage else getattr(props, sensor.storage, None)


def stored_values(camera_object, sensor) -> dict:
    """The values of ``sensor``'s settings stored on the camera (empty where the
    add-on's properties are not registered). ``floats`` settings are typed text there
    and parsed (a bad list raises SettingsError naming the setting)."""
    props = getattr(camera_object.data, "blensor", None)
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


def read_settings(camera_object, seed: int | None = None, overrides: dict | None = None):
    """The camera's sensor settings: the stored sensor type and values, then
    ``overrides`` (setting names of the sensor type, plus ``sensor_type`` and
    ``preset``), then ``seed``; validated. The camera is not changed.

    Returns:
        the settings dataclass of the sensor type (``.sensor_type`` is not a field;
        use :func:`read_sensor` for the pair).
    Raises:
        SettingsError: not a camera, unknown name, or a setting out of range.
    """
    return read_sensor(camera_object, seed, overrides)[1]


def read_sensor(camera_object, seed: int | None = None, overrides: dict | None = None):
    """(Sensor, settings) of the camera; see :func:`read_settings`."""
    check_camera(camera_object)
    overrides = dict(overrides or {})
    props = getattr(camera_object.data, "blensor", None)
    stype = overrides.pop("sensor_type", None)
    if stype is None:
        stype = getattr(props, "sensor_type", DEFAULT_TYPE) if props is not None else DEFAULT_TYPE
    sensor = get_sensor(stype)
    if seed is not None:
        overrides["seed"] = seed
    return make_settings(stype, stored_values(camera_object, sensor), overrides)


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


class _Hits:
    """Cast results of N rays: the trace, the material rows, their reflectivity."""

    def __init__(self, tr: TraceResult, mat: np.ndarray, reflectivity: np.ndarray) -> None:
        self.tr, self.mat, self.reflectivity = tr, mat, reflectivity

    @property
    def range(self) -> np.ndarray:
        return self.tr.range

    @property
    def hit(self) -> np.ndarray:
        return self.tr.hit

    def take(self, idx) -> "_Hits":
        return _Hits(self.tr.take(idx), self.mat[idx], self.reflectivity[idx])

    @classmethod
    def concat(cls, parts: list["_Hits"]) -> "_Hits":
        return cls(TraceResult.concat([p.tr for p in parts]), np.concatenate([p.mat for p in parts]),
                   np.concatenate([p.reflectivity for p in parts]))


class _Context:
    """:class:`~blensor_addon.core.sensors._base.ScanContext` over one snapshot."""

    def __init__(self, backend, snap, frame_of_reference: str, camera: CameraFrame | None,
                 semantic: np.ndarray) -> None:
        self.semantic = semantic  # class id per object id
        self.backend = backend
        self.snap = snap
        self.sensor_to_world = snap.sensor_to_world
        self.sensor_to_world_end = None  # the scene is frozen: one pose
        self.frame_of_reference = frame_of_reference
        self.objects = snap.objects
        self.camera = camera
        self._R = snap.sensor_to_world[:3, :3]

    def cast(self, origins, directions, max_range, max_bounces, times=None):
        mats = self.snap.materials
        # geometry is relative to the sensor position: the sensor origin is (0, 0, 0)
        dirs = np.asarray(directions, dtype=np.float64) @ self._R.T
        orig = np.zeros(dirs.shape, np.float32) if origins is None else np.asarray(origins, np.float64) @ self._R.T
        tr = trace(self.backend, orig, dirs, max_range, mats.is_mirror if mats.mirror.any() else None, max_bounces)
        mat = mats.lookup(tr.instance, tr.primitive)
        return _Hits(tr, mat, mats.reflectivity[mat])

    def sensor_points_to(self, frame: str, xyz, hits, world=None):
        """Sensor-frame points -> ``"world"``, or ``"start"`` (the sensor frame at the
        scan's start: the same frame here, the scene being frozen; ``world`` unused)."""
        if frame == "world":
            R, t = self.sensor_to_world[:3, :3], self.sensor_to_world[:3, 3]
            return xyz @ R.T + t
        return np.asarray(xyz, dtype=np.float64)

    def surface(self, pattern, hits) -> dict:
        tr = hits.tr
        n_world, cos_inc = facing_normals(tr.normal, tr.last_dir)
        normal = n_world if self.frame_of_reference == "world" else n_world @ self._R  # world -> sensor: R^T n
        object_id, instancer_id, instance_id, semantic = self.snap.labels(tr.instance, self.semantic)
        return {"normal": normal, "cos_inc": cos_inc, "color": self.snap.materials.color[hits.mat],
                "object_id": object_id, "instancer_id": instancer_id, "instance_id": instance_id,
                "semantic": semantic}


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
        overrides: setting name -> value, applied over the camera's stored settings
            (``sensor_type`` and ``preset`` included); the camera is not changed.
        axes: ``"blensor"`` or ``"ros"`` (REP-103) for sensor-frame points, normals and
            the pose (:mod:`blensor_addon.core.axes`).
        packet_hashes: hash the geometry of every packet scanned (:attr:`last_packet_hash`,
            which the range-scan runner keeps in its manifest for ``--resume``); a sha256
            over every instance transform of every step, so single scans skip it.
    Raises:
        SettingsError: bad camera, setting, backend or frame of reference.
    """

    def __init__(self, camera_object, *, backend: str = "auto", seed: int | None = None,
                 frame_of_reference: str = "sensor", threads: int | None = None, shared: bool = False,
                 overrides: dict | None = None, axes: str = "blensor",
                 packet_hashes: bool = False) -> None:
        keep_freed_memory()  # once per process: a scan's arrays reuse freed pages (core/alloc.py)
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
        self.extractor = SceneExtractor()
        self.last_snapshot = None
        self._visibility = None  # VisibilitySwitch while the render visibility is applied
        self._semantic = None  # class id per object id
        s = self.settings
        ft = frame_time(scene)
        if s.time_model == "continuous" and not (ft / MAX_TIME_STEPS * (1 - 1e-9) <= s.time_step
                                                 <= ft * (1 + 1e-9)):
            raise SettingsError("time_step", f"in [{ft / MAX_TIME_STEPS:.3g}, {ft:.6g}] s (at most one "
                                f"scene frame and at least 1/{MAX_TIME_STEPS} of one: a scene evaluation per "
                                f"step, at {scene.render.fps / scene.render.fps_base:g} fps)", s.time_step)
        #: continuous time for this sensor: each ray at its firing time (swept sensors)
        self.timed = s.time_model == "continuous" and (self.sensor.sweep_period(s) is not None
                                                       or self.sensor.exposure_time(s) > 0)
        self._timeline = None
        self._timed_hash = None  # geometry hash of the last timed packet (last_packet_hash)
        self.packet_hashes = packet_hashes

    @property
    def sweep_period(self) -> float | None:
        """Seconds per full sweep of the sensor (None for image sensors)."""
        return self.sensor.sweep_period(self.settings)

    def packets(self, formats=()) -> str:
        """What one range-scan output holds: ``"sweep"`` or ``"frame"`` (setting
        ``packets``; ``auto`` = sweep for swept sensors in continuous time unless EVD is
        among ``formats``: EVD readers expect the original's per-frame sectors).

        Raises:
            SettingsError (``packets``): ``sweep`` for an image sensor."""
        p = self.settings.packets
        if self.sweep_period is None:
            if p == "sweep":
                raise SettingsError("packets", f"frame or auto for sensor type '{self.sensor.name}' (an image "
                                    "sensor takes one image per scene frame)", p)
            return "frame"
        if p == "auto":
            return "sweep" if self.settings.time_model == "continuous" and "evd" not in formats else "frame"
        return p

    def _ensure_visibility(self) -> bool:
        """Apply the render visibility (setting ``visibility = render``) once; returns
        whether it is the render evaluation that is scanned."""
        render = self.settings.visibility == "render"
        if render and self._visibility is None:
            self._visibility = apply_render_visibility(self.scene, bpy.context.view_layer)
        return render

    def _sample(self, frame: int, subframe: float):
        """Snapshot of the scene evaluated at ``frame + subframe``."""
        render = self._ensure_visibility()
        if self.scene.frame_current != frame or subframe or self.scene.frame_subframe:
            self.scene.frame_set(frame, subframe=subframe)
        snap = self.extractor.extract(bpy.context.evaluated_depsgraph_get(), self.camera, render)
        self.last_snapshot = snap
        return snap

    @property
    def timeline(self) -> Timeline:
        """The scene sampled over time (continuous time, or sweeps of frozen frames)."""
        if self._timeline is None:
            s = self.settings
            self._timeline = Timeline(self._sample, frame_time(self.scene), s.time_model == "continuous",
                                      s.time_step)
        return self._timeline

    def check_transforms(self, frames) -> None:
        """Continuous time: evaluate ``frames`` (scene frame numbers) as the scan will
        (render visibility applied) and refuse an object whose world matrix is not
        finite at one of them, before anything is scanned: the sensor and every
        geometry object that is scanned (not hidden from render). Each frame is one
        evaluation of the scene; no mesh is read. Instances (Geometry Nodes, collection
        instances, particles) are checked when their frame is scanned. Frozen frames
        leave such objects out with a warning instead.

        Raises:
            SettingsError (``transform of object 'NAME'``): naming the first one found.
        """
        if self.settings.time_model != "continuous":
            return
        from .extract import GEOMETRY_TYPES
        render = self._ensure_visibility()
        ft = frame_time(self.scene)
        old, old_sub = self.scene.frame_current, self.scene.frame_subframe
        cam = self.camera.name
        try:
            for f in frames:
                self.scene.frame_set(int(f))
                for ob in bpy.context.evaluated_depsgraph_get().objects:
                    orig = ob.original
                    if orig.name != cam and (ob.type not in GEOMETRY_TYPES or (render and orig.hide_render)):
                        continue
                    if not np.isfinite(np.array(ob.matrix_world, dtype=np.float64)).all():
                        raise non_finite_transform(orig.name, int(f) * ft, int(f))
        finally:
            self.scene.frame_set(old, subframe=old_sub)

    def scan_sweep(self, index: int) -> ScanResult:
        """Scan sweep ``index``: one full revolution or field-of-view sweep, the rays
        fired in ``[index * P, (index + 1) * P)`` s (P = :attr:`sweep_period`), over
        however many scene frames it spans. ``frame`` of the result is ``index``,
        ``frame_time`` is P, ``timestamp`` absolute, ``sensor_to_world`` the pose at the
        sweep's start (``sensor_to_world_end`` at its end, in continuous time).

        Raises:
            SettingsError: too many rays (named setting), or an object with a NaN/inf
            transform at some time of the sweep (continuous time).
        """
        P = self.sweep_period
        if P is None:
            raise SettingsError("packets", f"frame for sensor type '{self.sensor.name}'", "sweep")
        self.check_budget(index, "range", P)
        with single_blas_thread():
            return self._scan_timed(index, P, "range", index * P, (index + 1) * P)

    def _frame_interval(self, frame: int, mode: str) -> tuple[float, float]:
        """(t0, t1) s of a timed scan of scene frame ``frame``: the frame's span in a
        range scan of a swept sensor, else from the frame's time over one sweep or one
        image readout."""
        ft = frame_time(self.scene)
        span = self.sweep_period if self.sweep_period is not None else self.sensor.exposure_time(self.settings)
        t1 = (frame + 1) * ft if mode == "range" and self.sweep_period is not None else frame * ft + span
        return frame * ft, t1

    def packet_hash(self, index: int, packets: str) -> str:
        """Hash of the geometry a range-scan packet is cast in (``packets``: ``"sweep"``
        or ``"frame"``): of every step of a timed packet (both ends of each step, so a
        change of the animation anywhere in the packet shows), else of the frame's
        snapshot. Equal to :attr:`last_packet_hash` after that packet was scanned; resume
        compares them."""
        if packets == "sweep":
            P = self.sweep_period
            return self.timeline.geometry_hash(index * P, (index + 1) * P)
        if self.timed:
            return self.timeline.geometry_hash(*self._frame_interval(index, "range"))
        return self.snapshot(index).geometry.hash()

    @property
    def last_packet_hash(self) -> str | None:
        """Geometry hash of the last packet scanned, as :meth:`packet_hash` gives it (the
        steps of a timed packet, else the frame's snapshot; hashed only when asked). None
        before any scan, and after a timed scan by a scanner made without
        ``packet_hashes``."""
        if self._timed_hash is not None or (self.timed and not self.packet_hashes):
            return self._timed_hash
        return None if self.last_snapshot is None else self.last_snapshot.geometry.hash()

    def _semantic_of(self, objects) -> np.ndarray:
        """Semantic class id per object id of the object table ``objects`` (kept until the
        table grows; :func:`semantic_of_objects` refuses unknown class names)."""
        if self._semantic is None or self._semantic.shape[0] != len(objects) + 1:
            self._semantic = semantic_of_objects(objects)
        return self._semantic

    def _scan_timed(self, frame: int, ftime: float, mode: str, t0: float, t1: float) -> ScanResult:
        tl = self.timeline
        start = tl.step_at(t0).snap
        ctx = TimedContext(self.backend, tl, t0, t1, self.frame_of_reference, self.camera_frame,
                           self._semantic_of(start.objects), start.objects)
        result = self.sensor.scan(self.settings, ctx, frame=frame, frame_time=ftime, mode=mode)
        self.last_snapshot = start
        # now: the timeline keeps only recent steps
        self._timed_hash = tl.geometry_hash(t0, t1) if self.packet_hashes else None
        return to_axes(result, self.axes)

    @property
    def sensor_type(self) -> str:
        """Name of the sensor type scanned."""
        return self.sensor.name

    def check_budget(self, frame: int, mode: str, packet_time: float | None = None) -> int:
        """Refuse a scan of ``frame`` (or of sweep ``frame`` with ``packet_time`` = the
        sweep period, s) that would cast too many rays (SettingsError naming the setting),
        before anything is evaluated; returns the ray count."""
        ftime = frame_time(self.scene) if packet_time is None else packet_time
        return self.sensor.check_budget(self.settings, frame, ftime, mode, self.camera_frame)

    def snapshot(self, frame: int):
        """Evaluate scene frame ``frame`` and extract it (no ray is cast); also kept as
        :attr:`last_snapshot`. Returns a :class:`~blensor_addon.scene.extract.SceneSnapshot`."""
        return self._sample(frame, 0.0)

    def scan_frame(self, frame: int, mode: str = "single") -> ScanResult:
        """Evaluate scene frame ``frame`` and scan it with the camera's sensor.

        ``mode="single"``: one whole scan at this frame. ``mode="range"``: what the
        sensor sees during this frame of a range scan (a rotating LiDAR's sector swept
        in the frame, a line or planar scanner's sweeps, one image of a camera sensor).
        Rays are cast in chunks and only the returns are kept.

        Raises:
            SettingsError: the scan would cast more rays than allowed (named setting).
        """
        self.check_budget(frame, mode)
        with single_blas_thread():
            if self.timed:  # continuous time: the frame's rays (or one sweep from the frame) each at its time
                t0, t1 = self._frame_interval(frame, mode)
                return self._scan_timed(frame, frame_time(self.scene), mode, t0, t1)
            snap = self.snapshot(frame)
            self._timed_hash = None
            self.backend.set_geometry(snap.geometry)
            ctx = _Context(self.backend, snap, self.frame_of_reference, self.camera_frame,
                           self._semantic_of(snap.objects))
            result = self.sensor.scan(self.settings, ctx, frame=frame, frame_time=frame_time(self.scene),
                                      mode=mode)
            return to_axes(result, self.axes)

    def close(self) -> None:
        """Undo the render-visibility switches, free the ray caster's native memory and
        drop the scene samples (10^6 instances: ~100 MB each) at once, not at the next
        garbage collection (idempotent)."""
        self._timeline = None
        self.last_snapshot = None
        if self._visibility is not None:
            self._visibility.restore()
            self._visibility = None
        if not self._shared:
            self.backend.close()


#: Blender's largest frame number (MAXFRAME)
MAX_FRAME = 1048574


def scan(camera_object, *, frame: int | None = None, seed: int | None = None, backend: str = "auto",
         frame_of_reference: str = "sensor", axes: str = "blensor", **overrides) -> ScanResult:
    """Single scan of ``camera_object`` at ``frame`` (default: the current frame).

    ``overrides``: setting names of the camera's sensor type (or of ``sensor_type``, if
    given) plus ``sensor_type`` and ``preset``, e.g. ``scan(cam, sensor_type="tof",
    preset="sr4000", backfolding=True)``; the camera's stored settings are not changed.
    ``axes="ros"`` gives sensor-frame points, normals and the pose in REP-103 axes.
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
        return scanner.scan_frame(old if frame is None else int(frame), "single")
    finally:
        scanner.close()
        if scene.frame_current != old or scene.frame_subframe:
            scene.frame_set(old)


__all__ = ["Scanner", "scan", "read_settings", "read_sensor", "frame_time", "check_camera", "camera_frame",
           "SENSORS"]


# MERGE SHIM (jobs helper): remove at merge. The new scanner API (Scanner.scan(packet) ->
# (ScanResult, PacketRecord), Scanner.packet_hash(packet) -> str) over today's methods, so
# that the range-scan pipeline (jobs/pipeline.py) runs on this branch.
def _shim_scan(self, packet):
    from ..core.packets import PacketRecord
    if packet.kind == "sweep":
        result, t = self.scan_sweep(packet.index), packet.index * self.sweep_period
    else:
        result = self.scan_frame(packet.index, "single" if packet.kind == "single" else "range")
        t = packet.index * frame_time(self.scene)
    end = result.sensor_to_world_end
    pose = np.asarray(result.sensor_to_world, dtype=np.float64)
    end = None if end is None else np.asarray(end, dtype=np.float64)
    return result, PacketRecord(packet, float(t), pose, end, self.last_packet_hash)


_legacy_packet_hash = Scanner.packet_hash


def _shim_packet_hash(self, packet, packets=None):
    if packets is not None:  # the old call: (index, "sweep" | "frame")
        return _legacy_packet_hash(self, packet, packets)
    return _legacy_packet_hash(self, packet.index, "sweep" if packet.kind == "sweep" else "frame")


Scanner.scan = _shim_scan
Scanner.packet_hash = _shim_packet_hash
# END MERGE SHIM
