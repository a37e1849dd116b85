"""Real units' laser tables and calibration import.

The sample files in ``tests/data/calib/`` are real units' calibration files, unchanged
(sources in ``tests/data/calib/README.md``): the parsers of ``blensor_addon/io/calib.py``
are checked against the files' own numbers (read here with the plain YAML/XML/JSON/CSV
readers), against the vendors' range-to-XYZ formulas (the azimuth sign), and the packaged
preset tables against the same files. ``blensor calib import`` runs on a copy of
``scenes/crossing.blend`` with real bpy.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import SENSORS
from blensor_addon.core.sensors.calibration import LaserTable, packaged_table
from blensor_addon.core.sensors.rotating_presets import PRESETS, preset_table
from blensor_addon.core.text import cite
from blensor_addon.io.calib import (parse_hesai_csv, parse_ouster_json, parse_velodyne_xml, parse_velodyne_yaml,
                                    read_calibration)
from conftest import CROSSING

DATA = Path(__file__).resolve().parent / "data" / "calib"
BLENSOR = str(Path(sys.executable).parent / "blensor")
SZTAKI = DATA / "64e_s2.1-sztaki.yaml"
OS0 = DATA / "OS-0-128-U1_v2.3.0_1024x10.json"
OS1 = DATA / "2_1_2_os1-991913000010-64.json"


def yaml_lasers(path: Path) -> list[dict]:
    """The file's ``lasers`` sorted by id, read with a plain YAML reader."""
    doc = YAML(typ="safe").load(path.read_text())
    return sorted(doc["lasers"], key=lambda r: r["laser_id"])


def run(*args):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True)


# ---------------------------------------------------------------------------------------
# parsers against the files' own numbers


def test_velodyne_yaml_reads_the_hdl64e_s2_units_corrections():
    t = read_calibration(SZTAKI)
    rows = yaml_lasers(SZTAKI)
    assert (t.vendor, t.lasers, t.source) == ("velodyne", 64, "64e_s2.1-sztaki.yaml")
    np.testing.assert_allclose(t.elevation_deg, [math.degrees(r["vert_correction"]) for r in rows], atol=1e-9)
    # azimuth_deg is the column's yaw minus the beam's: -rot_correction (see test_azimuth_sign_*)
    np.testing.assert_allclose(t.azimuth_deg, [-math.degrees(r["rot_correction"]) for r in rows], atol=1e-9)
    np.testing.assert_allclose(t.distance_m, [r["dist_correction"] for r in rows], atol=1e-9)
    np.testing.assert_allclose(t.vert_offset_m, [r["vert_offset_correction"] for r in rows], atol=1e-9)
    np.testing.assert_allclose(t.horiz_offset_m, [r["horiz_offset_correction"] for r in rows], atol=1e-9)
    # the figures issue 21 quotes for a real HDL-64E S2: corrections about -8.8..+10 deg,
    # origin offsets 0.10-0.22 m vertical and +-2.6 cm horizontal
    rot = -np.asarray(t.azimuth_deg)
    assert -8.8 < rot.min() < -8.7 and 9.6 < rot.max() < 9.7
    assert 0.105 < min(t.vert_offset_m) and max(t.vert_offset_m) < 0.213
    assert max(abs(v) for v in t.horiz_offset_m) == pytest.approx(0.026, abs=1e-6)
    # ring as velodyne_pointcloud numbers it: rank of the elevation, 0 = lowest
    assert [t.ring[k] for k in np.argsort(t.elevation_deg)] == list(range(64))
    assert t.extra["distance_resolution"] == 0.002
    assert t.extra["dist_correction_x"][0] == pytest.approx(rows[0]["dist_correction_x"])


