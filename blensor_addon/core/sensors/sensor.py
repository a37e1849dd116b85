"""The sensor interface: :class:`Sensor` (one instance per sensor type, generic in its
settings class), the swept-sensor base :class:`SweptSensor`, the one detection and
assembly path every variant's returns take (:class:`Traced`,
:meth:`Sensor.detect_and_assemble`), and what a sensor gets from the scene layer
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
from dataclasses import dataclass, field
from typing import Any, Generic, Iterable, Iterator, Mapping, TypeVar, cast

import numpy as np

from ..capabilities import Capabilities, Timing
from ..errors import SettingsError, did_you_mean
from ..ndtypes import F64, I64, U16, Array, Bool
from ..result import FIELDS, ScanResult
from ..settings import Preset, SensorSettings, setting_value
from .budget import CHUNK_RAYS, refuse_rays
from .raypattern import CameraFrame, RayPattern, angles_of, sweep_column_count, sweep_columns, sweep_count
from . import beam, intensity, weather
from .physics import assemble, elevation_rank, frame_rng, min_range_mask, returns_mask
from .protocols import EchoHits, Hits, ScanContext
from .returns import (STAGE_BEAM, STAGE_CAST, STAGE_WEATHER, Returns, ReturnSettings, return_capabilities,
                      stage_rng)

#: the settings class of a sensor type
S = TypeVar("S", bound=SensorSettings)


def echo_hits(hits: Hits, ret: Returns) -> EchoHits:
    """The hits of the returns ``ret`` (K rows: ``hits.take(ret.row)``) with the returns'
    ``range``, ``returned`` and ``energy``; a weather return's surface fields cleared
    (object, instancer and instance id 0, semantic
    :data:`~.weather.WEATHER_SEMANTIC`, reflectivity 0, normal and colour 0), so the
    sensor's :meth:`Sensor.returns` and :meth:`Sensor.detected` judge echoes as they judge
    single rays."""
    echo = cast(EchoHits, hits.take(ret.row))  # the attributes set here make it one
    echo.range = ret.range
    echo.returned = ret.returned
    echo.energy = ret.energy
    echo.reflectivity = np.asarray(ret.reflectivity, dtype=np.float32)
    w = np.flatnonzero(ret.weather)
    if w.size:
        echo.object_id[w] = 0
        echo.instancer_id[w] = 0
        echo.instance_id[w] = 0
        echo.semantic[w] = weather.WEATHER_SEMANTIC
        echo.normal[w] = 0.0
        echo.color[w] = 0
        echo.hit[w] = True
    return echo


def _own_rows(hits: Hits) -> Hits:
    """``hits`` in arrays of their own (``concat`` of it alone): the hits a chunk keeps
    may be rows taken from its whole cast (the scene layer's takes copy a field when it is
    first read), which would hold every ray of the chunk while the next one is cast; a
    scan's memory is to grow with the returns it keeps, not with its chunks."""
    return type(hits).concat([hits])


def _beam_chunks(patterns: Iterable[RayPattern], per_beam: int) -> Iterator[RayPattern]:
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


def uses_lobes(s: SensorSettings) -> bool:
    """The cast's ``lobes`` for settings ``s``: True under ``return_model="radiometric"``
    (glossy and retroreflective materials' lobes, :class:`~.protocols.ScanContext`), False
    for every other model (the Lambertian reflectivity of the limit and linear models)."""
    return bool(setting_value(s, "return_model") == "radiometric")


