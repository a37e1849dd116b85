"""Calibration files of real rotating LiDARs, read into a :class:`~..core.sensors.calibration.LaserTable`.

This module owns the parsers behind ``blensor calib import`` (and the panel's and the
Python API's import): it reads a unit's own calibration file, checks every field, and
returns the table the rotating sensor uses instead of its preset's. It writes nothing and
imports no Blender module (storing the table in a .blend is :mod:`..jobs.calib_import`).

Formats (chosen by the file's extension):

- ``.yaml`` / ``.yml``: the Velodyne calibration of the ROS driver
  (ros-drivers/velodyne, ``velodyne_pointcloud/params/*.yaml``, read by
  ``velodyne_pointcloud/src/lib/calibration.cc``): ``lasers``, a list of mappings with
  ``laser_id``, ``rot_correction`` and ``vert_correction`` (rad), ``dist_correction``,
  ``dist_correction_x``, ``dist_correction_y``, ``vert_offset_correction``,
  ``horiz_offset_correction``, ``focal_distance`` (m), ``focal_slope``,
  ``min_intensity``, ``max_intensity``, ``two_pt_correction_available``; and
  ``num_lasers``, ``distance_resolution`` (m).
- ``.xml``: Velodyne's ``db.xml`` (a boost serialization archive; the driver's
  ``velodyne_pointcloud/scripts/gen_calibration.py`` converts it): ``DB/points_/item/px``
  with ``id_``, ``rotCorrection_``, ``vertCorrection_`` (deg), ``distCorrection_``,
  ``distCorrectionX_``, ``distCorrectionY_``, ``vertOffsetCorrection_``,
  ``horizOffsetCorrection_``, ``focalDistance_`` (cm), ``focalSlope_``; ``DB/enabled_``
  (lasers present), ``DB/distLSB_`` (cm), ``DB/minIntensity_``, ``DB/maxIntensity_``.
- ``.json``: Ouster sensor metadata, in both layouts the sensors have written: the legacy
  flat one (firmware before 2.4: ``beam_altitude_angles``, ``beam_azimuth_angles``,
  ``lidar_origin_to_beam_origin_mm``, ``lidar_mode``, ``data_format`` with
  ``columns_per_frame``, ``pixel_shift_by_row``, ...) and the nested one (``beam_intrinsics``,
  ``lidar_data_format``, ``config_params``, ``lidar_intrinsics``, ``sensor_info``); see
  ouster-lidar/ouster-sdk ``tests/metadata/`` for samples of both.
- ``.csv``: a Hesai angle-correction file (``Channel,Elevation,Azimuth``, deg; the
  ``config/*.csv`` of HesaiTechnology/HesaiLidar_General_ROS).

Conventions of the resulting table (the rotating sensor's; see :mod:`..core.sensors.calibration`):

- ``azimuth_deg[k]`` is the yaw of the column (the encoder angle) minus the yaw of laser
  k's beam, in degrees, yaw counter-clockwise seen from above (REP-103), so that the laser
  fires along ``psi - azimuth_deg[k]`` for a column at yaw ``psi``. Per vendor, from where the
  vendor's driver puts the point:
  Velodyne (velodyne_pointcloud ``rawdata.cc``: ``x = d cos(az - rot)``, ``y = -d sin(az - rot)``,
  ``az`` clockwise): ``azimuth_deg = -degrees(rot_correction)``;
  Ouster (sensor docs, "Lidar Range to XYZ": ``theta_encoder - 2 pi beam_azimuth / 360``, both
  counter-clockwise): ``azimuth_deg = beam_azimuth_angles``;
  Hesai (HesaiLidar_General_ROS ``pandarGeneral_internal.cc``: ``x = d sin(az)``, ``y = d cos(az)``,
  ``az = block azimuth + Azimuth``, clockwise): ``azimuth_deg = Azimuth``.
- ``ring``: Velodyne: the driver's ring, the rank of the laser's elevation (0 = lowest;
  ``calibration.cc``); Ouster (ouster-ros) and Hesai (``point.ring = i``): the beam/channel
  index (0 = the top beam).
- Angles are rounded to 1e-9 deg (a ROS YAML holds ``radians(deg)`` of the db.xml's
  degrees: ``-15.000000000000002`` becomes ``-15.0``); lengths to 1e-9 m.

Errors: every bad file raises :class:`~..core.errors.SettingsError` naming the field
(``calibration.<field>``) and what it must be; nothing else escapes (a YAML, XML, JSON or
CSV syntax error names ``calibration`` and the parser's message).
"""
from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import SettingsError
from ..core.sensors.calibration import MAX_LASERS, LaserTable
from .safeload import load_json, load_xml, load_yaml

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

    from .atomic import StrPath