def test_db_xml_gives_the_same_table_as_the_drivers_yaml_of_it():
    # 32db.xml lists 64 entries of which enabled_ marks 32 (ids 0..31); 32db.yaml is its
    # conversion by the driver's gen_calibration.py (degrees -> radians)
    x = read_calibration(DATA / "32db.xml")
    y = read_calibration(DATA / "32db.yaml")
    root = ET.parse(DATA / "32db.xml").getroot()
    enabled = [int(el.text) for el in root.find("DB/enabled_") if el.tag == "item"]
    assert len(enabled) == 64 and sum(enabled) == 32 == x.lasers == y.lasers
    np.testing.assert_allclose(x.elevation_deg, y.elevation_deg, atol=1e-6)
    assert x.elevation_deg[0] == -30.67 and x.ring == y.ring and x.extra["distance_resolution"] == 0.002
    assert x.azimuth_deg == y.azimuth_deg == (0.0,) * 32


def test_ouster_metadata_legacy_layout_real_os0_128():
    t = read_calibration(OS0)
    doc = json.loads(OS0.read_text())
    assert (t.vendor, t.model, t.lasers) == ("ouster", "OS0-128", 128)
    assert t.elevation_deg == tuple(doc["beam_altitude_angles"])
    assert t.azimuth_deg == tuple(doc["beam_azimuth_angles"])
    # issue 21, section 1: a real unit: +45.75..-46.26 deg, not uniform, azimuths about +-11 deg
    assert (t.elevation_deg[0], t.elevation_deg[-1]) == (45.75, -46.26)
    steps = -np.diff(t.elevation_deg)
    assert (round(steps.min(), 6), round(steps.max(), 6)) == (0.43, 1.05)
    assert max(t.azimuth_deg) == 11.24 and min(t.azimuth_deg) == -11.35
    assert t.beam_origin_m == 0.02767 and t.ring == tuple(range(128))  # ouster-ros: top beam is ring 0
    assert t.extra["pixel_shift_by_row"] == doc["data_format"]["pixel_shift_by_row"]
    assert (t.extra["lidar_mode"], t.extra["columns_per_frame"]) == ("1024x10", 1024)
    assert t.extra["lidar_to_sensor_transform"] == doc["lidar_to_sensor_transform"]
    assert t.cycle_s == pytest.approx(1.0 / 10240.0) and t.firing_s == (0.0,) * 128


def test_ouster_metadata_nested_layout_equals_the_flat_one():
    nested = json.loads(OS1.read_text())
    t = parse_ouster_json(OS1.read_text(), OS1.name)
    assert (t.model, t.lasers, t.beam_origin_m) == ("OS1-64", 64, 0.012163)
    assert t.elevation_deg == tuple(nested["beam_intrinsics"]["beam_altitude_angles"])
    # the same unit's numbers in the legacy flat layout (as the sensor's firmware 2.0 wrote it)
    flat = {**nested["beam_intrinsics"], **nested["sensor_info"], **nested["lidar_intrinsics"],
            **nested["imu_intrinsics"], "lidar_mode": nested["config_params"]["lidar_mode"],
            "data_format": nested["lidar_data_format"]}
    f = parse_ouster_json(json.dumps(flat), OS1.name)
    assert f == t and f.extra == t.extra
    assert t.extra["imu_to_sensor_transform"] == nested["imu_intrinsics"]["imu_to_sensor_transform"]


def test_ouster_imu_to_sensor_transform_reaches_scan_json():
    # issue 21 review, item 5: the OusterEncoder's metadata takes extra["imu_to_sensor_transform"],
    # which the parser dropped: scan.json had the identity instead of the unit's IMU position
    from blensor_addon.core.capabilities import Device
    from blensor_addon.io.packets.ouster import OusterEncoder
    doc = json.loads(OS0.read_text())
    t = read_calibration(OS0)
    assert t.extra["imu_to_sensor_transform"] == doc["imu_to_sensor_transform"]
    meta = OusterEncoder(Device("ouster", t.model, t, 10.0, "cw", 1024.0)).metadata()
    assert meta["imu_to_sensor_transform"] == doc["imu_to_sensor_transform"]
    assert meta["imu_to_sensor_transform"][3] == 6.253  # mm, not the identity
    bad = dict(doc, imu_to_sensor_transform=[1, 0, 0])
    with pytest.raises(SettingsError, match="calibration.imu_to_sensor_transform must be 16 numbers"):
        parse_ouster_json(json.dumps(bad), "bad.json")


