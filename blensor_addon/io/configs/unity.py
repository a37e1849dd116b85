"""Unity's SDF-like lidar XML (seed 004, the "Import/Export example" of each lidar model
and the "Properties" tables): ``<sensor>`` elements read into :class:`~.SensorConfig` s
and written back. No bpy.

A file holds one ``<sensor>`` (the root, as seed 004's examples) or several inside any
wrapper (``<sdf><model><link name="base">``...); a sensor inside a ``<link>`` is mounted on
the object of that name (:attr:`SensorConfig.parent`). ``type`` is kept (``ray``,
``rasterlidar``, ``raytracedlidar``, ``gpu_lidar``...); a sensor whose type is not a
lidar's is named once and skipped. Angles are radians in the file (seed 004: "radians in
the description file"), degrees in BlenSor's settings.

Which BlenSor sensor (``movement_technology`` ``DC``, the default, or ``MEMS``):

- ``DC``, ``ray/scan/vertical/samples`` 1 (seed 004: "A value of 1 results in a planar
  LiDAR"): the planar scanner, one scan plane at the elevation midway between the
  vertical ``min_angle`` and ``max_angle`` (seed 004's planar examples give -0.15..0.15
  with one sample: their plane is level); the horizontal samples N are N columns from
  ``min_angle`` to ``max_angle`` inclusive (``angle_resolution = (max - min) / (N - 1)``,
  seed 004's step rule, whose raytraced example is "15 steps from -1.57 to 1.57"),
  ``start_angle = min``, ``end_angle`` (exclusive) so that exactly N columns result
  (:func:`._common.sweep_grid`); ``rotation_speed = update_rate`` (one sweep per update).
  Samples that would pass a full turn (``-pi..pi``) are a full turn of N columns.
- ``DC``, vertical samples V > 1: the rotating LiDAR, preset ``generic``: V lasers at
  elevations evenly spaced from the vertical ``min_angle`` to ``max_angle`` (seed 004's
  step ``(max - min) / (V - 1)``), the horizontal samples as above over the sector
  (a clockwise head, ``rotate_cw``, sweeps it from ``max_angle``), ``rotation_speed =
  update_rate``, ``rotation_direction`` from ``ray/raytraced/rotate_cw`` (``cw``,
  Velodyne's, when absent); no per-laser bias (``bias_sigma = 0``: Unity has none).
- ``MEMS``: the pattern-file sensor. Seed 004 names a "Scan Pattern" property without an
  XML element; BlenSor's extension element ``ray/scan/pattern/file`` (a .csv or .npy
  pattern, a relative path read from the XML's folder, ``//`` kept as Blender's
  relative-to-the-.blend) and ``ray/scan/pattern/period`` (s, 0: the file's own) give it.
  Without a file the sensor is imported with none and a note says so (set
  ``pattern_file`` before scanning). ``update_rate`` is kept for export.

Other elements (seed 004's tables): ``ray/range/{min,max}`` -> ``min_range``,
``max_range``; ``noise/{mean,stddev}`` -> ``noise_mu``, ``noise_sigma`` (0 when absent:
Unity adds no noise unless told); ``ray/range/resolution`` -> the planar scanner's
``range_resolution``; ``ray/beam/{divergence_angle (rad, full apex angle),
focus_distance (m), divergence_algorithm, samples_per_beam, wavelength (nm)}`` -> the
return-physics settings of the same names (``divergence_angle`` -> ``beam_divergence``;
a ``samples_per_beam`` without divergence is ignored, as Unity ignores it);
``topic``, ``output/is_laserscan``, ``output/is_pointcloud_organized`` are kept
(:attr:`SensorConfig.outputs`) and written back on export; ``topic`` with a note: BlenSor's
rosbag2 output publishes on its own topics (``/blensor/points``..., in a rig
``/blensor/<name>/...``), not on the file's. ``resolution`` of the scan axes, ``raster/*``,
``intensity``, ``intensity_enabled``, ``is_progressive``, ``always_on`` and
``visualize`` are named as ignored; any other element as unknown. ``pose`` (SDF's ``x y z
roll pitch yaw``, m and rad, REP-103 axes relative to the parent link) is read and
written; seed 004 shows none.
"""
from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ...core.errors import SettingsError
from ...core.sensors.budget import MAX_RAYS
from ...core.sensors.pattern import PatternSettings
from ...core.sensors.planar import PlanarSettings
from ...core.sensors.rotating import LidarSettings
from ...core.settings import setting_value
from ..safeload import MAX_INT_DIGITS, load_xml
from . import ConfigFormat, SensorConfig
from ._common import (f32, grid_samples, matrix_rpy, num, pose_matrix, read_text, rpy_matrix, settings_of,
                      sweep_grid, unexpressed, validated)