#: most lasers (beams, channels) a table may have (LaserTable.check's bound).
#: largest calibration file read (bytes): a 128-laser YAML is 30 kB, a db.xml 50 kB
MAX_BYTES = 16 * 1024 * 1024
#: extensions -> format
FORMATS = {".yaml": "velodyne_yaml", ".yml": "velodyne_yaml", ".xml": "velodyne_xml", ".json": "ouster_json",
           ".csv": "hesai_csv"}
_FORMAT_HELP = ("a Velodyne ROS calibration (.yaml) or db.xml (.xml), an Ouster metadata file (.json) or a "
                "Hesai angle-correction file (.csv)")
_ANGLE_DIGITS = 9
_LENGTH_DIGITS = 9


def _deg(rad: float) -> float:
    return round(math.degrees(rad), _ANGLE_DIGITS)


def _num(value: object, field: str, what: str = "a number") -> float:
    """``value`` as a finite float, else SettingsError naming ``calibration.<field>``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SettingsError(f"calibration.{field}", what, value)
    try:
        v = float(value)
    except (ValueError, OverflowError):  # (OverflowError: an int beyond a float's range)
        raise SettingsError(f"calibration.{field}", what, value) from None
    if not math.isfinite(v):
        raise SettingsError(f"calibration.{field}", f"{what} (finite)", value)
    return v


def _int(value: object, field: str, lo: int, hi: int) -> int:
    v = _num(value, field, f"an integer in [{lo}, {hi}]")
    if v != int(v) or not lo <= v <= hi:
        raise SettingsError(f"calibration.{field}", f"an integer in [{lo}, {hi}]", value)
    return int(v)


def _numbers(values: object, field: str, count: int | None = None) -> list[float]:
    """A list of finite numbers (``count`` of them if given)."""
    if not isinstance(values, list):
        raise SettingsError(f"calibration.{field}", "a list of numbers", type(values).__name__)
    if count is not None and len(values) != count:
        raise SettingsError(f"calibration.{field}", f"{count} numbers (one per beam)", len(values))
    return [_num(v, f"{field}[{i}]") for i, v in enumerate(values)]


def velodyne_rings(elevation_deg: Sequence[float]) -> list[int]:
    """Ring numbers as velodyne_pointcloud assigns them (``calibration.cc``): ring r is
    the laser with the r-th smallest elevation (0 = lowest); equal elevations keep laser
    order. Returns L ints."""
    order = sorted(range(len(elevation_deg)), key=lambda k: (elevation_deg[k], k))
    ring = [0] * len(order)
    for r, k in enumerate(order):
        ring[k] = r
    return ring


# ---------------------------------------------------------------------------------------
# Velodyne


#: per-laser keys of the ROS YAML kept in ``extra`` (driver fields the table has no column for)
_VELODYNE_EXTRA = ("dist_correction_x", "dist_correction_y", "focal_distance", "focal_slope", "min_intensity",
                   "max_intensity", "two_pt_correction_available")


def _velodyne_table(rows: list[dict[str, Any]], distance_resolution: float | None, model: str,
                    source: str) -> LaserTable:
    """Build the table from per-laser dicts with the ROS YAML's keys and units (rad, m),
    already checked; rows sorted by laser id 0..L-1."""
    elev = [_deg(r["vert_correction"]) for r in rows]
    extra: dict[str, Any] = {}
    if distance_resolution is not None:
        extra["distance_resolution"] = distance_resolution
    for key in _VELODYNE_EXTRA:  # kept where some laser differs from the driver's default
        vals = [r.get(key) for r in rows]
        out: list[bool] | list[int] | list[float]
        default: float
        if key == "two_pt_correction_available":
            out = [bool(v) for v in vals]
            default = False
        elif key in ("min_intensity", "max_intensity"):
            default = 0 if key == "min_intensity" else 255
            out = [int(math.floor(v)) if v is not None else default for v in vals]
        else:
            default = 0.0
            out = [round(float(v or 0.0), _LENGTH_DIGITS) for v in vals]
        if any(v != default for v in out):
            extra[key] = out

    def col(key: str) -> list[float]:
        vals = [round(float(r.get(key) or 0.0), _LENGTH_DIGITS) for r in rows]
        return vals if any(vals) else []

    return LaserTable(vendor="velodyne", model=model, source=source, elevation_deg=tuple(elev),
                      azimuth_deg=tuple(-_deg(r["rot_correction"]) + 0.0 for r in rows),
                      distance_m=tuple(col("dist_correction")),
                      vert_offset_m=tuple(col("vert_offset_correction")),
                      horiz_offset_m=tuple(col("horiz_offset_correction")), ring=tuple(velodyne_rings(elev)),
                      extra=extra)


def _check_velodyne_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check ids (0..L-1, each once) and angles; return the rows sorted by id."""
    L = len(rows)
    if not 1 <= L <= MAX_LASERS:
        raise SettingsError("calibration.lasers", f"a list of 1 to {MAX_LASERS} lasers", L)
    seen: dict[int, dict[str, Any]] = {}
    for i, r in enumerate(rows):
        k = _int(r.get("laser_id"), f"lasers[{i}].laser_id", 0, L - 1) if "laser_id" in r else None
        if k is None:
            raise SettingsError(f"calibration.lasers[{i}].laser_id", f"an integer in [0, {L - 1}]", None)
        if k in seen:
            raise SettingsError(f"calibration.lasers[{i}].laser_id", "a laser id no other laser has", k)
        for key in ("vert_correction", "rot_correction"):
            if key not in r:
                raise SettingsError(f"calibration.lasers[{i}].{key}", "an angle in radians", None)
        r["vert_correction"] = _num(r["vert_correction"], f"lasers[{i}].vert_correction",
                                    "an angle in radians")
        if abs(r["vert_correction"]) > math.pi / 2:
            raise SettingsError(f"calibration.lasers[{i}].vert_correction", "in [-pi/2, pi/2] rad",
                                r["vert_correction"])
        r["rot_correction"] = _num(r["rot_correction"], f"lasers[{i}].rot_correction", "an angle in radians")
        if abs(r["rot_correction"]) > math.pi:
            raise SettingsError(f"calibration.lasers[{i}].rot_correction", "in [-pi, pi] rad",
                                r["rot_correction"])
        for key in ("dist_correction", "dist_correction_x", "dist_correction_y", "vert_offset_correction",
                    "horiz_offset_correction", "focal_distance", "focal_slope", "min_intensity",
                    "max_intensity"):
            if r.get(key) is not None:
                r[key] = _num(r[key], f"lasers[{i}].{key}", "a number (m for distances)")
                if key.endswith("correction") and abs(r[key]) > 100.0:
                    raise SettingsError(f"calibration.lasers[{i}].{key}", "in [-100, 100] m", r[key])
        seen[k] = r
    return [seen[k] for k in range(L)]


