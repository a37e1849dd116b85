"""The sensor interface: :class:`Sensor` (one instance per sensor type), the swept-sensor
base :class:`SweptSensor`, and what a sensor gets from the scene layer
(:class:`~.protocols.ScanContext`, :class:`~.protocols.Hits`, defined in
:mod:`.protocols` below :mod:`.physics`, which uses them too).

A sensor type is one module of :mod:`blensor_addon.core.sensors` (or a plug-in, see
:func:`blensor_addon.register_sensor`) that defines a :class:`Sensor` subclass
instance named ``SENSOR``. Its settings are a frozen dataclass (subclass of
:class:`~blensor_addon.core.settings.SensorSettings`) whose fields are declared with
:func:`~blensor_addon.core.settings.setting`. It declares what it produces with
:meth:`Sensor.capabilities` (:mod:`blensor_addon.core.capabilities`), which every
result it returns carries as ``result.capabilities``.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from ..capabilities import Capabilities, Timing
from ..errors import SettingsError, did_you_mean
from ..result import FIELDS, ScanResult
from ..settings import SensorSettings, setting_value
from .budget import CHUNK_RAYS, refuse_rays
from .raypattern import CameraFrame, RayPattern, angles_of, sweep_column_count, sweep_columns, sweep_count
from . import beam, intensity, weather
from .physics import assemble, elevation_rank, frame_rng, min_range_mask, returns_mask
from .protocols import ScanContext
from .returns import (STAGE_BEAM, STAGE_CAST, STAGE_WEATHER, Returns, ReturnSettings, return_capabilities,
                      stage_rng)


def echo_hits(hits, ret: Returns):
    """The hits of the returns ``ret`` (K rows: ``hits.take(ret.row)``) with the returns'
    ``range``, ``returned`` and ``energy``; a weather return's surface fields cleared
    (object, instancer and instance id 0, semantic
    :data:`~.weather.WEATHER_SEMANTIC`, reflectivity 0, normal and colour 0), so the
    sensor's :meth:`Sensor.returns` and :meth:`Sensor.detected` judge echoes as they judge
    single rays."""
    echo = hits.take(ret.row)
    echo.range = ret.range
    echo.returned = ret.returned
    echo.energy = ret.energy
    echo.reflectivity = np.asarray(ret.reflectivity, dtype=np.float32)
    w = np.flatnonzero(ret.weather)
    if w.size:
        for name in ("object_id", "instancer_id", "instance_id"):
            getattr(echo, name)[w] = 0
        echo.semantic[w] = weather.WEATHER_SEMANTIC
        echo.normal[w] = 0.0
        echo.color[w] = 0
        echo.hit[w] = True
    return echo


def _beam_chunks(patterns, per_beam: int):
    """The chunks of ``patterns`` (an iterable of :class:`RayPattern`) cut into pieces of
    at most ``CHUNK_RAYS // per_beam`` beams (whole chunks when they fit, as with one
    sub-ray per beam)."""
    step = max(1, CHUNK_RAYS // max(1, int(per_beam)))
    for pattern in patterns:
        n = len(pattern)
        if n <= step:
            yield pattern
            continue
        for i in range(0, n, step):
            yield pattern.take(np.arange(i, min(n, i + step)))


class Sensor:
    """A sensor type. Subclasses set the class attributes and implement :meth:`patterns`
    (and :meth:`measure` if the returns are not simply "hit within max_range"), or
    override :meth:`trace` for several passes (the Kinect casts twice); :meth:`scan`
    adds the sensor's metadata and :meth:`capabilities` to every result.

    Class attributes:
        name: type name (``"rotating"``); label; description (one line).
        Settings: the settings dataclass; presets: preset id ->
            :class:`~blensor_addon.core.settings.Preset`.
        storage: where Blender keeps the type's settings on ``Camera.blensor``: a
            nested group of that name, or ``""`` for the group itself (the rotating
            LiDAR, as v0.1 stored it); None: the registry sets the type's name.
        uses_camera: the sensor takes its image from the Blender camera's intrinsics.
        organized: an image sensor: organized outputs hold every pixel.
        number: the value Blender stores for this type in ``Camera.blensor.sensor_type``
            (an int in [0, 2**31 - 1], unique among the registered types): the built-in
            types have 0..5; a plug-in may declare one, else the registry derives a
            stable one from its name (:func:`blensor_addon.core.sensors.register_sensor`).
        extra_fields: names of per-point fields the sensor adds in ``result.extra``
            (declared in its :meth:`capabilities`).
        period_setting: the setting that sets :meth:`sweep_period` (``Timing.setting``:
            a plan of too many packets names it); ``""``: none.
    """

    name = ""
    label = ""
    description = ""
    Settings: type = SensorSettings
    presets: dict = {}
    storage: str | None = None
    uses_camera = False
    organized = False
    number: int | None = None
    extra_fields: tuple = ()
    period_setting = ""
    #: settings naming a file, whose ``//`` (relative to the open .blend) the scanner
    #: makes absolute (:func:`blensor_addon.scene.scanner.blend_paths`)
    path_settings: tuple[str, ...] = ()

    # -- settings ---------------------------------------------------------------------
    def settings(self, values: dict | None = None):
        """Validated settings from ``values`` (name -> value; missing names take their
        defaults).

        Raises:
            SettingsError: unknown name or value out of range.
        """
        values = dict(values or {})
        names = {f.name for f in dataclasses.fields(self.Settings)}
        for k in values:
            if k not in names:
                raise SettingsError(k, f"a setting of sensor type '{self.name}': " + ", ".join(sorted(names)),
                                    values[k], did_you_mean(k, names))
        return self.Settings(**values).validate()

    def preset_values(self, preset: str) -> dict:
        """The values preset ``preset`` sets (``preset`` included).

        Raises:
            SettingsError (``preset``): not a preset of this sensor type.
        """
        if preset not in self.presets:
            raise SettingsError("preset", f"one of {', '.join(self.presets)} (presets of sensor type "
                                f"'{self.name}')", preset, did_you_mean(preset, self.presets))
        return {"preset": preset, **self.presets[preset].values}

    # -- scanning ---------------------------------------------------------------------
    def grid_shape(self, s, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> tuple:
        """(rows, cols) of the sensor's grid for this scan."""
        raise NotImplementedError

    def check_budget(self, s, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> int:
        """Refuse a scan that would cast too many rays, before anything is allocated;
        returns the ray count. Default: rows x cols of :meth:`grid_shape`."""
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        return int(rows) * int(cols)

    def patterns(self, s, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        """The scan's rays in chunks of about :data:`CHUNK_RAYS` (at least one, maybe
        empty). ``mode``: ``"single"`` (a single scan at ``frame``) or ``"range"`` (what
        the sensor sees during frame ``frame`` of a range scan)."""
        raise NotImplementedError

    def intrinsics(self, s, camera: CameraFrame | None) -> tuple:
        """(fx, fy, cx, cy) of an image sensor (:func:`pinhole_intrinsics`); () otherwise."""
        return ()

    def sweep_period(self, s) -> float | None:
        """Seconds per full sweep (revolution or field-of-view sweep) of a swept sensor,
        the length of one ``packets="sweep"`` output; None for image sensors (one image
        per scene frame)."""
        return None

    def exposure_time(self, s) -> float:
        """Seconds over which one image's rays fire (a rolling readout, continuous time);
        0 = a global shutter (every ray at the frame's time). Image sensors only."""
        return 0.0

    def channel_elevations(self, s) -> np.ndarray:
        """(L,) float64 nominal elevation (deg) of each channel, for the elevation rank
        (``ring``); default one channel at 0."""
        return np.zeros(1)

    def channel_rings(self, s) -> np.ndarray:
        """(L,) uint16 ring number of each channel as the vendor's driver numbers them;
        default: the rank of :meth:`channel_elevations`, 0 = lowest (velodyne_pointcloud)."""
        return elevation_rank(self.channel_elevations(s))

    def range_offset(self, s) -> float:
        """Metres the sensor adds to the path it measured along a ray (from the ray's
        origin) when it reports the range; the points stay on the path. Default 0; an
        Ouster reports the path from its beam origin plus the origin's distance from the
        axis (Ouster's range convention, :mod:`.rotating`)."""
        return 0.0

    def max_range(self, s) -> float:
        """Longest accumulated path cast (m)."""
        return float(s.max_range)

    def reported_range(self, s) -> float:
        """Longest range the sensor reports (m): what range images scale to and ROS
        ``LaserScan.range_max`` says. Default :meth:`max_range`; a sensor that casts
        farther than it reports (the Kinect's corner rays) overrides it."""
        return self.max_range(s)

    def returns(self, s, pattern: RayPattern, hits) -> np.ndarray:
        """(N,) bool: which rays return (default: a hit within ``max_range``)."""
        return hits.hit & (hits.range <= self.max_range(s))

    def measure(self, s, pattern: RayPattern, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Measured (noisy) range of the returning rays: (N,) float64 m from the clean
        ranges ``r`` (N,) float64. Default: no noise (``r`` itself)."""
        return r

    def detected(self, s, pattern: RayPattern, hits, r_noisy: np.ndarray) -> np.ndarray | None:
        """(N,) bool: which of the rays :meth:`returns` kept the receiver detects, given
        their measured ranges ``r_noisy`` (N,) float64 m as reported (noise and
        :meth:`range_offset` included): seed 002 section II-D decides at "its depth d
        (including Gaussian noise)"; a minimum range applies to the measured range too.
        None: all of them. Default: those at or beyond the settings' ``min_range``
        (:func:`~.physics.min_range_mask`; None if the settings have none or it is 0)."""
        return min_range_mask(s, r_noisy)

    def finish(self, s, result: ScanResult) -> ScanResult:
        """Last changes to the result (default none)."""
        return result

    def capabilities(self, s, camera: CameraFrame | None = None) -> Capabilities:
        """What this sensor produces with settings ``s`` (and the Blender camera's image
        ``camera``, for a sensor that uses it): the writers and the range-job plan read
        this, never the settings or the type name.

        Default: timing ``sweep`` with :meth:`sweep_period` when it is not None, else
        ``exposure`` over :meth:`exposure_time`; grid: the (rows, cols) of one whole scan
        (:meth:`grid_shape` of a single scan: laser x column of one sweep, or image row x
        column); organized: :attr:`organized`; fields: every
        :data:`~blensor_addon.core.result.FIELDS` name, then ``xyz_deskewed`` and
        ``xyz_noisy_deskewed`` when ``s.deskew``, then :attr:`extra_fields`; the return
        settings (``returns``, ``divergence_algorithm``, ``intensity_model``:
        :func:`~.returns.return_capabilities`). A sensor with a pattern that never repeats
        overrides it (timing ``stream``, grid None).
        """
        period = self.sweep_period(s)
        timing = Timing("sweep", float(period), setting=self.period_setting) if period is not None else \
            Timing("exposure", exposure=float(self.exposure_time(s)))
        grid = tuple(int(v) for v in self.grid_shape(s, 0, 1.0, "single", camera))
        deskew = ("xyz_deskewed", "xyz_noisy_deskewed") if s.deskew else ()
        multi = ("return_number", "number_of_returns") if isinstance(s, ReturnSettings) and s.multi_return \
            else ()
        return Capabilities(timing=timing, grid=grid, organized=bool(self.organized),
                            fields=(*FIELDS, *deskew, *multi, *self.extra_fields),
                            max_range=self.reported_range(s), min_range=float(setting_value(s, "min_range")),
                            **return_capabilities(s))

    def trace(self, s, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """The scan's returns. A sensor with :class:`~.returns.ReturnSettings` is traced
        beam by beam (:meth:`trace_beams`); any other casts :meth:`patterns` chunk by
        chunk, keeps :meth:`returns`, draws :meth:`measure` from the frame's generator,
        keeps :meth:`detected` (at the reported measured range, :meth:`range_offset`
        added) and assembles the result (rings from :meth:`channel_rings`). A sensor
        that casts several passes (the Kinect) overrides this."""
        if isinstance(s, ReturnSettings):
            return self.trace_beams(s, ctx, frame=frame, frame_time=frame_time, mode=mode)
        grid = self.grid_shape(s, frame, frame_time, mode, ctx.camera)
        parts, rays = [], 0
        for pattern in self.patterns(s, frame, frame_time, mode, ctx.camera):
            o = None if pattern.origins is None else pattern.origins.astype(np.float64)
            hits = ctx.cast(o, pattern.directions.astype(np.float64), self.max_range(s), s.max_bounces,
                            times=pattern.timestamp)
            keep = self.returns(s, pattern, hits)
            rays += len(pattern)
            parts.append((pattern.take(keep), hits.take(keep)))
        if len(parts) == 1:
            pattern, hits = parts[0]
        else:
            pattern = RayPattern.concat([p for p, _ in parts])
            hits = type(parts[0][1]).concat([h for _, h in parts])
        return self._measure_and_assemble(s, ctx, pattern, hits, frame=frame, frame_time=frame_time,
                                          rays=rays, grid=grid)

    def trace_beams(self, s, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """The scan's returns under the return physics (:mod:`.returns`, module
        docstring's stages 1-6), chunk by chunk of :meth:`patterns`: sub-rays
        (:func:`~.beam.footprint`), cast with ``split=True`` and the sensor's
        ``wavelength``, echoes (:func:`~.beam.form_returns`), weather
        (:func:`~.weather.apply`), then :meth:`returns` on the echoes (their
        ``returned`` reflectivity and range), :meth:`measure` (plus the weather's range
        noise), :meth:`detected`, the intensity (:func:`~.intensity.intensity`) and, when
        the settings give several returns per beam, ``return_number`` and
        ``number_of_returns``. A pattern chunk is cut into pieces of at most
        :data:`~.budget.CHUNK_RAYS` sub-rays (:func:`_beam_chunks`), so memory stays that
        of one chunk of rays whatever ``samples_per_beam``."""
        grid = self.grid_shape(s, frame, frame_time, mode, ctx.camera)
        max_range = self.max_range(s)
        parts, rays, several = [], 0, False
        for k, pattern in enumerate(_beam_chunks(self.patterns(s, frame, frame_time, mode, ctx.camera),
                                                 beam.sub_rays_per_beam(s))):
            sub = beam.footprint(s, pattern)
            hits = ctx.cast(sub.origins, sub.directions, max_range, s.max_bounces, times=sub.times,
                            split=True, rng=stage_rng(s.seed, frame, k, STAGE_CAST),
                            wavelength=float(s.wavelength), bundle=sub.per_beam,
                            acceptance=beam.specular_acceptance(s))
            ret = beam.form_returns(s, sub, hits, max_range, stage_rng(s.seed, frame, k, STAGE_BEAM),
                                    select=False)
            ret = weather.apply(s, ret, sub, stage_rng(s.seed, frame, k, STAGE_WEATHER))
            echo = echo_hits(hits, ret)
            keep = self.returns(s, pattern, echo)
            several |= bool(len(ret) > 1 and (ret.beam[1:] == ret.beam[:-1]).any())
            rays += len(pattern)
            parts.append((pattern.take(ret.beam[keep]), echo.take(keep), ret.take(keep)))
            del sub, hits, ret, echo  # one chunk's rays alive at a time
        if len(parts) == 1:
            pattern, hits, ret = parts[0]
        else:
            pattern = RayPattern.concat([p for p, _, _ in parts])
            hits = type(parts[0][1]).concat([h for _, h, _ in parts])
            ret = Returns.concat([r for _, _, r in parts], [0] * len(parts), [0] * len(parts))
        extra = {}
        if s.multi_return:
            extra = {"return_number": ret.return_number, "number_of_returns": ret.number_of_returns}
        return self._measure_and_assemble(s, ctx, pattern, hits, frame=frame, frame_time=frame_time,
                                          rays=rays, grid=grid, ret=ret, extra=extra, select=several)

    def _measure_and_assemble(self, s, ctx, pattern, hits, *, frame, frame_time, rays, grid, ret=None,
                              extra=None, select=False) -> ScanResult:
        """:meth:`measure`, :meth:`detected`, then :func:`~.physics.assemble` of the kept
        returns (``ret``: their :class:`~.returns.Returns` under the return physics, for
        the weather's range noise and the intensity; ``extra``: per-return fields).
        ``select``: some beam has several detected echoes: the returns mode chooses among
        the detected ones (:func:`~.beam.select_returns`: a beam whose strongest echo is
        not detected reports the strongest that is)."""
        if ret is not None:  # take and concat keep the protocol's fields only
            hits.returned, hits.energy = ret.returned, ret.energy
        r = np.asarray(hits.range, dtype=np.float64)
        r_noisy = self.measure(s, pattern, r, frame_rng(s.seed, frame))
        if ret is not None and ret.range_noise is not None:
            r_noisy = r_noisy + ret.range_noise
        offset = float(self.range_offset(s))
        seen = self.detected(s, pattern, hits, r_noisy + offset if offset else r_noisy)
        if seen is not None and not seen.all():
            pattern, hits, r = pattern.take(seen), hits.take(seen), r[seen]
            r_noisy = r if r_noisy is r else r_noisy[seen]
            if ret is not None:
                ret = ret.take(seen)
                extra = {k: v[seen] for k, v in (extra or {}).items()}
        if select:  # the returns mode, among the echoes detected
            chosen = beam.select_returns(s, pattern.ray_index, r, ret.energy)
            if chosen is not None and chosen.shape[0] < r.shape[0]:
                pattern, hits, r = pattern.take(chosen), hits.take(chosen), r[chosen]
                r_noisy = r if r_noisy is r else r_noisy[chosen]
                ret = ret.take(chosen)
                extra = {k: v[chosen] for k, v in (extra or {}).items()}
                hits.returned, hits.energy = ret.returned, ret.energy
        if extra and "return_number" in extra:  # count the returns kept, not formed
            numbers = beam.rank_returns(pattern.ray_index, hits.range)
            extra["return_number"], extra["number_of_returns"] = numbers
        value = None
        if ret is not None:
            value = intensity.intensity(s, ret, r, self.capabilities(s, ctx.camera).device)
        return assemble(pattern, hits, r, r_noisy, ctx, s, frame=frame, frame_time=frame_time, num_rays=rays,
                        grid_shape=grid, channel_elevations=self.channel_elevations(s),
                        channel_rings=self.channel_rings(s), range_offset=offset, intensity=value,
                        extra=extra)

    def scan(self, s, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """One scan: :meth:`trace`, then the sensor's metadata on the result
        (``sensor_type``, ``organized``, ``intrinsics``, ``capabilities``), then
        :meth:`finish`."""
        result = self.trace(s, ctx, frame=frame, frame_time=frame_time, mode=mode)
        result.sensor_type = self.name
        result.organized = self.organized
        result.intrinsics = self.intrinsics(s, ctx.camera)
        result.capabilities = self.capabilities(s, ctx.camera)
        return self.finish(s, result)


class SweptSensor(Sensor):
    """A sensor that sweeps :meth:`columns` columns over its field of view once per
    ``1 / s.rotation_speed`` s, firing :meth:`lasers` rays per column (line and planar
    scanners, reference 6.2 and 6.3), with the reflectivity limit of seed 000 Eq. 1.
    Subclasses give :meth:`lasers` and :meth:`directions`."""

    period_setting = "rotation_speed"

    def lasers(self, s) -> int:
        """Rays per column."""
        raise NotImplementedError

    def directions(self, s, angle_deg: np.ndarray) -> np.ndarray:
        """(C, L, 3) float64 unit ray directions (sensor frame) of the columns at
        sweep angles ``angle_deg`` (C,) = ``start_angle + column * angle_resolution``."""
        raise NotImplementedError

    def grid_shape(self, s, frame, frame_time, mode, camera):
        return (self.lasers(s), sweep_count(self.columns(s), s.rotation_speed, frame, frame_time, mode))

    @staticmethod
    def columns(s) -> int:
        """Columns of one sweep (:func:`~.patterns.sweep_column_count` of the settings'
        ``start_angle``, ``end_angle``, ``angle_resolution``)."""
        return sweep_column_count(s.start_angle, s.end_angle, s.angle_resolution)

    def sweep_period(self, s):
        return 1.0 / s.rotation_speed

    def check_budget(self, s, frame, frame_time, mode, camera):
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        # one sweep too many: only the resolution helps; more than a sweep in the frame
        # (a range scan's frame of a fast head): the rotation speed
        refuse_rays(rows * min(cols, self.columns(s)), "angle_resolution", s.angle_resolution, unit="deg")
        if mode == "range" and cols > self.columns(s):
            refuse_rays(rows * cols, "rotation_speed", s.rotation_speed, grows=True, unit="Hz")
        return rows * cols

    def column_times(self, s, frame: int, frame_time: float, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """The scan's columns in firing order, (C,) int64 indices into the sweep, and
        their firing times (C,) float64 s. Default: :func:`~.patterns.sweep_columns`, the
        columns spread evenly over the sweep period."""
        return sweep_columns(self.columns(s), s.rotation_speed, frame, frame_time, mode)

    def column_rays(self, s, col: np.ndarray) -> np.ndarray:
        """(C, L, 3) float64 unit ray directions (sensor frame) of the sweep's columns
        ``col`` (C,) int64, as :meth:`column_times` numbers them. Default: :meth:`directions`
        at ``start_angle + col * angle_resolution`` (deg)."""
        return self.directions(s, s.start_angle + col * s.angle_resolution)

    def patterns(self, s, frame, frame_time, mode, camera):
        """The columns of :meth:`column_times`, :meth:`lasers` rays each
        (:meth:`column_rays`); ``ray_index = laser * C + position`` in firing order."""
        col, stamp = self.column_times(s, frame, frame_time, mode)
        L = self.lasers(s)
        C = col.shape[0]
        step = max(1, CHUNK_RAYS // L)
        for i in range(0, max(1, C), step):
            c = col[i:i + step]
            d = self.column_rays(s, c).reshape(-1, 3)
            az, el = angles_of(d)
            local = np.arange(i, i + c.shape[0], dtype=np.int64)
            yield RayPattern(
                directions=d.astype(np.float32), azimuth=az, elevation=el,
                channel=np.tile(np.arange(L, dtype=np.uint16), c.shape[0]),
                ray_index=(np.arange(L, dtype=np.int64)[None, :] * C + local[:, None]).ravel(),
                timestamp=np.repeat(stamp[i:i + step], L))

    def returns(self, s, pattern, hits):
        return returns_mask(hits, s)