if TYPE_CHECKING:
    from ...core.ndtypes import F64
    from ..atomic import StrPath

#: ``type`` attributes read as lidars (seed 004's three models; SDF's ray and lidar sensors)
LIDAR_TYPES = ("ray", "gpu_ray", "lidar", "gpu_lidar", "rasterlidar", "raytracedlidar", "physicslidar")
#: the divergence_algorithm texts read (lower case, spaces and _ removed) -> setting value;
#: seed 004 names "Random Selection" and "Average"; BlenSor adds first and echoes
DIVERGENCE = {"random": "random", "randomselection": "random", "average": "average", "first": "first",
              "echoes": "echoes"}
#: elements read but not used: why
IGNORED = {
    "ray/scan/horizontal/resolution": "BlenSor casts exactly the samples (no interpolation or averaging)",
    "ray/scan/vertical/resolution": "BlenSor casts exactly the samples (no interpolation or averaging)",
    "ray/scan/is_progressive": "BlenSor casts each ray at its own time (continuous time model)",
    "ray/intensity_enabled": "BlenSor computes intensities (written where the format has a field)",
    "ray/intensity": "BlenSor computes intensities from the materials",
    "ray/raster": "a raster lidar's render settings",
    "always_on": "a simulator option",
    "visualize": "a simulator option",
    "noise/type": "Gaussian noise is BlenSor's",
}
#: elements the reader maps (paths below <sensor>)
KNOWN = {"update_rate", "topic", "pose", "movement_technology", "output/is_laserscan",
         "output/is_pointcloud_organized", "noise/mean", "noise/stddev", "ray/range/min", "ray/range/max",
         "ray/range/resolution", "ray/raytraced/rotate_cw", "ray/scan/pattern/file",
         "ray/scan/pattern/period",
         *(f"ray/scan/{a}/{k}" for a in ("horizontal", "vertical")
           for k in ("samples", "min_angle", "max_angle")),
         *(f"ray/beam/{k}" for k in ("divergence_angle", "focus_distance", "divergence_algorithm",
                                     "samples_per_beam", "wavelength"))}
#: setting -> the element named when its value is refused
FIELD_OF = {"max_range": "ray/range/max", "min_range": "ray/range/min", "noise_mu": "noise/mean",
            "noise_sigma": "noise/stddev", "range_resolution": "ray/range/resolution",
            "rotation_speed": "update_rate", "elevations": "ray/scan/vertical", "angle_resolution":
            "ray/scan/horizontal", "start_angle": "ray/scan/horizontal/min_angle",
            "end_angle": "ray/scan/horizontal/max_angle", "beam_divergence": "ray/beam/divergence_angle",
            "focus_distance": "ray/beam/focus_distance", "samples_per_beam": "ray/beam/samples_per_beam",
            "wavelength": "ray/beam/wavelength", "divergence_algorithm": "ray/beam/divergence_algorithm",
            "pattern_file": "ray/scan/pattern/file", "pattern_period": "ray/scan/pattern/period"}
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _leaves(elem: ET.Element, prefix: str = "") -> list[tuple[str, ET.Element]]:
    """The leaf elements below ``elem`` as (path, element) in document order (``ray/raster``
    as one leaf); an explicit stack, not a call per level (the document's nesting is
    bounded by :func:`~..safeload.load_xml` too)."""
    out: list[tuple[str, ET.Element]] = []
    stack: list[tuple[Iterator[ET.Element], str]] = [(iter(elem), prefix)]
    while stack:
        children, pre = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        if not isinstance(child.tag, str):
            continue
        path = pre + ("ray" if not pre and child.tag == "lidar" else child.tag)  # SDF 1.7+ <lidar>
        if path == "ray/raster" or path.startswith("ray/raster/"):
            out.append(("ray/raster", child))
        elif len(child):
            stack.append((iter(child), path + "/"))
        else:
            out.append((path, child))
    return out