def test_hesai_csv_reads_angle_corrections():
    rows = list(csv.reader((DATA / "Pandar64.csv").open()))[1:]
    t = read_calibration(DATA / "Pandar64.csv")
    assert (t.vendor, t.lasers) == ("hesai", 64)
    assert t.elevation_deg == tuple(float(r[1]) for r in rows)
    assert t.azimuth_deg == tuple(float(r[2]) for r in rows)  # clockwise offset = column yaw - beam yaw
    assert t.ring == tuple(range(64)) and t.elevation_deg[0] == 14.708


def yaw(x, y):
    return math.degrees(math.atan2(y, x))


def test_azimuth_sign_follows_velodyne_pointcloud():
    # velodyne_pointcloud rawdata.cc: x = d cos(az - rot), y = -d sin(az - rot) (az clockwise)
    t = read_calibration(SZTAKI)
    rot = [r["rot_correction"] for r in yaml_lasers(SZTAKI)]
    az = math.radians(37.0)
    col_yaw = yaw(math.cos(az), -math.sin(az))
    for k in (0, 17, 63):
        beam_yaw = yaw(math.cos(az - rot[k]), -math.sin(az - rot[k]))
        assert col_yaw - beam_yaw == pytest.approx(t.azimuth_deg[k], abs=1e-6)


def test_azimuth_sign_follows_ousters_range_to_xyz():
    # Ouster sensor docs, "Lidar Range to XYZ": theta_enc = 2 pi (1 - j / W),
    # x = (r - n) cos(theta_enc - theta_az) cos(phi) + n cos(theta_enc), theta_az = 2 pi beam_azimuth / 360
    t = read_calibration(OS0)
    j, W = 100, 1024
    enc = 2 * math.pi * (1 - j / W)
    for k in (0, 3, 127):
        th = math.radians(t.azimuth_deg[k])
        assert yaw(math.cos(enc), math.sin(enc)) - yaw(math.cos(enc - th), math.sin(enc - th)) == pytest.approx(
            t.azimuth_deg[k], abs=1e-9)


# ---------------------------------------------------------------------------------------
# packaged preset tables


def test_packaged_tables_are_the_published_files():
    pairs = {"vlp16": "VLP16db.yaml", "hdl32e": "32db.yaml", "hdl64e_s2": "64e_s2.1-sztaki.yaml",
             "os0_128": OS0.name, "os1_64": OS1.name, "pandar64": "Pandar64.csv", "pandarxt32": "PandarXT32.csv"}
    for preset, name in pairs.items():
        p, f = packaged_table(preset), read_calibration(DATA / name)
        for field in ("elevation_deg", "azimuth_deg", "distance_m", "vert_offset_m", "horiz_offset_m",
                      "beam_origin_m", "ring"):
            if field == "vert_offset_m" and preset in ("vlp16", "hdl32e"):
                continue  # the YAMLs hold zeros; the vendors' figures instead (test below)
            assert getattr(p, field) == getattr(f, field), (preset, field)
        assert name in p.source and "@" in p.source, preset  # repository@commit and path
        assert LaserTable.from_json(p.to_json()) == p


def test_every_real_preset_has_its_units_table_and_a_source():
    sensor = SENSORS["rotating"]
    # the stored enum is the index in PRESETS: the v0.1 presets keep their positions
    assert list(PRESETS)[:5] == ["hdl64e_s2", "hdl32e", "vlp16", "generic", "os0_128"]
    lasers = {"vlp16": 16, "vlp32c": 32, "hdl32e": 32, "hdl64e_s2": 64, "vls128": 128, "os0_128": 128,
              "os1_64": 64, "os1_128": 128, "os2_128": 128, "pandar64": 64, "pandarxt32": 32}
    assert set(PRESETS) - {"generic"} == set(lasers)
    for name, n in lasers.items():
        t = preset_table(name)
        s = sensor.settings(sensor.preset_values(name))
        assert t.lasers == n and s.rotation_direction == "cw" and s.min_range > 0, name
        assert PRESETS[name].source and t.source and t.cycle_s > 0 and len(t.firing_s) == n, name
        assert max(t.firing_s) < t.cycle_s, name
        if t.vendor != "ouster":  # one firing cycle per column at 10 Hz
            assert s.angle_resolution == pytest.approx(t.cycle_s * 3600.0, rel=2e-4), name
    g = preset_table("generic", (-1.0, 2.0))
    assert (g.vendor, g.elevation_deg) == ("generic", (-1.0, 2.0))
    with pytest.raises(SettingsError, match="preset must be one of hdl64e_s2"):
        preset_table("hdl128")


