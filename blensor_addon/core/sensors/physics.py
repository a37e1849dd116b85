"""Physics shared by the sensors: range noise, the reflectivity limit, per-frame random
draws, and the assembly of a :class:`~blensor_addon.core.result.ScanResult` from the
returning rays.

Sources: seed 000 Eq. 1 (reflectivity limit), Eq. 2 (per-ray Gaussian range noise and
per-laser bias), section 3.5 (which rays return), section 5.2 (per-frame seeding);
seed 002 section II-D, Eq. 4-5 (the linear return model, decided at the measured depth);
reference section 6.3 (the distance-dependent noise table); the minimum range every
datasheet gives (:func:`min_range_setting`, :func:`min_range_mask`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import SettingsError
from ..ndtypes import F64, U16, Array, Bool, Floating
from ..result import ScanResult
from ..settings import SensorSettings, setting, setting_value
from .raypattern import RayPattern

if TYPE_CHECKING:  # the protocol is declared beside the Sensor, which imports this module
    from .protocols import Hits, ScanContext

#: largest range noise mean, sigma and per-laser bias spread (m): far beyond any sensor,
#: small enough that noisy ranges and points stay finite in float32
NOISE_LIMIT = 1000.0
#: bound of |ref_limit| (reflectivity, 1) and |ref_slope| (1/m) of the reflectivity limit
#: (seed 000 Eq. 1): a limit above 1 already drops every return; the bound keeps the line
#: finite at every range (ref_dist is at most 1e5 m, as max_range)
REF_BOUND = 1000.0


def noise_mu_setting(per: str = "ray", note: str = "") -> float:
    """The ``noise_mu`` setting (m) of a sensor with Gaussian range noise, per ``per``
    (ray, pixel); ``note`` ends its description. Seed 000 section 3.2 (per-ray noise)."""
    return setting(0.0, "Noise mean", f"Per-{per} range noise mean{note}", "m", lo=-NOISE_LIMIT, hi=NOISE_LIMIT,
                   precision=4)


def noise_sigma_setting(default: float, per: str = "ray", note: str = "") -> float:
    """The ``noise_sigma`` setting (m, default ``default``); see :func:`noise_mu_setting`."""
    return setting(default, "Noise sigma", f"Per-{per} range noise sigma{note}", "m", lo=0.0, hi=NOISE_LIMIT,
                   precision=4)


def ref_dist_setting() -> float:
    """The ``ref_dist`` setting (m) of the reflectivity limit (seed 000 Eq. 1; see
    :func:`reflectivity_limit`)."""
    return setting(50.0, "Reflectivity distance", "Below this range every reflectivity returns", "m",
                   lo=0.0, hi=1e5)


def ref_limit_setting() -> float:
    """The ``ref_limit`` setting (reflectivity, 1) of the reflectivity limit."""
    return setting(0.1, "Reflectivity limit", "Minimum reflectivity at the reflectivity distance",
                   lo=-REF_BOUND, hi=REF_BOUND)


def ref_slope_setting(default: float, precision: int = 4) -> float:
    """The ``ref_slope`` setting (1/m, default ``default``) of the reflectivity limit."""
    return setting(default, "Reflectivity slope", "Growth of the minimum reflectivity per metre", "1/m",
                   precision=precision, lo=-REF_BOUND, hi=REF_BOUND)


def min_range_setting(default: float = 0.0) -> float:
    """The ``min_range`` setting (m, default ``default``, in [0, 1e5]): the nearest range
    a unit reports (its datasheet's minimum range). A return whose *measured* range (noise
    included, as reported) is below it is not reported (:func:`min_range_mask`, applied by
    :meth:`~.sensor.Sensor.detected`). 0 = no minimum."""
    return setting(default, "Min range", "Nearest range the unit reports (datasheet); nearer measured "
                   "returns are dropped", "m", lo=0.0, hi=1e5, precision=3)


def check_min_range(s: SensorSettings, max_name: str = "max_range") -> None:
    """Raise SettingsError (``min_range``) unless ``s.min_range`` is less than the
    setting ``max_name`` of ``s`` (m; ``max_range``, the Kinect's ``max_depth``)."""
    hi = getattr(s, max_name)  # a declared setting (no default): a missing one raises
    lo = setting_value(s, "min_range")
    if not lo < hi:
        raise SettingsError("min_range", f"less than {max_name} ({hi:g} m)", lo)


def min_range_mask(s: SensorSettings, r_measured: F64) -> Bool | None:
    """(N,) bool: measured ranges ``r_measured`` (N,) float64 m at or beyond the settings'
    ``min_range`` (m); None when ``s`` has no ``min_range`` or it is 0 (all kept)."""
    lo = float(setting_value(s, "min_range") or 0.0)
    if lo <= 0.0:
        return None
    seen: Bool = np.asarray(r_measured, dtype=np.float64) >= lo
    return seen


def linear_return_mask(reflectivity: Floating, cos_incidence: Floating | None, d_measured: Floating,
                       ref_max: float, max_range: float, lam: Floating | None = None) -> Bool:
    """(N,) bool: seed 002 section II-D, Eq. 4-5: a return is detected iff the Lambertian
    reflectance ``R(theta) = R0 cos(theta)`` (Eq. 4) reaches the range capability
    ``R_L(d) = ref_max * d / max_range`` (Eq. 5) at the measured depth ``d`` (noise
    included, "its depth d (including Gaussian noise)") and ``d <= max_range``; a surface
    of reflectivity 0 never returns.

    Args: reflectivity R0 (N,) >= 0 (above 1: retro-reflectors); cos_incidence (N,) in [0, 1]; d_measured (N,)
    float64 m; ref_max (R_L,max, in (0, 1]); max_range (d_max, m); lam (N,) float64: R0
    cos(theta) already summed over a beam's footprint (an echo's ``energy``), used instead
    of ``reflectivity * cos_incidence`` when given. Example: R0 = 0.5 at
    60 deg incidence with ref_max 0.8, max_range 50 m returns out to 0.25 / 0.8 * 50 =
    15.625 m.
    """
    d = np.asarray(d_measured, dtype=np.float64)
    r0 = np.asarray(reflectivity, dtype=np.float64)
    lam = r0 * np.asarray(cos_incidence, dtype=np.float64) if lam is None else np.asarray(lam, np.float64)
    seen: Bool = (r0 > 0.0) & (d <= max_range) & (lam >= ref_max * d / max_range)
    return seen


def frame_rng(seed: int, frame: int) -> np.random.Generator:
    """The generator of every per-ray draw of one frame.

    Seeded by (seed, frame), so a frame's noise does not depend on which other frames
    were scanned before it: frame ranges can be split over processes or hosts (seed 000
    section 5.2) and still give byte-identical files.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), 0x5CA4, int(frame) & 0xFFFFFFFF, (int(frame) >> 32) & 0xFFFFFFFF])))


def reflectivity_limit(distance: Floating, ref_dist: float, ref_limit: float, ref_slope: float) -> F64:
    """Minimum reflectivity that returns at accumulated range ``distance`` (m).

    seed 000 Eq. 1 in the original's form (reference section 7): -1 below ``ref_dist``,
    else ``ref_limit + ref_slope * (d - ref_dist)``. (N,) float64.
    """
    d = np.asarray(distance, dtype=np.float64)
    limit: F64 = np.where(d < ref_dist, -1.0, ref_limit + ref_slope * (d - ref_dist))
    return limit


def returns_mask(hits: Hits, s: SensorSettings) -> Bool:
    """(N,) bool: which traced rays return: they ended on a non-mirror surface within
    ``max_range`` whose reflectivity is above 0 and exceeds the limit at the accumulated
    range (seed 000 Eq. 1, section 3.5). ``s`` needs ``max_range``, ``ref_dist``,
    ``ref_limit``, ``ref_slope``; with ``return_model == "linear"`` (seed 002 Eq. 4-5,
    decided at the measured range by :func:`linear_return_mask`) or ``"radiometric"``
    (decided by the receiver, :mod:`.radiometry`) only the first two tests apply here.
    Echo hits (:func:`~.sensor.echo_hits`) are judged by the reflectivity that comes back
    (``hits.returned``: glass, footprint share, atmosphere) instead of the surface's.

    A surface of reflectivity 0 sends nothing back, whatever the model: below
    ``ref_dist`` Eq. 1's limit is -1, so the original BlenSor returned it.
    """
    returned = hits.returned  # echo hits (EchoHits) carry it, others None
    refl = hits.reflectivity if returned is None else returned
    ok: Bool = hits.hit & (hits.range <= setting_value(s, "max_range")) & (refl > 0.0)
    if setting_value(s, "return_model") in ("linear", "radiometric"):  # decided at the receiver
        return ok
    ok &= refl > reflectivity_limit(hits.range, setting_value(s, "ref_dist"), setting_value(s, "ref_limit"),
                                    setting_value(s, "ref_slope"))
    return ok


def interpolated_noise(table: F64, d: Floating) -> tuple[F64, F64]:
    """(mu, sigma) of a distance-dependent noise table at ranges ``d`` (m), as the
    original's advanced error model (reference section 6.3): linear interpolation
    between rows, constant beyond the last row and before the first (the original
    extrapolated below the first row, which can give a negative sigma; fixed).
    table (K, 3) float64 rows (distance, mu, sigma), K >= 1. Returns two (N,) float64."""
    mu = np.interp(d, table[:, 0], table[:, 1])
    sigma = np.interp(d, table[:, 0], table[:, 2])
    return mu, sigma


def elevation_rank(elevations_deg: Floating | Sequence[float]) -> U16:
    """(L,) uint16 rank of each channel's elevation, 0 = lowest (ties by channel)."""
    e = np.asarray(elevations_deg, dtype=np.float64)
    rank = np.empty(e.shape[0], np.uint16)
    rank[np.argsort(e, kind="stable")] = np.arange(e.shape[0], dtype=np.uint16)
    return rank


def _rings(pattern: RayPattern, channel_elevations: Floating | Sequence[float] | None,
           channel_rings: Array | None) -> U16:
    """(N,) uint16 ring of each ray: ``channel_rings`` of its channel, else the rank of its
    channel's elevation (0 = lowest), else 0."""
    ch = pattern.channel.astype(np.int64)
    if channel_rings is not None:
        return np.asarray(channel_rings, dtype=np.uint16)[ch]
    if channel_elevations is not None:
        return elevation_rank(channel_elevations)[ch]
    return np.zeros(len(pattern), np.uint16)


def assemble(pattern: RayPattern, hits: Hits, r: F64, r_noisy: F64, ctx: ScanContext, s: SensorSettings, *,
             frame: int, frame_time: float, num_rays: int, grid_shape: tuple[int, ...],
             channel_elevations: Floating | Sequence[float] | None = None, channel_rings: Array | None = None,
             range_offset: float = 0.0, intensity: Floating | None = None,
             extra: dict[str, Array] | None = None) -> ScanResult:
    """Build a :class:`ScanResult` from the returning rays.

    Args:
        pattern, hits: the returning rays only (N), sensor frame.
        r, r_noisy (N,) float64: clean and measured range (m), measured along the ray
            from its origin.
        ctx: the :class:`ScanContext` (pose, output frame, surface attributes).
        channel_elevations (L,) deg: nominal elevation per channel, for ``ring`` (its
            rank, 0 = lowest) when ``channel_rings`` is None.
        channel_rings (L,) int: the ring number of each channel (the vendor driver's).
        range_offset: m added to the reported ranges (``range``, ``range_noisy``) but not
            to the points: Ouster reports the range from the beam origin plus the beam
            origin's distance from the axis (:meth:`~.sensor.Sensor.range_offset`).
        intensity (N,) float: the returns' intensity (the return physics' model), or
            None: seed 002 Eq. 4, reflectivity x cos(incidence).
        extra: per-return fields (name -> (N,) array of
            :data:`~blensor_addon.core.result.EXTRA_FIELDS`) put in ``result.extra``.
    Points: ``origin + unit(direction) * r`` (``r_noisy`` for the noisy points) in the
    sensor frame, then in the output frame.
    """
    surf = ctx.surface(pattern, hits)  # first: its rotations' temporaries do not meet the points'
    u = pattern.directions.astype(np.float64)
    o = pattern.origins

    def points(u: F64, rng: F64) -> F64:  # origin + unit direction * range
        p: F64 = u * rng[:, None] if o is None else u * rng[:, None] + o
        return p

    noiseless = r_noisy is r
    path, path_n = r, r_noisy  # the points come from the paths along the rays
    if range_offset:  # the reported ranges
        r = r + float(range_offset)
        r_noisy = r if noiseless else r_noisy + float(range_offset)
    xyz = points(u, path)
    xyz_n = xyz if noiseless else points(u, path_n)  # noiseless: the same points
    del u  # (float64 directions, (N, 3): not held while the rest is assembled)

    def to(frame: str, world: tuple[F64, F64] | None = None) -> tuple[F64, F64]:
        """Both sensor-frame clouds in ``frame``; noiseless: once."""
        w, w_n = (None, None) if world is None else world
        out = ctx.sensor_points_to(frame, xyz, hits, w)
        return out, (out if noiseless else ctx.sensor_points_to(frame, xyz_n, hits, w_n))

    pose = np.asarray(ctx.sensor_to_world, dtype=np.float64)
    extra = dict(extra or {})
    world = to("world") if ctx.frame_of_reference == "world" else None
    if s.deskew:  # from the world points when made already (not rotated twice)
        d, d_n = to("start", world)
        extra["xyz_deskewed"] = d.astype(np.float32)
        extra["xyz_noisy_deskewed"] = d_n.astype(np.float32)
    if world is not None:  # the output frame is the world
        if ctx.sensor_to_world_end is not None:  # the sensor moved during the packet: its frames at
            # the rays' times are kept, for formats that want sensor-frame points (KITTI, ROS)
            extra["xyz_sensor"] = xyz.astype(np.float32)
            extra["xyz_noisy_sensor"] = xyz_n.astype(np.float32)
        xyz, xyz_n = world
    return ScanResult(
        timestamp=pattern.timestamp,
        azimuth=pattern.azimuth,
        elevation=pattern.elevation,
        range=r,
        range_noisy=r_noisy,
        xyz=xyz,
        xyz_noisy=xyz_n,
        object_id=surf["object_id"],
        semantic=surf["semantic"],
        instancer_id=surf["instancer_id"],
        instance_id=surf["instance_id"],
        channel=pattern.channel,
        ring=_rings(pattern, channel_elevations, channel_rings),
        ray_index=pattern.ray_index,
        reflectivity=hits.reflectivity,
        intensity=hits.reflectivity * surf["cos_inc"] if intensity is None else intensity,
        color=surf["color"],
        normal=surf["normal"],
        frame=int(frame),
        frame_time=float(frame_time),
        frame_of_reference=ctx.frame_of_reference,
        sensor_to_world=pose,
        sensor=s.to_dict(),
        objects=list(ctx.objects or []),
        num_rays=int(num_rays),
        grid_shape=tuple(int(v) for v in grid_shape),
        extra=extra,
        sensor_to_world_end=ctx.sensor_to_world_end,
    )