def parse_velodyne_yaml(text: str, name: str = "calibration.yaml") -> LaserTable:
    """A Velodyne ROS calibration (YAML text) as a LaserTable; ``name`` (the file's name)
    goes into ``source`` and ``model``.

    Raises:
        SettingsError (``NAME line L column C``): nested deeper or an integer longer than
        :mod:`.safeload` reads (a 100,000-deep file is refused before any parser recurses).
        SettingsError (``calibration.<field>``): not YAML, no ``lasers`` list, a laser
        without ``laser_id``/``vert_correction``/``rot_correction``, a repeated or out of
        range id, a non-number, ``num_lasers`` not the number of lasers listed.
    """
    from ruamel.yaml.error import YAMLError
    try:  # (velodyne_pointcloud/tests/angles-calibrated.yaml repeats keys)
        doc = load_yaml(text, name, allow_duplicate_keys=True)
    except YAMLError as exc:
        msg = " ".join(str(exc).split())
        raise SettingsError("calibration", "a Velodyne calibration in YAML",
                            f"{name} ({msg[:120]})") from None
    if not isinstance(doc, dict):
        raise SettingsError("calibration", "a YAML mapping with a 'lasers' list (Velodyne ROS calibration)",
                            f"{name} ({type(doc).__name__})")
    lasers = doc.get("lasers")
    if not isinstance(lasers, list) or not all(isinstance(r, dict) for r in lasers):
        raise SettingsError("calibration.lasers", "a list of per-laser mappings", type(lasers).__name__)
    rows = _check_velodyne_rows([dict(r) for r in lasers])
    if doc.get("num_lasers") is not None:
        n = _int(doc["num_lasers"], "num_lasers", 1, MAX_LASERS)
        if n != len(rows):
            raise SettingsError("calibration.num_lasers", f"the number of lasers listed ({len(rows)})", n)
    res = doc.get("distance_resolution")
    if res is not None:
        res = _num(res, "distance_resolution", "a length in m")
        if not 0.0 < res <= 1.0:
            raise SettingsError("calibration.distance_resolution", "in (0, 1] m", res)
    return _velodyne_table(rows, res, f"Velodyne {len(rows)}-laser calibration", name)