class _Sensor:
    """The elements of one <sensor> with typed getters naming the element on error."""

    def __init__(self, where: str, elem: ET.Element) -> None:
        self.where = where
        self.values: dict[str, str] = {}
        self.unknown: list[str] = []
        self.ignored: list[str] = []
        for path, leaf in _leaves(elem):
            key = path
            if key in KNOWN:
                if key in self.values:
                    raise SettingsError(f"{where} {key}", "given once", "twice")
                self.values[key] = (leaf.text or "").strip()
            elif key in IGNORED:
                if not any(line.startswith(key + ":") for line in self.ignored):
                    self.ignored.append(f"{key}: {IGNORED[key]}; ignored")
            else:
                self.unknown.append(key)

    def has(self, key: str) -> bool:
        return key in self.values

    @overload
    def text(self, key: str) -> str | None: ...

    @overload
    def text(self, key: str, default: str) -> str: ...

    def text(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    @overload
    def number(self, key: str, default: float | None = None, *, integer: Literal[False] = False,
               lo: float | None = None, lo_open: bool = False) -> float: ...

    @overload
    def number(self, key: str, default: int | None = None, *, integer: Literal[True],
               lo: float | None = None, lo_open: bool = False) -> int: ...

    def number(self, key: str, default: float | None = None, *, integer: bool = False,
               lo: float | None = None, lo_open: bool = False) -> float:
        if key not in self.values:
            if default is None:
                what = "an integer" if integer else "a number"
                raise SettingsError(f"{self.where} {key}", f"given ({what})", "nothing")
            return default
        t = self.values[key]
        if integer and len(t.lstrip("+-")) > MAX_INT_DIGITS:  # (int() of 5000 digits raises, 400 overflow)
            raise SettingsError(f"{self.where} {key}", f"an integer of at most {MAX_INT_DIGITS} digits", t)
        v: float | None
        try:
            v = int(t) if integer else float(t)
        except ValueError:
            v = None
        bad = v is None or not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo))
        if bad or v is None:
            what = "an integer" if integer else "a number"
            if lo is not None:
                what += f" {'>' if lo_open else '>='} {lo:g}"
            raise SettingsError(f"{self.where} {key}", what, t)
        return v

    def flag(self, key: str, default: bool | None = None) -> bool | None:
        if key not in self.values:
            return default
        t = self.values[key].lower()
        if t not in TRUE + FALSE:
            raise SettingsError(f"{self.where} {key}", "true or false", self.values[key])
        return t in TRUE


def _pose(s: _Sensor) -> F64 | None:
    if not s.has("pose"):
        return None
    try:
        v = [float(p) for p in s.text("pose", "").split()]
    except ValueError:
        v = []
    if len(v) != 6 or not all(math.isfinite(x) for x in v):
        raise SettingsError(f"{s.where} pose", "6 numbers: x y z (m) roll pitch yaw (rad)", s.text("pose"))
    return pose_matrix(v[:3], rpy_matrix(*v[3:]))


def _beam(s: _Sensor, values: dict[str, Any], notes: list[str]) -> None:
    """The return-physics elements (seed 004 "Divergence Angle" .. "Wavelength")."""
    div = s.number("ray/beam/divergence_angle", 0.0, lo=0.0)
    values["beam_divergence"] = div
    if s.has("ray/beam/focus_distance"):
        values["focus_distance"] = s.number("ray/beam/focus_distance", lo=0.0)
    if s.has("ray/beam/wavelength"):
        values["wavelength"] = s.number("ray/beam/wavelength", lo=0.0, lo_open=True)
    if s.has("ray/beam/divergence_algorithm"):
        raw = s.text("ray/beam/divergence_algorithm", "")
        key = raw.lower().replace(" ", "").replace("_", "").replace("-", "")
        if key not in DIVERGENCE:
            raise SettingsError(f"{s.where} ray/beam/divergence_algorithm", "Random Selection, Average, "
                                "first or echoes", raw)
        values["divergence_algorithm"] = DIVERGENCE[key]
    if s.has("ray/beam/samples_per_beam"):
        n = s.number("ray/beam/samples_per_beam", integer=True, lo=1)
        if div == 0.0 and n > 1:
            notes.append("ray/beam/samples_per_beam: ignored without a divergence angle (as Unity ignores "
                         "it)")
        else:
            values["samples_per_beam"] = n