@dataclass
class Traced:
    """What a sensor's cast step (:meth:`Sensor.cast_returns`) gives the one detection and
    assembly path (:meth:`Sensor.detect_and_assemble`): the rays that came back, before
    the noise and the receiver's detection.

    Attributes:
        pattern: the N returning rays (or echoes' beams), sensor frame.
        hits: their hits (N rows; echo hits under the return physics, :func:`echo_hits`).
        num_rays: rays cast (``ScanResult.num_rays``).
        grid: (rows, cols) of the scan's grid (``ScanResult.grid_shape``; ``()``: none).
        returns: the N returns' :class:`~.returns.Returns` under the return physics (for
            the weather's range noise and the intensity), else None.
        measured: (N,) float64 m, the measured ranges of a sensor that measured them
            while casting (the Kinect's quantized disparity), else None:
            :meth:`Sensor.measure` draws them from the frame's generator.
        extra: per-return fields (name -> (N,) array; ``return_number`` and
            ``number_of_returns`` are counted again after detection).
        select: some beam has several echoes: the returns mode chooses among the detected
            ones (:func:`~.beam.select_returns`).
    """

    pattern: RayPattern
    hits: Hits
    num_rays: int
    grid: tuple[int, ...]
    returns: Returns | None = None
    measured: F64 | None = None
    extra: dict[str, Array] = field(default_factory=dict)
    select: bool = False