#: db.xml per-laser element -> (ROS YAML key, factor to the YAML's unit)
_DBXML_FIELDS = {"rotCorrection_": ("rot_correction", math.pi / 180.0),
                 "vertCorrection_": ("vert_correction", math.pi / 180.0),
                 "distCorrection_": ("dist_correction", 0.01),
                 "distCorrectionX_": ("dist_correction_x", 0.01),
                 "distCorrectionY_": ("dist_correction_y", 0.01),
                 "vertOffsetCorrection_": ("vert_offset_correction", 0.01),
                 "horizOffsetCorrection_": ("horiz_offset_correction", 0.01),
                 "focalDistance_": ("focal_distance", 0.01), "focalSlope_": ("focal_slope", 1.0)}


def _xml_items(node: Element | None) -> list[Element]:
    return [el for el in node if el.tag == "item"] if node is not None else []


def parse_velodyne_xml(text: str, name: str = "db.xml") -> LaserTable:
    """Velodyne's ``db.xml`` as a LaserTable (degrees and centimetres converted as the
    driver's ``gen_calibration.py`` does); only the lasers ``enabled_`` marks (all when
    the file has no ``enabled_``), which must be ids 0..L-1.

    Raises:
        SettingsError (``NAME line L column C``): elements nested deeper than
        :mod:`.safeload` reads.
        SettingsError (``calibration.<field>``): not XML, no ``DB/points_``, a laser
        without ``id_``/``vertCorrection_``, a non-number, enabled lasers that are not
        ids 0..L-1.
    """
    import xml.etree.ElementTree as ET
    try:
        root = load_xml(text, name)
    except ET.ParseError as exc:
        raise SettingsError("calibration", "a Velodyne db.xml", f"{name} ({exc})") from None
    db = root if root.tag == "DB" else root.find("DB")
    points = db.find("points_") if db is not None else None
    if db is None or points is None:  # (db None: points None)
        raise SettingsError("calibration.points_", "a DB/points_ list of lasers (Velodyne db.xml)", name)
    enabled = [el.text for el in _xml_items(db.find("enabled_"))]
    rows: dict[int, dict[str, Any]] = {}
    for i, item in enumerate(_xml_items(points)):
        px = item.find("px")
        if px is None:
            raise SettingsError(f"calibration.points_[{i}]", "a px element", "none")
        fields = {el.tag: el.text for el in px}
        if "id_" not in fields:
            raise SettingsError(f"calibration.points_[{i}].id_", "a laser id", None)
        k = _int(fields["id_"], f"points_[{i}].id_", 0, 1023)
        if k in rows:
            raise SettingsError(f"calibration.points_[{i}].id_", "a laser id no other laser has", k)
        if "vertCorrection_" not in fields:
            raise SettingsError(f"calibration.points_[{i}].vertCorrection_", "an angle in degrees", None)
        row: dict[str, Any] = {"laser_id": k}
        for tag, (key, factor) in _DBXML_FIELDS.items():
            if tag in fields:
                row[key] = _num(fields[tag], f"points_[{i}].{tag}") * factor
        row.setdefault("rot_correction", 0.0)
        rows[k] = row
    if enabled:
        on = [k for k, t in enumerate(enabled) if _int(t, f"enabled_[{k}]", 0, 1) == 1]
    else:
        on = sorted(rows)
    if on != list(range(len(on))) or not on:
        raise SettingsError("calibration.enabled_", "enabled lasers numbered 0..L-1", on)
    missing = [k for k in on if k not in rows]
    if missing:
        raise SettingsError("calibration.points_", f"an entry for every enabled laser (0..{len(on) - 1})",
                            f"none for {missing}")
    for tag, key in (("minIntensity_", "min_intensity"), ("maxIntensity_", "max_intensity")):
        vals = [el.text for el in _xml_items(db.find(tag))]
        for k in on:
            if k < len(vals):
                rows[k][key] = _num(vals[k], f"{tag}[{k}]")
    checked = _check_velodyne_rows([rows[k] for k in on])
    for r in checked:
        if r.get("dist_correction_x") and r.get("dist_correction_y"):
            r["two_pt_correction_available"] = True  # (as gen_calibration.py marks them)
    lsb = db.find("distLSB_")
    res = None
    if lsb is not None:
        res = round(_num(lsb.text, "distLSB_", "a length in cm") * 0.01, _LENGTH_DIGITS)
        if not 0.0 < res <= 1.0:
            raise SettingsError("calibration.distLSB_", "in (0, 100] cm", lsb.text)
    return _velodyne_table(checked, res, f"Velodyne {len(checked)}-laser calibration", name)