def _horizontal(s: _Sensor) -> tuple[float, float, int]:
    n = s.number("ray/scan/horizontal/samples", integer=True, lo=1)
    lo = s.number("ray/scan/horizontal/min_angle")
    hi = s.number("ray/scan/horizontal/max_angle")
    for k, v in (("min_angle", lo), ("max_angle", hi)):  # errors name the file's element, in radians
        if abs(f32(math.degrees(v))) > 360.0:  # (the bound of the float32 setting: 6.28319 is 2 pi)
            raise SettingsError(f"{s.where} ray/scan/horizontal/{k}", "in [-2 pi, 2 pi] rad "
                                "([-6.2831853, 6.2831853], one turn either way)",
                                s.text(f"ray/scan/horizontal/{k}"))
    if hi < lo:
        raise SettingsError(f"{s.where} ray/scan/horizontal/max_angle", f">= min_angle ({lo:g} rad)", hi)
    if n > 1 and hi == lo:
        raise SettingsError(f"{s.where} ray/scan/horizontal/max_angle", f"> min_angle ({lo:g} rad) for "
                            f"{n} samples", hi)
    return math.degrees(lo), math.degrees(hi), n


def _vertical(s: _Sensor) -> tuple[float, float, int]:
    n = s.number("ray/scan/vertical/samples", 1, integer=True, lo=1)
    lo = s.number("ray/scan/vertical/min_angle", 0.0)
    hi = s.number("ray/scan/vertical/max_angle", 0.0)
    if hi < lo:
        raise SettingsError(f"{s.where} ray/scan/vertical/max_angle", f">= min_angle ({lo:g} rad)", hi)
    for k, v in (("min_angle", lo), ("max_angle", hi)):
        if abs(v) > math.pi / 2 + 1e-12:
            raise SettingsError(f"{s.where} ray/scan/vertical/{k}", "in [-pi/2, pi/2] rad", v)
    return math.degrees(lo), math.degrees(hi), n


def _pattern_path(text: str, path: str) -> str:
    if not text or text.startswith("//") or os.path.isabs(text):
        return text
    return str((Path(path).resolve().parent / text).resolve())


