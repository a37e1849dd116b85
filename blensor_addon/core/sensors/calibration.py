"""Per-laser calibration of a rotating LiDAR: one table for every vendor's file.

A :class:`LaserTable` holds what a unit's calibration says about each laser (channel):
its elevation and azimuth correction, a distance correction, the offsets of its beam
origin from the spin axis, when it fires within a firing cycle, and its ring number.
Presets load theirs from the packaged JSON files in ``tables/`` (facts from the vendors'
published calibration files, each citing its source); ``blensor calib import`` reads a
unit's own file (Velodyne's ROS YAML or ``db.xml``, Ouster's metadata JSON) into the same
table, stored as JSON in the camera's ``calibration`` setting.

Conventions (BlenSor's sensor frame, see :mod:`.rotating`): column azimuth psi (deg);
laser k fires along azimuth ``psi - azimuth_deg[k]`` and elevation ``elevation_deg[k]``.
A Velodyne ``rot_correction`` (rad, ROS YAML) and an Ouster ``beam_azimuth_angles``
(deg) both enter as ``azimuth_deg`` with the sign that makes the beam point where the
vendor's driver puts the point (velodyne_pointcloud: ``cos(azimuth - rot_correction)``;
Ouster: ``theta_encoder - 2 pi beam_azimuth / 360``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SettingsError
from ..ndtypes import F64

#: folder of the packaged preset tables (read-only; nothing is written here)
TABLES_DIR = Path(__file__).resolve().parent / "tables"

VENDORS = ("generic", "velodyne", "ouster", "hesai")
#: most lasers (channels) a table, a rotating sensor and a calibration file may have
MAX_LASERS = 1024


@dataclass(frozen=True)
class LaserTable:
    """A rotating LiDAR's per-laser calibration; every per-laser tuple has L entries and
    row k is channel k (the order the vendor numbers its lasers: Velodyne laser id,
    Ouster beam/pixel row).

    Attributes:
        vendor: one of :data:`VENDORS` (selects the point layout and packet format the
            vendor's driver uses); model: the unit ("VLP-16", "OS0-128"); source: where the
            numbers come from (file name, repository, datasheet), cited in ``blensor
            sensors`` and the README.
        elevation_deg: (L,) elevation of each laser (deg, + up).
        azimuth_deg: (L,) azimuth correction a_k (deg): the laser fires along ``psi - a_k``.
        distance_m: (L,) distance correction (m) the unit's driver adds to the raw range
            (Velodyne ``dist_correction``); the simulator subtracts it from the true
            range so that the driver's correction gives the true range back. Zeros if none.
        vert_offset_m, horiz_offset_m: (L,) beam origin offsets (m) of Velodyne's
            calibration (``vert_offset_correction``, ``horiz_offset_correction``), as
            velodyne_pointcloud applies them, or ``vert_offset_m`` up the spin axis where
            ``extra["vert_offset_axis"] == "z"`` (the manuals' vertical correction: the
            VLP-16 and HDL-32E presets). Zeros if none.
        beam_origin_m: distance of the beam origin from the spin axis (m): Ouster's
            ``lidar_origin_to_beam_origin_mm`` / 1000; 0 for Velodyne.
        firing_s: (L,) when laser k fires after its firing cycle starts (s); zeros: all at
            once.
        cycle_s: length of one firing cycle (s) (one column of every laser), 0 if unknown.
        ring: (L,) ring number the vendor's driver gives laser k (velodyne_pointcloud:
            rank by elevation, 0 = lowest; ouster-ros: beam index, 0 = top); empty: rank by
            elevation.
        extra: anything else the file said that a writer needs (Ouster
            ``pixel_shift_by_row``, ``columns_per_frame``, ``lidar_mode``,
            ``lidar_to_sensor_transform``; Velodyne ``distance_resolution``,
            ``vert_offset_axis``), JSON values.
    Raises (constructor, via :meth:`check`): SettingsError naming the field.
    """

    vendor: str = "generic"
    model: str = ""
    source: str = ""
    elevation_deg: tuple[float, ...] = ()
    azimuth_deg: tuple[float, ...] = ()
    distance_m: tuple[float, ...] = ()
    vert_offset_m: tuple[float, ...] = ()
    horiz_offset_m: tuple[float, ...] = ()
    beam_origin_m: float = 0.0
    firing_s: tuple[float, ...] = ()
    cycle_s: float = 0.0
    ring: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    PER_LASER = ("elevation_deg", "azimuth_deg", "distance_m", "vert_offset_m", "horiz_offset_m", "firing_s",
                 "ring")

    def __post_init__(self) -> None:
        for name in self.PER_LASER:  # lists from JSON -> tuples (hashable, frozen)
            object.__setattr__(self, name, tuple(float(v) if name != "ring" else int(v)
                                                 for v in getattr(self, name)))
        self.check()

    @property
    def lasers(self) -> int:
        """Number of lasers L."""
        return len(self.elevation_deg)

    def check(self) -> None:
        """Raise SettingsError (``calibration.<field>``) unless every per-laser field has
        0 or L finite entries, elevations lie in [-90, 90] deg, 1 <= L <= :data:`MAX_LASERS`."""
        L = self.lasers
        if not 1 <= L <= MAX_LASERS:
            raise SettingsError("calibration.elevation_deg", f"1 to {MAX_LASERS} laser elevations", L)
        if self.vendor not in VENDORS:
            raise SettingsError("calibration.vendor", "one of " + ", ".join(VENDORS), self.vendor)
        for name in self.PER_LASER:
            v = getattr(self, name)
            if len(v) not in (0, L):
                raise SettingsError(f"calibration.{name}", f"{L} values (one per laser) or none", len(v))
            if not all(np.isfinite(v)):
                raise SettingsError(f"calibration.{name}", "finite numbers", v)
        if any(abs(e) > 90.0 for e in self.elevation_deg):
            raise SettingsError("calibration.elevation_deg", "in [-90, 90] deg", self.elevation_deg)
        if not (np.isfinite(self.beam_origin_m) and 0.0 <= self.beam_origin_m < 1.0):
            raise SettingsError("calibration.beam_origin_m", "in [0, 1) m", self.beam_origin_m)
        if not (np.isfinite(self.cycle_s) and 0.0 <= self.cycle_s < 1.0):
            raise SettingsError("calibration.cycle_s", "in [0, 1) s", self.cycle_s)

    @property
    def names_model(self) -> bool:
        """Whether :attr:`model` names a unit: not empty, not just the vendor, and not the
        placeholder a calibration reader gives a file that names no model (a Velodyne ROS
        YAML or db.xml: "Velodyne 16-laser calibration"; a Hesai CSV: "Hesai 32-channel
        calibration"; Ouster metadata without ``prod_line``: "Ouster")."""
        m = self.model.strip().lower()
        v = self.vendor.lower()
        return bool(m) and m != v and m not in (f"{v} {self.lasers}-laser calibration",
                                                f"{v} {self.lasers}-channel calibration")

    def completed_by(self, base: LaserTable) -> LaserTable:
        """This table (a unit's imported calibration) with what it lacks taken from
        ``base`` (the preset's table of the same unit type): when vendor and laser count
        match, ``base``'s ``model`` where this one names none (:attr:`names_model`; a
        Velodyne YAML does not, the pcap writer needs "VLP-16"), ``firing_s`` where this
        one has none and ``cycle_s`` where it is 0 (no calibration file of Velodyne or
        Hesai holds firing times). Everything else is this table's; a table of another
        vendor or laser count is returned unchanged."""
        if base.vendor != self.vendor or base.lasers != self.lasers:
            return self
        changes: dict[str, Any] = {}
        if not self.names_model and base.model:
            changes["model"] = base.model
        if not self.firing_s and base.firing_s:
            changes["firing_s"] = base.firing_s
        if not self.cycle_s and base.cycle_s:
            changes["cycle_s"] = base.cycle_s
        return replace(self, **changes) if changes else self

    def summary(self) -> str:
        """One line naming the table: model (or vendor), laser count, vendor and source,
        e.g. ``"VLP-16 (16 lasers, velodyne) from VLP16db.yaml"`` (what ``blensor info``,
        ``blensor calib import``, the panel and its import operator print)."""
        head = f"{self.model or self.vendor} ({self.lasers} lasers, {self.vendor})"
        return f"{head} from {self.source}" if self.source else head

    def per_laser(self, name: str) -> F64:
        """(L,) float64 of a per-laser field, zeros where the table has none."""
        v = getattr(self, name)
        return np.asarray(v, dtype=np.float64) if len(v) else np.zeros(self.lasers)

    def to_json(self) -> str:
        """The table as compact JSON (what the ``calibration`` setting stores)."""
        d = {k: getattr(self, k) for k in ("vendor", "model", "source", *self.PER_LASER, "beam_origin_m",
                                           "cycle_s")}
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items() if v not in ((), "")}
        if self.extra:
            d["extra"] = self.extra
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LaserTable:
        """The table stored by :meth:`to_json`.

        Raises:
            SettingsError (``calibration``): not JSON, unknown keys, or a bad field.
        """
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as exc:  # (a .blend's text nested thousands deep)
            raise SettingsError("calibration", "a laser table as JSON (blensor calib import)",
                                f"{text[:60]}... ({exc})") from None
        if not isinstance(d, dict):
            raise SettingsError("calibration", "a JSON object", type(d).__name__)
        d.pop("intensity_scale", None)  # (written, always 1.0, before the field was removed: never read)
        known = {"vendor", "model", "source", *cls.PER_LASER, "beam_origin_m", "cycle_s", "extra"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SettingsError("calibration", "the keys " + ", ".join(sorted(known)), ", ".join(unknown))
        try:
            return cls(**d)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SettingsError("calibration", "a laser table with numeric per-laser lists", str(exc)) from None


_PACKAGED: dict[str, LaserTable] = {}


def packaged_table(name: str) -> LaserTable:
    """The packaged table ``tables/<name>.json`` (cached).

    Raises:
        SettingsError (``preset``): no such table.
    """
    t = _PACKAGED.get(name)
    if t is None:
        path = TABLES_DIR / f"{name}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            raise SettingsError("preset", "a preset with a packaged laser table", name) from None
        t = _PACKAGED[name] = LaserTable.from_json(text)
    return t


__all__ = ["LaserTable", "VENDORS", "MAX_LASERS", "TABLES_DIR", "packaged_table"]