# ---------------------------------------------------------------------------------------
# Ouster


_MODE = re.compile(r"^(\d{1,9})x(\d{1,9})$")


def _ouster_model(prod_line: str) -> str:
    """``OS-0-128`` / ``OS0-128-U1`` -> ``OS0-128``; else the text as given."""
    m = re.match(r"^OS-?(\d)-(\d+)", prod_line or "")
    return f"OS{m.group(1)}-{m.group(2)}" if m else (prod_line or "Ouster")


def parse_ouster_json(text: str, name: str = "metadata.json") -> LaserTable:
    """Ouster sensor metadata (legacy flat or nested layout) as a LaserTable.

    ``extra`` keeps what a writer of Ouster's formats needs: ``lidar_mode``,
    ``columns_per_frame``, ``columns_per_packet``, ``pixels_per_column``,
    ``pixel_shift_by_row``, ``column_window``, ``udp_profile_lidar``,
    ``lidar_to_sensor_transform``, ``imu_to_sensor_transform`` and
    ``beam_to_lidar_transform`` (row-major 4x4, mm; the pcap writer's ``scan.json`` gives
    the unit's own),
    ``lidar_origin_to_beam_origin_mm``, ``prod_line``, ``prod_sn``, ``build_rev``.
    ``cycle_s`` is one column's period, ``1 / (rate * columns)`` of the lidar mode;
    every beam of a column fires at once (``firing_s`` zeros).

    Raises:
        SettingsError (``NAME line L column C``): nested deeper or an integer longer than
        :mod:`.safeload` reads.
        SettingsError (``calibration.<field>``): not JSON, no ``beam_altitude_angles``,
        azimuths or pixel shifts not one per beam, a bad ``lidar_mode`` or
        ``columns_per_frame``, ``pixels_per_column`` not the number of beams.
    """
    try:
        doc = load_json(text, name)
    except SettingsError:
        raise
    except ValueError as exc:
        raise SettingsError("calibration", "an Ouster metadata file (JSON)", f"{name} ({exc})") from None
    if not isinstance(doc, dict):
        raise SettingsError("calibration", "a JSON object (Ouster metadata)",
                            f"{name} ({type(doc).__name__})")

    def section(key: str) -> dict[str, Any]:
        v = doc.get(key)
        if isinstance(v, str):  # firmware 1.12 wrote "error: Command not recognized." for what it lacked
            return {}
        if v is not None and not isinstance(v, dict):
            raise SettingsError(f"calibration.{key}", "a JSON object", type(v).__name__)
        return v or {}

    nested = "beam_intrinsics" in doc
    beams = section("beam_intrinsics") if nested else doc
    fmt = section("lidar_data_format") if nested else section("data_format")
    config = section("config_params") if nested else doc
    info = section("sensor_info") if nested else doc
    intr = section("lidar_intrinsics") if nested else doc
    if "beam_altitude_angles" not in beams:
        where = "beam_intrinsics.beam_altitude_angles" if nested else "beam_altitude_angles"
        raise SettingsError(f"calibration.{where}", "a list of beam elevations in degrees (Ouster metadata)",
                            None)
    prefix = "beam_intrinsics." if nested else ""
    alt = _numbers(beams["beam_altitude_angles"], prefix + "beam_altitude_angles")
    L = len(alt)
    if not 1 <= L <= MAX_LASERS:
        raise SettingsError(f"calibration.{prefix}beam_altitude_angles", f"1 to {MAX_LASERS} beams", L)
    az = _numbers(beams.get("beam_azimuth_angles", [0.0] * L), prefix + "beam_azimuth_angles", L)
    if any(abs(a) > 90.0 for a in alt):
        raise SettingsError(f"calibration.{prefix}beam_altitude_angles", "in [-90, 90] deg", alt)
    if L > 1 and len(set(alt)) == 1:  # (ouster-sdk tests/metadata/malformed/complete_but_all_zeros*)
        raise SettingsError(f"calibration.{prefix}beam_altitude_angles",
                            "the beams' elevations (not all equal)", alt)
    if any(abs(a) > 180.0 for a in az):
        raise SettingsError(f"calibration.{prefix}beam_azimuth_angles", "in [-180, 180] deg", az)
    extra: dict[str, Any] = {}
    n_mm = beams.get("lidar_origin_to_beam_origin_mm")
    b2l = beams.get("beam_to_lidar_transform")
    if b2l is not None:
        b2l = _numbers(b2l, prefix + "beam_to_lidar_transform", 16)
        extra["beam_to_lidar_transform"] = b2l
    if n_mm is None and b2l is not None:
        n_mm = b2l[3]  # the translation along x of the row-major 4x4 (mm)
    n_mm = _num(n_mm if n_mm is not None else 0.0, prefix + "lidar_origin_to_beam_origin_mm",
                "a length in mm")
    if not 0.0 <= n_mm < 1000.0:
        raise SettingsError(f"calibration.{prefix}lidar_origin_to_beam_origin_mm", "in [0, 1000) mm", n_mm)
    extra["lidar_origin_to_beam_origin_mm"] = n_mm
    mode = config.get("lidar_mode")
    cfg = "config_params." if nested else ""
    rate = None
    mode_cols = None  # the lidar mode's columns
    if mode is not None:
        m = _MODE.match(str(mode))
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise SettingsError(f"calibration.{cfg}lidar_mode", "columns x rate, e.g. 1024x10", mode)
        extra["lidar_mode"] = str(mode)
        rate = int(m.group(2))
        mode_cols = int(m.group(1))
    fpre = "lidar_data_format." if nested else "data_format."
    cols = fmt.get("columns_per_frame")
    if cols is not None:
        cols = _int(cols, fpre + "columns_per_frame", 1, 65536)
    elif mode is not None:
        cols = mode_cols
    if mode is not None and cols != mode_cols:
        raise SettingsError(f"calibration.{fpre}columns_per_frame", f"the lidar mode's columns ({mode})",
                            cols)
    if cols is not None:
        extra["columns_per_frame"] = cols
    for key, lo, hi in (("columns_per_packet", 1, 1024), ("pixels_per_column", 1, MAX_LASERS)):
        if fmt.get(key) is not None:
            extra[key] = _int(fmt[key], fpre + key, lo, hi)
    if extra.get("pixels_per_column", L) != L:
        raise SettingsError(f"calibration.{fpre}pixels_per_column", f"the number of beams ({L})",
                            extra["pixels_per_column"])
    if fmt.get("pixel_shift_by_row") is not None:
        shifts = _numbers(fmt["pixel_shift_by_row"], fpre + "pixel_shift_by_row", L)
        if any(s != int(s) for s in shifts):
            raise SettingsError(f"calibration.{fpre}pixel_shift_by_row", "integers (columns)", shifts)
        extra["pixel_shift_by_row"] = [int(s) for s in shifts]
    if fmt.get("column_window") is not None:
        extra["column_window"] = [int(v) for v in _numbers(fmt["column_window"], fpre + "column_window", 2)]
    if fmt.get("udp_profile_lidar") is not None:
        extra["udp_profile_lidar"] = str(fmt["udp_profile_lidar"])
    if intr.get("lidar_to_sensor_transform") is not None:
        extra["lidar_to_sensor_transform"] = _numbers(
            intr["lidar_to_sensor_transform"],
            ("lidar_intrinsics." if nested else "") + "lidar_to_sensor_transform", 16)
    imu = section("imu_intrinsics") if nested else doc
    if imu.get("imu_to_sensor_transform") is not None:
        extra["imu_to_sensor_transform"] = _numbers(
            imu["imu_to_sensor_transform"],
            ("imu_intrinsics." if nested else "") + "imu_to_sensor_transform", 16)
    for key in ("prod_line", "prod_sn", "build_rev"):
        if info.get(key) is not None:
            extra[key] = str(info[key])
    cycle = 1.0 / (rate * cols) if rate and cols else 0.0
    return LaserTable(vendor="ouster", model=_ouster_model(extra.get("prod_line", "")), source=name,
                      elevation_deg=tuple(round(a, _ANGLE_DIGITS) for a in alt),
                      azimuth_deg=tuple(round(a, _ANGLE_DIGITS) + 0.0 for a in az),
                      beam_origin_m=round(n_mm / 1000.0, _LENGTH_DIGITS), firing_s=(0.0,) * L, cycle_s=cycle,
                      ring=tuple(range(L)), extra=extra)