def _sensor(where: str, elem: ET.Element, parent: str | None, path: str) -> SensorConfig:
    name = elem.get("name")
    if not name:
        raise SettingsError(f"{where} name", "a sensor name (the name attribute)", name)
    where = f"{path} sensor '{name}'"
    s = _Sensor(where, elem)
    notes = list(s.ignored)
    outputs: dict[str, Any] = {"type": elem.get("type") or "ray"}
    if s.has("topic"):  # said, not silently unused
        outputs["topic"] = s.text("topic")
        notes.append(f"topic: kept for export; BlenSor's rosbag2 output publishes on /blensor/ (in a rig "
                     f"/blensor/{name}/), not on {s.text('topic')}")
    for key in ("output/is_laserscan", "output/is_pointcloud_organized"):
        if s.has(key):
            outputs[key.split("/")[1]] = s.flag(key)
    tech = (s.text("movement_technology") or "DC").upper()
    if tech not in ("DC", "MEMS"):
        raise SettingsError(f"{where} movement_technology", "DC or MEMS", s.text("movement_technology"))
    if s.has("movement_technology"):
        outputs["movement_technology"] = tech
    values: dict[str, Any] = {"max_range": s.number("ray/range/max", lo=0.0, lo_open=True),
              "min_range": s.number("ray/range/min", 0.0, lo=0.0),
              "noise_mu": s.number("noise/mean", 0.0), "noise_sigma": s.number("noise/stddev", 0.0, lo=0.0)}
    _beam(s, values, notes)
    cw = s.flag("ray/raytraced/rotate_cw")
    if tech == "MEMS":
        stype = "pattern"
        values["preset"] = "file"
        file = _pattern_path(s.text("ray/scan/pattern/file", ""), path)
        values["pattern_file"] = file
        values["pattern_period"] = s.number("ray/scan/pattern/period", 0.0, lo=0.0)
        if not file:
            notes.append("movement_technology MEMS: no pattern file (ray/scan/pattern/file); set "
                         "pattern_file before scanning")
        if s.has("update_rate"):
            outputs["update_rate"] = s.number("update_rate", lo=0.0)
            notes.append("update_rate: the pattern file's timing sets the firing; kept for export")
        for key in [k for k in s.values if k.startswith(("ray/scan/horizontal", "ray/scan/vertical"))]:
            notes.append(f"{key}: the pattern file gives the rays (MEMS); ignored")
        if cw is not None:
            notes.append("ray/raytraced/rotate_cw: the pattern file gives the rays (MEMS); ignored")
    else:
        rate = s.number("update_rate", lo=0.0, lo_open=True)
        h_lo, h_hi, hn = _horizontal(s)
        v_lo, v_hi, vn = _vertical(s)
        if hn * vn > MAX_RAYS:  # named as the file's element, not angle_resolution
            raise SettingsError(f"{s.where} ray/scan/horizontal/samples", f"at most {MAX_RAYS // vn:,} with "
                                f"{vn} vertical samples (BlenSor casts at most {MAX_RAYS:,} rays per scan)",
                                s.text("ray/scan/horizontal/samples"))
        for key in ("ray/scan/pattern/file", "ray/scan/pattern/period"):
            if s.has(key):
                notes.append(f"{key}: only read with movement_technology MEMS; ignored")
        if vn == 1:
            stype = "planar"
            start, end, res, _full = sweep_grid(h_lo, h_hi, hn)
            values.update(preset="generic", elevations=((v_lo + v_hi) / 2.0,), start_angle=start,
                          end_angle=end, angle_resolution=res, rotation_speed=rate, error_table="",
                          range_resolution=s.number("ray/range/resolution", 0.0, lo=0.0))
            if cw is not None:
                notes.append("ray/raytraced/rotate_cw: the planar scanner sweeps from min_angle to max_angle "
                             "(LaserScan order); ignored")
        else:
            stype = "rotating"
            cw = True if cw is None else cw
            start, end, res, _full = sweep_grid(h_lo, h_hi, hn, from_end=cw)
            elevations = tuple(float(e) for e in np.linspace(v_lo, v_hi, vn))
            values.update(preset="generic", elevations=elevations, start_angle=start, end_angle=end,
                          angle_resolution=res, rotation_speed=rate, rotation_direction="cw" if cw else "ccw",
                          bias_sigma=0.0)
            if s.has("ray/range/resolution"):
                notes.append("ray/range/resolution: the rotating LiDAR does not round ranges; ignored")
    config = SensorConfig(name=name, sensor_type=stype, values=values, parent=parent, pose=_pose(s),
                          outputs=outputs, ignored=notes, unknown=s.unknown)
    validated(config, where, FIELD_OF)
    return config


def read_configs(text: str, path: str) -> list[SensorConfig]:
    """The lidar sensors of the XML ``text`` (module docstring).

    Raises:
        SettingsError: not XML (line and column), nested deeper than
            :data:`~..safeload.MAX_DEPTH` elements, no lidar ``<sensor>``, an element
            missing, malformed or out of range (``PATH sensor 'NAME' ELEMENT``), a name
            twice."""
    try:
        root = load_xml(text, path)
    except ET.ParseError as exc:
        line, col = exc.position
        raise SettingsError(f"{path} line {line} column {col + 1}", "XML (a <sensor> element)",
                            str(exc).split(":")[0]) from None
    parents = {child: elem for elem in root.iter() for child in elem}
    sensors = [root] if root.tag == "sensor" else [e for e in root.iter("sensor")]
    configs: list[SensorConfig] = []
    notes: list[str] = []
    for i, elem in enumerate(sensors):
        kind = elem.get("type") or "ray"
        if kind.lower() not in LIDAR_TYPES:
            notes.append(f"sensor {elem.get('name')!r} (type {kind!r}): not a lidar; skipped")
            continue
        up, parent = parents.get(elem), None
        while up is not None:
            if up.tag == "link" and up.get("name"):
                parent = up.get("name")
                break
            up = parents.get(up)
        config = _sensor(f"{path} sensor[{i}]", elem, parent, path)
        if any(c.name == config.name for c in configs):
            raise SettingsError(f"{path} sensor '{config.name}'", "a name no other sensor of the file has",
                                config.name)
        configs.append(config)
    if not configs:
        kinds = ", ".join(LIDAR_TYPES)
        raise SettingsError(path, f"an XML file with at least one lidar <sensor> (type {kinds})", root.tag)
    configs[0].ignored[:0] = notes
    return configs


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    e = ET.SubElement(parent, tag)
    if text is not None:
        e.text = text
    return e


