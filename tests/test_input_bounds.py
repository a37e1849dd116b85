"""Hostile input files read by the ``blensor`` command: config files (Project AirSim JSON,
Unity XML), calibration files (Velodyne YAML and db.xml, Ouster JSON), pattern files and
the manifests an output folder holds. Integers too long for a float, nesting deep enough
to crash a recursive parser, a key per line by the hundred thousand: each is one line on
stderr and exit 2, the .blend and the planted files kept byte for byte."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import CROSSING
from test_faults import BLENSOR, one_error_line, run

DATA = Path(__file__).resolve().parent / "data"
DEEP = 100_000
LIDAR = {"id": "l1", "type": "lidar", "lidar-type": "generic_cylindrical", "number-of-channels": 4,
         "points-per-second": 2000}


def scene_copy(tmp_path: Path) -> Path:
    scene = tmp_path / "crossing.blend"
    scene.write_bytes(CROSSING.read_bytes())
    return scene


def airsim(*lidars) -> str:
    return json.dumps({"sensors": list(lidars) or [LIDAR]})


def deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def _at(text: str, pos: int) -> str:
    """``line L column C`` of offset ``pos``."""
    return f"line {text.count(chr(10), 0, pos) + 1} column {pos - text.rfind(chr(10), 0, pos)}"


def _long(text: str) -> str:
    """``line L column C`` of the 400-or-more-digit integer in ``text``."""
    return _at(text, text.index("7" * 400))


def _level(text: str, level: int = 65) -> int:
    """Offset of the first bracket opening nesting level ``level`` (files without
    brackets in their strings)."""
    d = 0
    for i, c in enumerate(text):
        d += (c in "[{") - (c in "]}")
        if d == level:
            return i
    raise AssertionError("not that deep")


def _airsim_cases():
    long400 = airsim(dict(LIDAR, **{"number-of-channels": int("7" * 400)}))
    long5000 = long400.replace("7" * 400, "7" * 5000)
    deep = airsim(dict(LIDAR, extra=json.loads("[[1]]"))).replace("[[1]]", deep_json())
    return [
        ("int400", long400, f"{_long(long400)} must be an integer of at most 64 digits, "
                            "got '777"),
        ("int5000", long5000, f"{_long(long5000)} must be an integer of at most 64 "
                              "digits, got '777"),
        ("deep", deep, f"{_at(deep, _level(deep))} must be JSON nested at most 64 deep, got {DEEP + 3}"),
    ]


@pytest.mark.parametrize("name,text,needle", _airsim_cases(), ids=[c[0] for c in _airsim_cases()])
def test_airsim_long_integers_and_deep_nesting_are_one_line(tmp_path, name, text, needle):
    file = tmp_path / "s.json"
    file.write_text(text)
    scene = scene_copy(tmp_path)
    for args in (["scan", scene, "--sensor", file, "--out", tmp_path / "out"],
                 ["config", "import", "airsim", file, scene]):
        res = run(*args)
        assert res.returncode == 2, res.stderr[-2000:]
        assert one_error_line(res).startswith(f"blensor: error: {file} {needle}")
    assert scene.read_bytes() == CROSSING.read_bytes() and not (tmp_path / "out").exists()


def test_airsim_with_200000_keys_answers(tmp_path):
    keys = ", ".join(f'"k{i}": {i}' for i in range(200_000))
    file = tmp_path / "keys.json"
    file.write_text('{"sensors": [{"id": "l1", "type": "lidar", "lidar-type": "generic_cylindrical", '
                    f'{keys}, "k7": 0}}]}}')
    res = subprocess.run([BLENSOR, "config", "import", "airsim", str(file), str(scene_copy(tmp_path))],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert one_error_line(res) == \
        f"blensor: error: {file} key 'k7' must be given once per object, got 'twice'"


def test_unity_xml_nested_3000_deep_is_one_line(tmp_path):
    file = tmp_path / "u.xml"
    file.write_text('<sensor type="raytracedlidar" name="l"><update_rate>10</update_rate>'
                    + "<a>" * 3000 + "</a>" * 3000 + "</sensor>")
    scene = scene_copy(tmp_path)
    col = len('<sensor type="raytracedlidar" name="l"><update_rate>10</update_rate>') + 63 * 3 + 1
    for args in (["config", "import", "unity", file, scene],
                 ["scan", scene, "--sensor", file, "--out", tmp_path / "out"]):
        res = run(*args)
        assert res.returncode == 2, res.stderr[-2000:]
        assert one_error_line(res) == (f"blensor: error: {file} line 1 column {col} must be XML nested at "
                                       "most 64 elements deep, got 'more than 64 levels'")
    assert scene.read_bytes() == CROSSING.read_bytes()


def _calib_cases():
    vlp = (DATA / "calib" / "VLP16db.yaml").read_text()
    os1 = (DATA / "calib" / "2_1_2_os1-991913000010-64.json").read_text()
    cols = '"columns_per_frame": 1024'
    assert cols in os1
    os_int = os1.replace(cols, '"columns_per_frame": ' + "7" * 400)
    os_int5000 = os1.replace(cols, '"columns_per_frame": ' + "7" * 5000)
    os_deep = os1.replace(cols, '"x": ' + deep_json() + ", " + cols)
    yaml_int = vlp + "num_lasers: " + "7" * 400 + "\n"
    yaml_flow = vlp + "extra: " + deep_json() + "\n"
    yaml_block = vlp + "extra:\n" + "".join("  " * i + "- \n" for i in range(70))
    xml_deep = "<boost_serialization><DB>" + "<a>" * 3000 + "</a>" * 3000 + "</DB></boost_serialization>"
    return [
        ("ouster_int400.json", os_int, f"{_long(os_int)} must be an integer of at most 64 "
                                       "digits, got '777"),
        ("ouster_int5000.json", os_int5000, f"{_long(os_int5000)} must be an integer "
                                            "of at most 64 digits, got '777"),
        ("ouster_deep.json", os_deep, f"{_at(os_deep, _level(os_deep))} must be JSON nested at most 64 deep, "
                                      f"got {DEEP + 2}"),
        ("velodyne_int.yaml", yaml_int, f"{_long(yaml_int)} must be an integer of at "
                                        "most 64 digits, got '777"),
        ("velodyne_flow.yaml", yaml_flow, f"{_at(yaml_flow, yaml_flow.index('[[') + 63)} must be YAML nested "
                                          "at most 64 deep, got 'more than 64 levels'"),
        ("velodyne_block.yaml", yaml_block, "line "),
        ("db_deep.xml", xml_deep, f"line 1 column {len('<boost_serialization><DB>') + 62 * 3 + 1} must be "
                                  "XML nested at most 64 elements deep"),
    ]


@pytest.mark.parametrize("name,text,needle", _calib_cases(), ids=[c[0] for c in _calib_cases()])
def test_hostile_calibration_files_are_one_line(tmp_path, name, text, needle):
    file = tmp_path / name
    file.write_text(text)
    scene = scene_copy(tmp_path)
    res = run("calib", "import", file, scene)
    assert res.returncode == 2, res.stderr[-2000:]
    assert one_error_line(res).startswith(f"blensor: error: {name} {needle}")
    assert scene.read_bytes() == CROSSING.read_bytes()


def test_velodyne_yaml_nested_100000_deep_does_not_crash(tmp_path):
    file = tmp_path / "deep.yaml"
    file.write_text("lasers: " + deep_json() + "\n")
    res = run("calib", "import", file, scene_copy(tmp_path))
    assert res.returncode == 2, res.returncode
    assert one_error_line(res) == (f"blensor: error: deep.yaml line 1 column {len('lasers: ') + 64} must be "
                                   "YAML nested at most 64 deep, got 'more than 64 levels'")


def test_ouster_lidar_mode_with_a_5000_digit_column_count_is_one_line(tmp_path):
    os1 = (DATA / "calib" / "2_1_2_os1-991913000010-64.json").read_text()
    doc = json.loads(os1)
    doc["config_params"]["lidar_mode"] = "7" * 5000 + "x10"
    file = tmp_path / "mode.json"
    file.write_text(json.dumps(doc))
    res = run("calib", "import", file, scene_copy(tmp_path))
    assert res.returncode == 2
    assert one_error_line(res).startswith("blensor: error: calibration.config_params.lidar_mode must be "
                                          "columns x rate, e.g. 1024x10, got '777")


# ---------------------------------------------------------------------------------------
# --sensor files refused once Blender has the scene: no "created" notes before the error


def _sensor_cases(tmp_path: Path):
    def lidar(name, **kw):
        return dict(LIDAR, id=name, **kw)
    mems = ('<sensor type="raytracedlidar" name="m"><update_rate>20</update_rate><movement_technology>MEMS'
            '</movement_technology><ray><scan><pattern><file>{}</file><period>0.1</period></pattern></scan>'
            '<range><max>200</max></range></ray></sensor>')
    return {
        "collide.json": airsim(lidar("a-b"), lidar("a_b")),
        "off_collide.json": airsim(lidar("off", enabled=False), lidar("a-b"), lidar("a_b")),
        "accents.json": airsim(lidar("éé"), lidar("üü")),
        "pose.json": airsim(lidar("p1"), lidar("p2", origin={"xyz": "1e300 0 0"})),
        "mems_missing.xml": mems.format(tmp_path / "nope.csv"),
        "mems_passwd.xml": mems.format("/etc/passwd"),
    }


@pytest.mark.parametrize("name", ["collide.json", "off_collide.json", "accents.json", "pose.json",
                                  "mems_missing.xml", "mems_passwd.xml"])
def test_sensor_files_refused_after_the_scene_loads_print_no_notes_first(tmp_path, name):
    file = tmp_path / name
    file.write_text(_sensor_cases(tmp_path)[name])
    res = run("scan", scene_copy(tmp_path), "--sensor", file, "--out", tmp_path / "out", "--frames", "1")
    assert res.returncode == 2
    assert one_error_line(res).startswith("blensor: error: ")
    assert not (tmp_path / "out").exists()


def test_sensor_file_notes_are_printed_once_the_run_starts(tmp_path):
    file = tmp_path / "ok.json"
    file.write_text(airsim())
    res = run("scan", scene_copy(tmp_path), "--sensor", file, "--out", tmp_path / "out", "--frames", "1",
              "--formats", "npz")
    assert res.returncode == 0, res.stderr
    assert f"blensor: {file}: l1: created (cylindrical, preset generic)" in res.stderr.splitlines()


def test_a_rotation_frequency_a_float32_cannot_hold_is_named_by_the_files_field(tmp_path):
    file = tmp_path / "rot.json"
    file.write_text(airsim(dict(LIDAR, **{"horizontal-rotation-frequency": 1e-300})))
    for args in (["scan", scene_copy(tmp_path), "--sensor", file, "--out", tmp_path / "out"],
                 ["config", "import", "airsim", file, scene_copy(tmp_path)]):
        res = run(*args)
        assert res.returncode == 2
        line = one_error_line(res)
        assert line.startswith(f"blensor: error: {file} sensors[0] (l1) horizontal-rotation-frequency "
                               "must be ")
        assert line.endswith("got 1e-300")


# ---------------------------------------------------------------------------------------
# pattern files


def test_a_pattern_csv_with_a_bom_and_crlf_lines_is_read(tmp_path):
    from blensor_addon.core.sensors import pattern_file
    plain = tmp_path / "plain.csv"
    pattern_file.write_csv(str(plain), [0.0, 10.0], [1.0, -1.0], [0.0, 1e-5], [0, 1])
    text = plain.read_text()
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    a, b = pattern_file.load(str(plain)), pattern_file.load(str(bom))
    for f in ("azimuth_deg", "elevation_deg", "time_s", "channel"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.period == b.period


# ---------------------------------------------------------------------------------------
# manifests planted in --out


@pytest.mark.parametrize("manifest", ["manifest.json", "motion.json", "rig.json"])
def test_a_deeply_nested_manifest_in_out_is_one_line(tmp_path, manifest):
    out = tmp_path / "out"
    out.mkdir()
    planted = '{"blensor_version": "1", "x": ' + deep_json() + "}"
    (out / manifest).write_text(planted)
    scene = scene_copy(tmp_path)
    if manifest == "motion.json":
        args = ["motion", scene, "--out", out, "--frames", "1"]
    elif manifest == "rig.json":
        file = tmp_path / "rig.json"
        file.write_text(airsim(dict(LIDAR, id="r1"), dict(LIDAR, id="r2")))
        args = ["scan", scene, "--sensor", file, "--out", out, "--frames", "1"]
    else:
        args = ["scan", scene, "--out", out, "--frames", "1"]
    res = run(*args)
    assert res.returncode == 2, res.stderr[-2000:]
    assert one_error_line(res) == (f"blensor: error: {out / manifest} {_at(planted, _level(planted))} must "
                                   f"be JSON nested at most 64 deep, got {DEEP + 1}")
    assert (out / manifest).read_text() == planted and sorted(p.name for p in out.iterdir()) == [manifest]


# ---------------------------------------------------------------------------------------
# numbers too long for a float, and text nested deep, stored in a .blend


def test_settings_refuse_integers_beyond_a_float_in_one_settings_error():
    import dataclasses

    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.sensors import SENSORS, make_settings
    for stype in SENSORS:
        for f in dataclasses.fields(make_settings(stype, None, {})[1]):
            meta = f.metadata.get("blensor")
            if meta is None or meta.kind not in ("int", "float"):
                continue
            for v in (10 ** 400, -10 ** 400):
                with pytest.raises(SettingsError, match=f"^{f.name} must be "):
                    make_settings(stype, None, {f.name: v})
            with pytest.raises(SettingsError, match=f"^{f.name} must be "):
                meta.parse(f.name, "7" * 5000)


def test_a_stored_laser_table_nested_deep_or_with_a_huge_integer_is_a_settings_error():
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.sensors.calibration import LaserTable
    with pytest.raises(SettingsError, match="^calibration must be a laser table as JSON"):
        LaserTable.from_json(deep_json())
    with pytest.raises(SettingsError, match="^calibration must be a laser table with numeric per-laser"):
        LaserTable.from_json('{"elevation_deg": [%s]}' % ("7" * 400))


def test_an_extrinsics_json_nested_deep_is_one_settings_error(tmp_path):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.io.extrinsics import read_calib_rig
    path = tmp_path / "extrinsics.json"
    head = '{"sensors": '
    path.write_text(head + deep_json() + "}")
    with pytest.raises(SettingsError) as e:
        read_calib_rig(path)
    assert str(e.value) == \
        f"{path} line 1 column {len(head) + 64} must be JSON nested at most 64 deep, got {DEEP + 1}"


def test_a_config_file_larger_than_the_bound_is_refused_unread(tmp_path):
    from blensor_addon.io import safeload
    file = tmp_path / "big.json"
    with open(file, "wb") as f:
        f.truncate(safeload.MAX_BYTES + 1)  # sparse: nothing written to disk
    res = run("config", "import", "airsim", file, scene_copy(tmp_path))
    assert res.returncode == 2
    assert one_error_line(res) == \
        f"blensor: error: {file} must be a config file of at most 16 MiB, got '{file}'"


def test_a_unity_integer_of_400_digits_is_one_line(tmp_path):
    file = tmp_path / "u.xml"
    file.write_text('<sensor type="raytracedlidar" name="l"><update_rate>10</update_rate><ray><scan>'
                    f"<horizontal><samples>{'7' * 400}</samples><min_angle>-1.57</min_angle>"
                    "<max_angle>1.57</max_angle></horizontal></scan><range><max>15</max></range></ray>"
                    "</sensor>")
    res = run("scan", scene_copy(tmp_path), "--sensor", file, "--out", tmp_path / "out", "--frames", "1")
    assert res.returncode == 2
    assert one_error_line(res).startswith(f"blensor: error: {file} sensor 'l' ray/scan/horizontal/samples "
                                          "must be an integer of at most 64 digits, got '777")