# ---------------------------------------------------------------------------------------
# Hesai


def parse_hesai_csv(text: str, name: str = "angle_correction.csv") -> LaserTable:
    """A Hesai angle-correction CSV (header ``Channel,Elevation,Azimuth`` or ``Laser
    id,Elevation,Azimuth``; channels 1..L, degrees) as a LaserTable. The file holds no
    firing times (``firing_s`` empty).

    Raises:
        SettingsError (``calibration.<field>``): no such header, channels not 1..L,
        non-numbers.
    """
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        raise SettingsError("calibration", "a Hesai angle-correction CSV (Channel,Elevation,Azimuth)", name)
    head = [c.strip().lower() for c in rows[0]]
    if len(head) < 3 or head[1] != "elevation" or head[2] != "azimuth":
        raise SettingsError("calibration.header", "Channel,Elevation,Azimuth (Hesai angle correction)",
                            ",".join(rows[0]))
    body = rows[1:]
    L = len(body)
    if not 1 <= L <= MAX_LASERS:
        raise SettingsError("calibration.channels", f"1 to {MAX_LASERS} channels", L)
    elev: list[float] = []
    az: list[float] = []
    for i, r in enumerate(body):
        if len(r) < 3:
            raise SettingsError(f"calibration.row[{i + 1}]", "channel, elevation, azimuth", ",".join(r))
        ch = _int(r[0].strip(), f"row[{i + 1}].channel", 1, L)
        if ch != i + 1:
            raise SettingsError(f"calibration.row[{i + 1}].channel", f"channel {i + 1} (channels in order)",
                                ch)
        e = _num(r[1].strip(), f"row[{i + 1}].elevation", "an angle in degrees")
        a = _num(r[2].strip(), f"row[{i + 1}].azimuth", "an angle in degrees")
        if abs(e) > 90.0 or abs(a) > 180.0:
            raise SettingsError(f"calibration.row[{i + 1}]",
                                "elevation in [-90, 90] and azimuth in [-180, 180] deg",
                                ",".join(r))
        elev.append(round(e, _ANGLE_DIGITS))
        az.append(round(a, _ANGLE_DIGITS) + 0.0)
    return LaserTable(vendor="hesai", model=f"Hesai {L}-channel calibration", source=name,
                      elevation_deg=tuple(elev), azimuth_deg=tuple(az), ring=tuple(range(L)))