def _horizontal_texts(start: float, end: float, res: float, from_end: bool) -> tuple[str, str, int]:
    """(``min_angle``, ``max_angle`` rad as written, samples) of the sweep ``start..end``
    at ``res`` (deg): the first and last column (:func:`._common.grid_samples`) in the
    fewest digits (6 to 17) whose import (:func:`._common.sweep_grid`, the step recomputed
    in float32) gives the same first and last column and samples, so that exporting an
    imported file writes the same text (``-1.57``, not ``-1.570000041628963``; a sector
    ending at 360 deg is not ``6.2831853``, which reads back as 359.9999982 deg and a
    step one float32 ulp off). So export(import(export(x))) == export(x)."""
    lo, hi, n = grid_samples(start, end, res, from_end=from_end)
    for _ in range(8):  # onto a grid an import gives (a camera's own angles need not be one)
        grid = sweep_grid(math.degrees(math.radians(lo)), math.degrees(math.radians(hi)), n,
                          from_end=from_end)
        again = grid_samples(*grid[:3], from_end=from_end)
        if again == (lo, hi, n):
            break
        lo, hi, n = again
    r_lo, r_hi = math.radians(lo), math.radians(hi)
    for digits in range(6, 18):
        t_lo, t_hi = float(f"{r_lo:.{digits}g}"), float(f"{r_hi:.{digits}g}")
        if max(abs(f32(math.degrees(t))) for t in (t_lo, t_hi)) > 360.0:
            continue  # (6.28319 rad is beyond a turn: refused on import)
        s2, e2, res2, _full = sweep_grid(math.degrees(t_lo), math.degrees(t_hi), n, from_end=from_end)
        if grid_samples(s2, e2, res2, from_end=from_end) == (lo, hi, n):
            return num(t_lo), num(t_hi), n
    return num(r_lo), num(r_hi), n