def test_hdl32e_firing_cycle_and_points_per_turn():
    # issue 21, section 1: 46.08 us per firing cycle -> 0.1659 deg at 10 Hz, 69,440 points per turn
    sensor = SENSORS["rotating"]
    s = sensor.settings(sensor.preset_values("hdl32e"))
    t = preset_table("hdl32e")
    assert s.angle_resolution == pytest.approx(0.165888) and int(360.0 / s.angle_resolution) * 32 == 69440
    assert t.cycle_s == pytest.approx(46.08e-6)
    np.testing.assert_allclose(t.firing_s, np.arange(32) * 1.152e-6, atol=1e-12)  # the manual's, one by one


def test_firing_tables_of_the_drivers():
    # velodyne_pointcloud rawdata.cc: VLP-32C fires pairs 2.304 us apart; VLS-128 groups of 8,
    # 2.665 us apart, one idle group after laser 63; Hesai: the drivers' offset tables
    np.testing.assert_allclose(preset_table("vlp32c").firing_s, (np.arange(32) // 2) * 2.304e-6, atol=1e-12)
    k = np.arange(128)
    np.testing.assert_allclose(preset_table("vls128").firing_s, (k // 8 + k // 64) * 2.665e-6, atol=1e-12)
    p64 = preset_table("pandar64")
    # tier4/nebula pandar_64.hpp firing_time_offset_ns (before the block's azimuth), channels 0, 7, 11
    nebula_ns = {0: -23180, 7: -46796, 11: -54668}
    for ch, ns in nebula_ns.items():
        assert p64.firing_s[ch] == pytest.approx(p64.extra["block_azimuth_at_s"] + ns * 1e-9, abs=1e-9)
    np.testing.assert_allclose(preset_table("pandarxt32").firing_s, (0.368 + 1.512 * np.arange(32)) * 1e-6,
                               atol=1e-12)


def test_ouster_presets_carry_the_linear_return_model_of_their_datasheets():
    # the radiometric model by default (tests/test_radiometry.py); return_model=linear takes these values
    sensor = SENSORS["rotating"]
    for name, (rng, ref) in {"os0_128": (50.0, 0.8), "os1_64": (120.0, 0.8), "os1_128": (120.0, 0.8),
                             "os2_128": (240.0, 0.8)}.items():
        s = sensor.settings(sensor.preset_values(name))
        assert (s.return_model, s.max_range, s.ref_max, s.min_range) == ("radiometric", rng, ref, 0.3), name
        assert s.ref_slope * s.max_range == pytest.approx(s.ref_max)  # the limit model agrees (without cos)
        assert s.angle_resolution == 360.0 / 1024 and preset_table(name).extra["lidar_mode"] == "1024x10"


# ---------------------------------------------------------------------------------------
# bad files: one line naming the field


def _sztaki_text(first_vert=None):
    """The HDL-64E S2 file, the first listed laser's vert_correction replaced by ``first_vert``."""
    text = SZTAKI.read_text()
    return text if first_vert is None else re.sub(r"vert_correction: \S+", f"vert_correction: {first_vert}",
                                                  text, count=1)


def _json_with(path: Path, section: str | None, key: str, value) -> str:
    doc = json.loads(path.read_text())
    (doc[section] if section else doc)[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize("fmt,text,needle", [
    ("yaml", "lasers: [", "calibration must be a Velodyne calibration in YAML"),
    ("yaml", "num_lasers: 2\n", "calibration.lasers must be a list of per-laser mappings"),
    ("yaml", _sztaki_text().replace("laser_id: 1\n", "laser_id: 0\n", 1),
     "calibration.lasers[1].laser_id must be a laser id no other laser has, got 0"),
    ("yaml", _sztaki_text().replace("laser_id: 5\n", "laser_id: 64\n", 1),
     "calibration.lasers[5].laser_id must be an integer in [0, 63], got 64"),
    ("yaml", _sztaki_text("up"),
     "calibration.lasers[0].vert_correction must be an angle in radians, got 'up'"),
    ("yaml", _sztaki_text("2.5"),
     "calibration.lasers[0].vert_correction must be in [-pi/2, pi/2] rad, got 2.5"),
    ("yaml", _sztaki_text().replace("num_lasers: 64", "num_lasers: 32"),
     "calibration.num_lasers must be the number of lasers listed (64), got 32"),
    ("yaml", _sztaki_text().replace("distance_resolution: 0.002", "distance_resolution: 0"),
     "calibration.distance_resolution must be in (0, 1] m, got 0.0"),
    ("xml", "<DB><points_>", "calibration must be a Velodyne db.xml"),
    ("xml", "<boost_serialization><DB/></boost_serialization>", "calibration.points_ must be a DB/points_ list"),
    ("xml", (DATA / "32db.xml").read_text().replace("<vertCorrection_>-30.67</vertCorrection_>",
                                                   "<vertCorrection_>low</vertCorrection_>", 1),
     "calibration.points_[0].vertCorrection_ must be a number, got 'low'"),
    ("xml", (DATA / "32db.xml").read_text().replace("<item>1</item>\n\t\t<item>1</item>",
                                                   "<item>0</item>\n\t\t<item>1</item>", 1),
     "calibration.enabled_ must be enabled lasers numbered 0..L-1"),
    ("json", "{not json", "calibration must be an Ouster metadata file (JSON)"),
    ("json", "{}", "calibration.beam_altitude_angles must be a list of beam elevations"),
    ("json", OS0.read_text().replace('"lidar_mode": "1024x10"', '"lidar_mode": "fast"'),
     "calibration.lidar_mode must be columns x rate, e.g. 1024x10, got 'fast'"),
    ("json", _json_with(OS0, None, "beam_azimuth_angles", [1.0] * 129),
     "calibration.beam_azimuth_angles must be 128 numbers (one per beam), got 129"),
    ("json", _json_with(OS1, "lidar_data_format", "pixel_shift_by_row", [0] * 65),
     "calibration.lidar_data_format.pixel_shift_by_row must be 64 numbers (one per beam), got 65"),
    ("json", OS1.read_text().replace('"columns_per_frame": 1024', '"columns_per_frame": 2048', 1),
     "calibration.lidar_data_format.columns_per_frame must be the lidar mode's columns (1024x10), got 2048"),
    ("csv", "Laser,Pitch\n1,2\n", "calibration.header must be Channel,Elevation,Azimuth"),
    ("csv", (DATA / "Pandar64.csv").read_text().replace("\n2,", "\n3,", 1),
     "calibration.row[2].channel must be channel 2 (channels in order), got 3"),
])
def test_bad_files_name_the_field(tmp_path, fmt, text, needle):
    path = tmp_path / f"bad.{fmt}"
    path.write_text(text)
    with pytest.raises(SettingsError) as ei:
        read_calibration(path)
    assert str(ei.value).startswith(needle), str(ei.value)
    assert "\n" not in str(ei.value)


def test_bad_paths_name_the_calibration(tmp_path):
    for path, needle in [(tmp_path / "missing.yaml", "calibration must be an existing calibration file"),
                         (tmp_path, "calibration must be an existing calibration file (a regular file)"),
                         (DATA / "README.md", "calibration must be a Velodyne ROS calibration (.yaml)")]:
        with pytest.raises(SettingsError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            read_calibration(path)
    (tmp_path / "latin1.csv").write_bytes(b"Channel,Elevation,Azimuth\n1,\xe9,0\n")
    with pytest.raises(SettingsError, match="calibration must be a text file in UTF-8"):
        read_calibration(tmp_path / "latin1.csv")
    zeros = json.loads(OS0.read_text())
    zeros["beam_altitude_angles"] = [0.0] * 128  # (ouster-sdk's malformed/complete_but_all_zeros)
    with pytest.raises(SettingsError, match="not all equal"):
        parse_ouster_json(json.dumps(zeros))
    assert parse_velodyne_yaml((DATA / "VLP16db.yaml").read_text()).elevation_deg[:2] == (-15.0, 1.0)
    assert parse_velodyne_xml((DATA / "32db.xml").read_text()).lasers == 32
    assert parse_hesai_csv((DATA / "PandarXT32.csv").read_text()).lasers == 32


# ---------------------------------------------------------------------------------------
# blensor calib import, the Python API and the panel (real bpy)


def test_calib_import_stores_the_table_in_the_blend_atomically(tmp_path):
    scene = tmp_path / "crossing.blend"
    scene.write_bytes(CROSSING.read_bytes())
    res = run("calib", "import", OS0, "--camera", "Velodyne", scene)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (f"blensor: calibration OS0-128 (128 lasers, ouster) from {OS0.name} stored in "
                                  f"camera 'Velodyne' of {scene}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crossing.blend"]  # no temporary file left
    assert scene.read_bytes()[:4] == CROSSING.read_bytes()[:4]  # saved compressed as it was (zstd)
    info = run("info", scene, "--json")
    assert info.returncode == 0, info.stderr
    cam = next(c for c in json.loads(info.stdout)["cameras"] if c["name"] == "Velodyne")
    assert LaserTable.from_json(cam["settings"]["calibration"]) == read_calibration(OS0)
    # the rest of the camera's settings are those of the original file
    before = next(c for c in json.loads(run("info", CROSSING, "--json").stdout)["cameras"]
                  if c["name"] == "Velodyne")
    # ("elevations" is the resolved table's: the imported one's; the file's lidar mode 1024x10 sets the
    # grid, and the full turn becomes Ouster's -180..180 deg)
    grid = {"angle_resolution": 360 / 1024, "rotation_speed": 10.0, "start_angle": -180.0, "end_angle": 180.0}
    changed = ("calibration", "elevations", *grid)
    assert {k: v for k, v in cam["settings"].items() if k not in changed} == \
        {k: v for k, v in before["settings"].items() if k not in changed}
    assert {k: cam["settings"][k] for k in grid} == grid
    assert before["settings"]["angle_resolution"] == pytest.approx(0.1728)
    assert cam["settings"]["elevations"] == list(read_calibration(OS0).elevation_deg)
    # the text listing names the table in one line, not its 6 kB of JSON
    text = run("info", scene).stdout
    assert f"  calibration: imported: OS0-128 (128 lasers, ouster) from {OS0.name}\n" in text
    assert len(text) < 4000


@pytest.mark.parametrize("args,needle", [
    (["calib", "import", SZTAKI.with_name("nope.yaml"), "SCENE"], "blensor: error: calibration must be an existing"),
    (["calib", "import", DATA / "README.md", "SCENE"], "blensor: error: calibration must be a Velodyne ROS"),
    (["calib", "import", DATA / "32db.xml", "--camera", "Nobody", "SCENE"],
     "blensor: error: --camera must be one of the scene's cameras: Velodyne, got 'Nobody'"),
    (["calib", "import", DATA / "32db.xml", "missing.blend"], "blensor: error: SCENE.blend must be"),
    (["calib"], "blensor: error: the following arguments are required: import"),
])
def test_calib_import_bad_input_exits_2_and_leaves_the_blend(tmp_path, args, needle):
    scene = tmp_path / "crossing.blend"
    scene.write_bytes(CROSSING.read_bytes())
    os.utime(scene, (1_000_000_000, 1_000_000_000))
    res = run(*[scene if a == "SCENE" else tmp_path / a if a == "missing.blend" else a for a in args])
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().startswith(needle) and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert scene.read_bytes() == CROSSING.read_bytes() and scene.stat().st_mtime == 1_000_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crossing.blend"]


def test_bad_calibration_file_exits_2_naming_the_field(tmp_path):
    scene = tmp_path / "crossing.blend"
    scene.write_bytes(CROSSING.read_bytes())
    bad = tmp_path / "bad.yaml"
    bad.write_text(SZTAKI.read_text().replace("laser_id: 1\n", "laser_id: 0\n", 1))
    res = run("calib", "import", bad, scene)
    assert res.returncode == 2 and res.stderr.strip() == (
        "blensor: error: calibration.lasers[1].laser_id must be a laser id no other laser has, got 0")
    assert scene.read_bytes() == CROSSING.read_bytes()


def test_python_api_and_panel_import_and_clear(crossing, bpy_mod, tmp_path):
    import blensor_addon
    from blensor_addon.scene.scanner import read_sensor
    from blensor_addon.ui.panel import calibration_label
    cam = bpy_mod.data.objects["Velodyne"]
    t = blensor_addon.import_calibration(cam, DATA / "VLP16db.yaml")
    assert t == read_calibration(DATA / "VLP16db.yaml") and cam.data.blensor.calibration == t.to_json()
    _sensor, s = read_sensor(cam)
    assert LaserTable.from_json(s.calibration) == t
    assert calibration_label(cam.data.blensor.calibration) == \
        "Laser table: Velodyne 16-laser calibration (16 lasers, velodyne) from VLP16db.yaml"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SettingsError, match="calibration.beam_altitude_angles"):
        blensor_addon.import_calibration(cam, bad)
    assert cam.data.blensor.calibration == t.to_json()  # a bad file changes nothing
    blensor_addon.clear_calibration(cam)
    assert cam.data.blensor.calibration == "" and calibration_label("") == "Laser table: the preset's"
    # the panel's operator, on the scene camera
    bpy_mod.context.view_layer.objects.active = cam
    assert bpy_mod.ops.blensor.import_calibration(filepath=str(OS0)) == {"FINISHED"}
    assert LaserTable.from_json(cam.data.blensor.calibration).model == "OS0-128"
    with pytest.raises(RuntimeError, match="calibration.beam_altitude_angles must be"):
        bpy_mod.ops.blensor.import_calibration(filepath=str(bad))
    assert bpy_mod.ops.blensor.clear_calibration() == {"FINISHED"} and cam.data.blensor.calibration == ""
    with pytest.raises(SettingsError, match="camera must be a camera object"):
        blensor_addon.import_calibration(bpy_mod.data.objects.get("Ground") or object(), OS0)


def test_sensors_command_prints_every_presets_source():
    res = run("sensors")
    assert res.returncode == 0, res.stderr
    for name, p in PRESETS.items():  # as a reader finds them: "seed 000" is the BlenSor paper
        assert f"  preset {name} ({p.label}): {cite(p.source)}" in res.stdout, name
    assert "seed 00" not in res.stdout and "Gschwandtner et al. 2011" in res.stdout


# ---------------------------------------------------------------------------------------
# per-laser vertical beam-origin offsets the vendors publish

#: VLP-16 User Manual 63-9243 Rev D, Table 9-1, "Vertical Correction (mm)" of the VLP-16, lasers 0-15
VLP16_VERT_MM = (11.2, -0.7, 9.7, -2.2, 8.1, -3.7, 6.6, -5.1, 5.1, -6.6, 3.7, -8.1, 2.2, -9.7, 0.7, -11.2)
#: Velodyne's HDL-32E envelope drawing 86-0106 Rev B, page 2, lasers 0-31 (as velodyne_decoder
#: src/calib_db.cpp lists them)
HDL32E_VERT_MM = (17.17, 4.76, 16.27, 4.07, 15.4, 3.38, 14.54, 2.7, 13.71, 2.02, 12.89, 1.35, 12.09, 0.67,
                  11.31, 0.0, 10.54, -0.67, 9.78, -1.35, 9.04, -2.02, 8.3, -2.7, 7.58, -3.38, 6.86, -4.07,
                  6.15, -4.76, 5.45, -5.45)


def test_vlp16_and_hdl32e_tables_hold_the_vendors_vertical_offsets():
    for preset, mm in (("vlp16", VLP16_VERT_MM), ("hdl32e", HDL32E_VERT_MM)):
        t = packaged_table(preset)
        np.testing.assert_allclose(t.vert_offset_m, np.asarray(mm) / 1000.0, rtol=0, atol=1e-12,
                                   err_msg=preset)
        assert t.horiz_offset_m == () and "vert_offset_m" in t.source, preset
    # the beams cross in front of the axis: an offset up for a beam pointing down (the manual's
    # sign), about 41.9 mm x tan(-elevation) on the VLP-16
    t = packaged_table("vlp16")
    np.testing.assert_allclose(t.vert_offset_m, 0.04191 * np.tan(-np.radians(t.elevation_deg)), atol=6e-5)
    # the VLP-32C's offsets are published nowhere we found: none (docs/physics.md says so)
    assert packaged_table("vlp32c").vert_offset_m == ()


def test_a_vlp16_beam_leaves_from_its_vertical_offset(bpy_mod, empty_scene):
    # a wall 10 m ahead (REP-103 x = 10): laser 0 (-15 deg, 11.2 mm up) meets it where the
    # manual and velodyne-decoder put the point: the beam leaves from vo up the spin axis
    import blensor_addon
    from conftest import add_camera, add_mesh
    add_mesh(bpy_mod, "Wall", [(-50, 10, -50), (50, 10, -50), (50, 10, 50), (-50, 10, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=(math.pi / 2, 0.0, 0.0))  # looking along world +Y, sensor +Y up
    cam.data.blensor.preset = "vlp16"
    r = blensor_addon.scan(cam, axes="ros", noise_sigma=0.0, bias_distribution="gaussian", bias_sigma=0.0,
                           time_model="frame", start_angle=-1.0, end_angle=1.0)
    v, vo = math.radians(-15.0), 0.0112
    xyz = r.xyz[r.channel == 0].astype(np.float64)
    np.testing.assert_allclose(xyz[:, 0], 10.0, atol=1e-4)
    x, y, z = xyz[np.argmin(np.abs(xyz[:, 1]))]  # the column straight ahead (|yaw| < 0.1 deg)
    assert abs(y) < 0.02 and z == pytest.approx(vo + 10.0 * math.tan(v), abs=1e-4)  # 11.2 mm above 10 tan(v)
    rng = r.range[r.channel == 0][np.argmin(np.abs(xyz[:, 1]))]
    assert rng == pytest.approx(10.0 / math.cos(v), abs=1e-4)  # the path from that origin


def test_cameras_stored_before_version_3_keep_vlp16_beams_without_offsets(bpy_mod, tmp_path):
    import blensor_addon
    from blensor_addon.ui.props import SETTINGS_VERSION
    from conftest import add_camera, add_mesh
    assert SETTINGS_VERSION == 4
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    add_mesh(bpy_mod, "Wall", [(-50, 10, -50), (50, 10, -50), (50, 10, 50), (-50, 10, 50)], [(0, 1, 2, 3)])
    for name, version in (("Old", 2), ("New", None)):
        cam = add_camera(bpy_mod, name, rotation=(math.pi / 2, 0.0, 0.0))
        cam.data.blensor.preset = "vlp16"  # (the preset now stores vertical_offsets; it stored none then)
        if version is not None:
            cam.data.blensor.property_unset("vertical_offsets")
            cam.data.blensor.settings_version = version
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "v2.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "v2.blend"))
    objects = bpy_mod.data.objects
    assert (objects["Old"].data.blensor.vertical_offsets, objects["New"].data.blensor.vertical_offsets) == \
        (False, True)
    z = {}
    for name in ("Old", "New"):
        r = blensor_addon.scan(objects[name], axes="ros", noise_sigma=0.0, bias_distribution="gaussian",
                               bias_sigma=0.0, time_model="frame", start_angle=-1.0, end_angle=1.0)
        xyz = r.xyz[r.channel == 0].astype(np.float64)
        z[name] = xyz[np.argmin(np.abs(xyz[:, 1])), 2]
    v = math.radians(-15.0)
    assert z["Old"] == pytest.approx(10.0 * math.tan(v), abs=1e-4)  # the beams it scanned with
    assert z["New"] == pytest.approx(0.0112 + 10.0 * math.tan(v), abs=1e-4)