class Sensor(Generic[S]):
    """A sensor type, generic in its settings class ``S``. Subclasses set the class
    attributes and implement :meth:`patterns` (and :meth:`measure` if the returns are not
    simply "hit within max_range"), or override :meth:`cast_returns` for several passes (the
    Kinect casts twice); every variant's returns go through one path,
    :meth:`detect_and_assemble`; :meth:`scan` adds the sensor's metadata and
    :meth:`capabilities` to every result.

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

    name: str = ""
    label: str = ""
    description: str = ""
    Settings: type[SensorSettings] = SensorSettings
    presets: dict[str, Preset] = {}
    storage: str | None = None
    uses_camera: bool = False
    organized: bool = False
    number: int | None = None
    extra_fields: tuple[str, ...] = ()
    period_setting: str = ""
    #: settings naming a file, whose ``//`` (relative to the open .blend) the scanner
    #: makes absolute (:func:`blensor_addon.scene.scanner.blend_paths`)
    path_settings: tuple[str, ...] = ()

    # -- settings ---------------------------------------------------------------------
    def settings(self, values: Mapping[str, Any] | None = None) -> S:
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
        return cast(S, self.Settings(**values).validate())  # Settings is the class of S

    def preset_values(self, preset: str) -> dict[str, Any]:
        """The values preset ``preset`` sets (``preset`` included).

        Raises:
            SettingsError (``preset``): not a preset of this sensor type.
        """
        if preset not in self.presets:
            raise SettingsError("preset", f"one of {', '.join(self.presets)} (presets of sensor type "
                                f"'{self.name}')", preset, did_you_mean(preset, self.presets))
        return {"preset": preset, **self.presets[preset].values}

    # -- scanning ---------------------------------------------------------------------
    def grid_shape(self, s: S, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        """(rows, cols) of the sensor's grid for this scan (``()``: a pattern without one)."""
        raise NotImplementedError

    def check_budget(self, s: S, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> int:
        """Refuse a scan that would cast too many rays, before anything is allocated;
        returns the ray count. Default: rows x cols of :meth:`grid_shape`."""
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        return int(rows) * int(cols)

    def patterns(self, s: S, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        """The scan's rays in chunks of about :data:`CHUNK_RAYS` (at least one, maybe
        empty). ``mode``: ``"single"`` (a single scan at ``frame``) or ``"range"`` (what
        the sensor sees during frame ``frame`` of a range scan)."""
        raise NotImplementedError

    def intrinsics(self, s: S, camera: CameraFrame | None) -> tuple[float, ...]:
        """(fx, fy, cx, cy) of an image sensor (:func:`pinhole_intrinsics`); () otherwise."""
        return ()

    def sweep_period(self, s: S) -> float | None:
        """Seconds per full sweep (revolution or field-of-view sweep) of a swept sensor,
        the length of one ``packets="sweep"`` output; None for image sensors (one image
        per scene frame)."""
        return None

    def exposure_time(self, s: S) -> float:
        """Seconds over which one image's rays fire (a rolling readout, continuous time);
        0 = a global shutter (every ray at the frame's time). Image sensors only."""
        return 0.0

    def channel_elevations(self, s: S) -> F64 | tuple[float, ...]:
        """(L,) float64 nominal elevation (deg) of each channel, for the elevation rank
        (``ring``); default one channel at 0."""
        return np.zeros(1)

    def channel_rings(self, s: S) -> U16:
        """(L,) uint16 ring number of each channel as the vendor's driver numbers them;
        default: the rank of :meth:`channel_elevations`, 0 = lowest (velodyne_pointcloud)."""
        return elevation_rank(self.channel_elevations(s))

    def range_offset(self, s: S) -> float:
        """Metres the sensor adds to the path it measured along a ray (from the ray's
        origin) when it reports the range; the points stay on the path. Default 0; an
        Ouster reports the path from its beam origin plus the origin's distance from the
        axis (Ouster's range convention, :mod:`.rotating`)."""
        return 0.0

    def max_range(self, s: S) -> float:
        """Longest accumulated path cast (m): the settings' ``max_range``."""
        return float(setting_value(s, "max_range"))

    def reported_range(self, s: S) -> float:
        """Longest range the sensor reports (m): what range images scale to and ROS
        ``LaserScan.range_max`` says. Default :meth:`max_range`; a sensor that casts
        farther than it reports (the Kinect's corner rays) overrides it."""
        return self.max_range(s)

    def returns(self, s: S, pattern: RayPattern, hits: Hits) -> Bool:
        """(N,) bool: which rays return (default: a hit within ``max_range``)."""
        return hits.hit & (hits.range <= self.max_range(s))

    def measure(self, s: S, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        """Measured (noisy) range of the returning rays: (N,) float64 m from the clean
        ranges ``r`` (N,) float64. Default: no noise (``r`` itself)."""
        return r

    def detected(self, s: S, pattern: RayPattern, hits: Hits, r_noisy: F64) -> Bool | None:
        """(N,) bool: which of the rays :meth:`returns` kept the receiver detects, given
        their measured ranges ``r_noisy`` (N,) float64 m as reported (noise and
        :meth:`range_offset` included): seed 002 section II-D decides at "its depth d
        (including Gaussian noise)"; a minimum range applies to the measured range too.
        None: all of them. Default: those at or beyond the settings' ``min_range``
        (:func:`~.physics.min_range_mask`; None if the settings have none or it is 0)."""
        return min_range_mask(s, r_noisy)

    def receive(self, s: S, traced: Traced, frame: int, ctx: ScanContext | None = None) -> Traced:
        """The receiver's stage of :meth:`detect_and_assemble`, first on its path: a sensor
        that decides detection and the measured ranges from the returns' received power
        gives the detected rows with ``measured`` set (the rotating LiDAR's
        ``return_model="radiometric"``, :mod:`.radiometry`; ``ctx`` the scan's context, for
        the scene's ambient light). Default: ``traced`` itself."""
        return traced

    def finish(self, s: S, result: ScanResult) -> ScanResult:
        """Last changes to the result (default none)."""
        return result

    def capabilities(self, s: S, camera: CameraFrame | None = None) -> Capabilities:
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
        # (rows, cols) of a grid sensor (a sensor without a grid overrides this method)
        grid = cast("tuple[int, int]", tuple(int(v) for v in self.grid_shape(s, 0, 1.0, "single", camera)))
        deskew = ("xyz_deskewed", "xyz_noisy_deskewed") if s.deskew else ()
        multi = ("return_number", "number_of_returns") if isinstance(s, ReturnSettings) and s.multi_return \
            else ()
        return Capabilities(timing=timing, grid=grid, organized=bool(self.organized),
                            fields=(*FIELDS, *deskew, *multi, *self.extra_fields),
                            max_range=self.reported_range(s), min_range=float(setting_value(s, "min_range")),
                            **return_capabilities(s))

    def trace(self, s: S, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """The scan's returns: :meth:`cast_returns` (the variant's rays and hits), then the one
        detection and assembly path, :meth:`detect_and_assemble`."""
        # (no name kept here: the cast's rows are freed once detection replaces them, one copy held)
        return self.detect_and_assemble(
            s, ctx, self.cast_returns(s, ctx, frame=frame, frame_time=frame_time, mode=mode), frame=frame,
            frame_time=frame_time)

    def cast_returns(self, s: S, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> Traced:
        """The rays that come back, before noise and detection. A sensor with
        :class:`~.returns.ReturnSettings` is cast beam by beam (:meth:`cast_beams`); any
        other ray by ray (:meth:`cast_rays`). A sensor that casts several passes (the
        Kinect) overrides this."""
        if isinstance(s, ReturnSettings):
            return self.cast_beams(s, ctx, frame=frame, frame_time=frame_time, mode=mode)
        return self.cast_rays(s, ctx, frame=frame, frame_time=frame_time, mode=mode)

    def cast_rays(self, s: S, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> Traced:
        """One ray per ray: casts :meth:`patterns` chunk by chunk and keeps :meth:`returns`."""
        grid = self.grid_shape(s, frame, frame_time, mode, ctx.camera)
        parts: list[tuple[RayPattern, Hits]] = []
        rays = 0
        for pattern in self.patterns(s, frame, frame_time, mode, ctx.camera):
            if parts:  # a further chunk: the kept hits of the last one in arrays of their own
                parts[-1] = (parts[-1][0], _own_rows(parts[-1][1]))
            o = None if pattern.origins is None else pattern.origins.astype(np.float64)
            hits = ctx.cast(o, pattern.directions.astype(np.float64), self.max_range(s), s.max_bounces,
                            times=pattern.timestamp, lobes=uses_lobes(s))
            keep = self.returns(s, pattern, hits)
            rays += len(pattern)
            parts.append((pattern.take(keep), hits.take(keep)))
        if len(parts) == 1:
            pattern, hits = parts[0]
        else:
            pattern = RayPattern.concat([p for p, _ in parts])
            hits = type(parts[0][1]).concat([h for _, h in parts])
        return Traced(pattern, hits, num_rays=rays, grid=grid)

    def cast_beams(self, s: S, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> Traced:
        """The return physics (:mod:`.returns`, module docstring's stages 1-4; ``s`` a
        :class:`~.returns.ReturnSettings`), chunk by chunk of :meth:`patterns`: sub-rays
        (:func:`~.beam.footprint`), cast with ``split=True`` and the sensor's
        ``wavelength``, echoes (:func:`~.beam.form_returns`), weather
        (:func:`~.weather.apply`), then :meth:`returns` on the echoes (their ``returned``
        reflectivity and range); with several returns per beam, ``return_number`` and
        ``number_of_returns``. A pattern chunk is cut into pieces of at most
        :data:`~.budget.CHUNK_RAYS` sub-rays (:func:`_beam_chunks`), so memory stays that
        of one chunk of rays whatever ``samples_per_beam``."""
        rs = cast(ReturnSettings, s)  # :meth:`cast_returns` sends ReturnSettings only
        grid = self.grid_shape(s, frame, frame_time, mode, ctx.camera)
        max_range = self.max_range(s)
        parts: list[tuple[RayPattern, Hits, Returns]] = []
        rays, several = 0, False
        for k, pattern in enumerate(_beam_chunks(self.patterns(s, frame, frame_time, mode, ctx.camera),
                                                 beam.sub_rays_per_beam(s))):
            if parts:  # a further chunk: the kept hits of the last one in arrays of their own
                parts[-1] = (parts[-1][0], _own_rows(parts[-1][1]), parts[-1][2])
            sub = beam.footprint(s, pattern)
            cast_hits = ctx.cast(sub.origins, sub.directions, max_range, s.max_bounces, times=sub.times,
                                 split=True, rng=stage_rng(s.seed, frame, k, STAGE_CAST),
                                 wavelength=float(rs.wavelength), bundle=sub.per_beam,
                                 acceptance=beam.specular_acceptance(s), lobes=uses_lobes(s))
            ret = beam.form_returns(s, sub, cast_hits, max_range, stage_rng(s.seed, frame, k, STAGE_BEAM),
                                    select=False)
            ret = weather.apply(s, ret, sub, stage_rng(s.seed, frame, k, STAGE_WEATHER))
            echo = echo_hits(cast_hits, ret)
            keep = self.returns(s, pattern, echo)
            several |= bool(len(ret) > 1 and (ret.beam[1:] == ret.beam[:-1]).any())
            rays += len(pattern)
            parts.append((pattern.take(ret.beam[keep]), echo.take(keep), ret.take(keep)))
            del sub, cast_hits, ret, echo  # one chunk's rays alive at a time
        if len(parts) == 1:
            pattern, hits, ret = parts[0]
        else:  # each kind of part dropped once joined: the chunks' copy and the whole's not both held
            patterns, hit_parts, ret_parts = [p for p, _, _ in parts], [h for _, h, _ in parts], \
                [r for _, _, r in parts]
            parts.clear()
            pattern = RayPattern.concat(patterns)
            del patterns
            hits = type(hit_parts[0]).concat(hit_parts)
            del hit_parts
            ret = Returns.concat(ret_parts, [0] * len(ret_parts), [0] * len(ret_parts))
            del ret_parts
        extra: dict[str, Array] = {}
        if rs.multi_return:
            extra = {"return_number": ret.return_number, "number_of_returns": ret.number_of_returns}
        return Traced(pattern, hits, num_rays=rays, grid=grid, returns=ret, extra=extra, select=several)

    def detect_and_assemble(self, s: S, ctx: ScanContext, traced: Traced, *, frame: int,
                            frame_time: float) -> ScanResult:
        """The one path from every variant's :class:`Traced` rays to the result: the
        receiver (:meth:`receive`), the measured ranges (:meth:`measure` from the frame's generator, unless the cast
        measured them, plus the weather's range noise), :meth:`detected` at the reported
        measured range (:meth:`range_offset` added), the returns mode among the detected
        echoes (``traced.select``: :func:`~.beam.select_returns`, so a beam whose strongest
        echo is not detected reports the strongest that is), ``return_number`` counted
        again, the intensity of the return physics (:func:`~.intensity.intensity`), then
        :func:`~.physics.assemble` (rings from :meth:`channel_rings`)."""
        traced = self.receive(s, traced, frame, ctx)
        pattern, hits, ret = traced.pattern, traced.hits, traced.returns
        extra, measured, select = traced.extra, traced.measured, traced.select
        num_rays, grid = traced.num_rays, traced.grid
        del traced  # the rows taken below replace these: one copy of the returns held at a time
        if ret is not None:  # take and concat keep the protocol's fields only
            echo = cast(EchoHits, hits)
            echo.returned, echo.energy = ret.returned, ret.energy
            del echo
        r = np.asarray(hits.range, dtype=np.float64)
        if measured is None:
            r_noisy = self.measure(s, pattern, r, frame_rng(s.seed, frame))
        else:
            r_noisy = measured
        del measured
        if ret is not None and ret.range_noise is not None:
            r_noisy = r_noisy + ret.range_noise
        offset = float(self.range_offset(s))
        seen = self.detected(s, pattern, hits, r_noisy + offset if offset else r_noisy)
        if seen is not None and not seen.all():
            pattern, hits, r = pattern.take(seen), hits.take(seen), r[seen]
            r_noisy = r if r_noisy is r else r_noisy[seen]
            if ret is not None:
                ret = ret.take(seen)
                extra = {k: v[seen] for k, v in extra.items()}
        if select and ret is not None:  # the returns mode, among the echoes detected
            chosen = beam.select_returns(s, pattern.ray_index, r, ret.energy)
            if chosen is not None and chosen.shape[0] < r.shape[0]:
                pattern, hits, r = pattern.take(chosen), hits.take(chosen), r[chosen]
                r_noisy = r if r_noisy is r else r_noisy[chosen]
                ret = ret.take(chosen)
                extra = {k: v[chosen] for k, v in extra.items()}
                echo = cast(EchoHits, hits)
                echo.returned, echo.energy = ret.returned, ret.energy
                del echo
        if "return_number" in extra:  # count the returns kept, not formed
            numbers = beam.rank_returns(pattern.ray_index, hits.range)
            extra["return_number"], extra["number_of_returns"] = numbers
        value = None
        if ret is not None:
            value = intensity.intensity(s, ret, r, self.capabilities(s, ctx.camera).device)
        del ret  # (what the result keeps of the returns is in hits and value: not held while assembling)
        return assemble(pattern, hits, r, r_noisy, ctx, s, frame=frame, frame_time=frame_time,
                        num_rays=num_rays, grid_shape=grid,
                        channel_elevations=self.channel_elevations(s), channel_rings=self.channel_rings(s),
                        range_offset=offset, intensity=value, extra=extra)

    def scan(self, s: S, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """One scan: :meth:`trace`, then the sensor's metadata on the result
        (``sensor_type``, ``organized``, ``intrinsics``, ``capabilities``), then
        :meth:`finish`."""
        result = self.trace(s, ctx, frame=frame, frame_time=frame_time, mode=mode)
        result.sensor_type = self.name
        result.organized = self.organized
        result.intrinsics = self.intrinsics(s, ctx.camera)
        result.capabilities = self.capabilities(s, ctx.camera)
        return self.finish(s, result)


class SweptSensor(Sensor[S]):
    """A sensor that sweeps :meth:`columns` columns over its field of view once per
    ``1 / s.rotation_speed`` s, firing :meth:`lasers` rays per column (line and planar
    scanners, reference 6.2 and 6.3), with the reflectivity limit of seed 000 Eq. 1.
    Subclasses give :meth:`lasers` and :meth:`directions`; their settings declare
    ``rotation_speed`` (Hz), ``start_angle``, ``end_angle`` and ``angle_resolution`` (deg)."""

    period_setting = "rotation_speed"

    def lasers(self, s: S) -> int:
        """Rays per column."""
        raise NotImplementedError

    def directions(self, s: S, angle_deg: F64) -> F64:
        """(C, L, 3) float64 unit ray directions (sensor frame) of the columns at
        sweep angles ``angle_deg`` (C,) = ``start_angle + column * angle_resolution``."""
        raise NotImplementedError

    def grid_shape(self, s: S, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return (self.lasers(s), sweep_count(self.columns(s), setting_value(s, "rotation_speed"), frame,
                                            frame_time, mode))

    @staticmethod
    def columns(s: SensorSettings) -> int:
        """Columns of one sweep (:func:`~.raypattern.sweep_column_count` of the settings'
        ``start_angle``, ``end_angle``, ``angle_resolution``)."""
        return sweep_column_count(setting_value(s, "start_angle"), setting_value(s, "end_angle"),
                                  setting_value(s, "angle_resolution"))

    def sweep_period(self, s: S) -> float | None:
        return 1.0 / setting_value(s, "rotation_speed")

    def check_budget(self, s: S, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> int:
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        # one sweep too many: only the resolution helps; more than a sweep in the frame
        # (a range scan's frame of a fast head): the rotation speed
        resolution, speed = setting_value(s, "angle_resolution"), setting_value(s, "rotation_speed")
        refuse_rays(rows * min(cols, self.columns(s)), "angle_resolution", resolution, unit="deg")
        if mode == "range" and cols > self.columns(s):
            refuse_rays(rows * cols, "rotation_speed", speed, grows=True, unit="Hz")
        return rows * cols

    def column_times(self, s: S, frame: int, frame_time: float, mode: str) -> tuple[I64, F64]:
        """The scan's columns in firing order, (C,) int64 indices into the sweep, and
        their firing times (C,) float64 s. Default: :func:`~.raypattern.sweep_columns`, the
        columns spread evenly over the sweep period."""
        return sweep_columns(self.columns(s), setting_value(s, "rotation_speed"), frame, frame_time, mode)

    def column_rays(self, s: S, col: I64) -> F64:
        """(C, L, 3) float64 unit ray directions (sensor frame) of the sweep's columns
        ``col`` (C,) int64, as :meth:`column_times` numbers them. Default: :meth:`directions`
        at ``start_angle + col * angle_resolution`` (deg)."""
        start, resolution = setting_value(s, "start_angle"), setting_value(s, "angle_resolution")
        return self.directions(s, start + col * resolution)

    def patterns(self, s: S, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
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

    def returns(self, s: S, pattern: RayPattern, hits: Hits) -> Bool:
        return returns_mask(hits, s)