def _sensor_element(config: SensorConfig) -> ET.Element:
    s = settings_of(config)
    out = config.outputs
    st = config.sensor_type
    # the settings of the sensor types dumps writes (planar, rotating, pattern)
    assert isinstance(s, (PlanarSettings, LidarSettings, PatternSettings))
    e = ET.Element("sensor", {"type": str(out.get("type", "raytracedlidar")), "name": config.name})
    if config.pose is not None and not np.allclose(config.pose, np.eye(4), rtol=0.0, atol=1e-12):
        P = np.asarray(config.pose, dtype=np.float64)
        _sub(e, "pose", " ".join(num(v) for v in (*P[:3, 3], *matrix_rpy(P[:3, :3]))))
    if isinstance(s, PatternSettings):  # (st "pattern")
        if "update_rate" in out:
            _sub(e, "update_rate", num(out["update_rate"]))
    else:
        _sub(e, "update_rate", num(s.rotation_speed))
    if "topic" in out:
        _sub(e, "topic", str(out["topic"]))
    if st == "pattern" or "movement_technology" in out:
        _sub(e, "movement_technology", "MEMS" if st == "pattern" else "DC")
    if "is_laserscan" in out or "is_pointcloud_organized" in out:
        o = _sub(e, "output")
        for key in ("is_laserscan", "is_pointcloud_organized"):
            if key in out:
                _sub(o, key, "true" if out[key] else "false")
    ray = _sub(e, "ray")
    scan = _sub(ray, "scan")
    if isinstance(s, PatternSettings):  # (st "pattern")
        p = _sub(scan, "pattern")
        _sub(p, "file", s.pattern_file)
        _sub(p, "period", num(s.pattern_period))
    else:
        el = np.asarray(s.elevations if isinstance(s, PlanarSettings) else s.table.elevation_deg,
                        dtype=np.float64)
        # the sweep's direction as the file reads back: one laser is a planar scanner (min to max)
        cw = isinstance(s, LidarSettings) and s.rotation_direction == "cw" and el.size > 1
        t_lo, t_hi, n = _horizontal_texts(s.start_angle, s.end_angle, s.angle_resolution, cw)
        h = _sub(scan, "horizontal")
        _sub(h, "samples", str(n))
        _sub(h, "min_angle", t_lo)
        _sub(h, "max_angle", t_hi)
        v = _sub(scan, "vertical")
        _sub(v, "samples", str(el.size))
        _sub(v, "min_angle", num(math.radians(float(el.min()))))  # (elevations are stored in full)
        _sub(v, "max_angle", num(math.radians(float(el.max()))))
    rng = _sub(ray, "range")
    _sub(rng, "min", num(s.min_range))
    _sub(rng, "max", num(s.max_range))
    lasers = 0 if st == "pattern" else el.size
    if st == "planar" or lasers == 1:  # (one laser reads back as the planar scanner: written as one)
        _sub(rng, "resolution", num(setting_value(s, "range_resolution")))
    if isinstance(s, LidarSettings) and lasers > 1:  # (st "rotating")
        _sub(_sub(ray, "raytraced"), "rotate_cw", "true" if s.rotation_direction == "cw" else "false")
    elif isinstance(s, PlanarSettings) and len(s.elevations) > 1:  # (st "planar")
        # read back as a rotating LiDAR: sweeping as the planar
        _sub(_sub(ray, "raytraced"), "rotate_cw", "false")
    beam = _sub(ray, "beam")
    _sub(beam, "divergence_angle", num(s.beam_divergence))
    _sub(beam, "focus_distance", num(s.focus_distance))
    _sub(beam, "divergence_algorithm", s.divergence_algorithm)
    _sub(beam, "samples_per_beam", str(s.samples_per_beam))
    _sub(beam, "wavelength", num(s.wavelength))
    noise = _sub(e, "noise")
    _sub(noise, "type", "gaussian")
    _sub(noise, "mean", num(s.noise_mu))
    _sub(noise, "stddev", num(s.noise_sigma))
    return e


class UnityFormat(ConfigFormat):
    """Unity's SDF-like lidar XML (seed 004): the module docstring."""

    name = "unity"
    label = "Unity"
    suffixes = (".xml", ".sdf")
    description = "Unity SDF-like <sensor> XML (planar, rotating, MEMS pattern lidars; radians)"

    def read(self, path: StrPath) -> list[SensorConfig]:
        """The lidar sensors of the file at ``path`` (:func:`read_configs`).

        Raises:
            SettingsError: unreadable, not XML, or a bad element (one line)."""
        return read_configs(read_text(path, str(path)), str(path))

    def dumps(self, configs: list[SensorConfig]) -> tuple[str, list[str]]:
        """(the file's text, one line per thing it cannot express). One sensor without a
        parent is the root ``<sensor>`` (as seed 004's examples); otherwise ``<sdf
        version="1.9"><model name="blensor">`` holds a ``<link name=PARENT>`` per parent
        and the sensors without one.

        Raises:
            SettingsError (``NAME sensor_type``): a sensor type other than planar,
            rotating and pattern."""
        for c in configs:
            if c.sensor_type not in ("planar", "rotating", "pattern"):
                raise SettingsError(f"{c.name} sensor_type", "planar, rotating or pattern (the lidars "
                                    "Unity's XML describes)", c.sensor_type)
        if len(configs) == 1 and not configs[0].parent:
            root = _sensor_element(configs[0])
        else:
            root = ET.Element("sdf", {"version": "1.9"})
            model = _sub(root, "model")
            model.set("name", "blensor")
            links: dict[str, ET.Element] = {}
            for c in configs:
                holder = model
                if c.parent:
                    if c.parent not in links:
                        links[c.parent] = _sub(model, "link")
                        links[c.parent].set("name", c.parent)
                    holder = links[c.parent]
                holder.append(_sensor_element(c))
        ET.indent(root, space="  ")
        text = ET.tostring(root, encoding="unicode") + "\n"
        back = read_configs(text, "(written)")
        by_name = {c.name: c for c in back}
        return text, unexpressed("Unity", configs, [by_name[c.name] for c in configs])


FORMAT = UnityFormat()