_PARSERS = {"velodyne_yaml": parse_velodyne_yaml, "velodyne_xml": parse_velodyne_xml,
            "ouster_json": parse_ouster_json, "hesai_csv": parse_hesai_csv}


def read_calibration(path: StrPath) -> LaserTable:
    """The calibration file at ``path`` as a LaserTable (format by extension, see the
    module docstring); ``source`` is the file's name.

    Raises:
        SettingsError: ``calibration`` (missing, unreadable, not a regular file, too
        large, not UTF-8, an unknown extension) or ``calibration.<field>`` (a bad field).
    """
    from .blendfile import check_regular_file
    p = check_regular_file("calibration", path, "an existing calibration file")
    kind = FORMATS.get(p.suffix.lower())
    if kind is None:
        raise SettingsError("calibration", _FORMAT_HELP, str(path))
    try:
        if p.stat().st_size > MAX_BYTES:
            raise SettingsError("calibration", f"a file of at most {MAX_BYTES // 2**20} MiB", str(path))
        text = p.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SettingsError("calibration", f"a readable file ({exc.strerror})", str(path)) from None
    except UnicodeDecodeError:
        raise SettingsError("calibration", "a text file in UTF-8", str(path)) from None
    return _PARSERS[kind](text, Path(path).name)


__all__ = ["read_calibration", "parse_velodyne_yaml", "parse_velodyne_xml", "parse_ouster_json",
           "parse_hesai_csv", "velodyne_rings", "FORMATS"]
