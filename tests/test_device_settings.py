"""Device settings of the rotating, line and Kinect sensors: what a preset, an imported
calibration or a file saved by an older version gives.

- ``Device.columns`` is the grid cast; an Ouster table takes only Ouster's lidar modes;
- importing a unit's calibration keeps its preset's model and firing times, and an Ouster
  file's lidar mode sets the camera's grid;
- line and Kinect groups stored before settings version 2 keep their 2011 behaviour;
- line and Kinect refuse ``min_range`` at or beyond their farthest range;
- one declaration of ``min_range``, the spin directions and the laser limit; the laser
  table's one-line summary; Velodyne presets sweep the full turn.
"""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import SENSORS
from blensor_addon.core.sensors.calibration import MAX_LASERS, TABLES_DIR, LaserTable, packaged_table
from blensor_addon.core.sensors.raypattern import ROTATION_DIRECTIONS
from blensor_addon.core.sensors.physics import min_range_setting
from blensor_addon.core.sensors.rotating_presets import OUSTER_LIDAR_MODES
from blensor_addon.core.sensors.sensor import Sensor
from conftest import CROSSING, add_camera, add_mesh

DATA = Path(__file__).resolve().parent / "data" / "calib"
BLENSOR = str(Path(sys.executable).parent / "blensor")
VLP16 = DATA / "VLP16db.yaml"
OS0 = DATA / "OS-0-128-U1_v2.3.0_1024x10.json"
ROT = SENSORS["rotating"]
MODES = "512x10, 512x20, 1024x10, 1024x20, 2048x10, 4096x5"
UP = (math.pi / 2, 0.0, 0.0)  # camera rotation: sensor +Y = world +Z, looking along world +Y


def run(*args):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True)


def lidar(preset, **values):
    """Validated rotating settings with the preset's values, then ``values``."""
    return ROT.settings({**ROT.preset_values(preset), **values})


# ---------------------------------------------------------------------------------------
# the grid cast, Ouster's lidar modes


def test_ouster_tables_take_only_ousters_lidar_modes():
    # issue 21 review, finding 1: an Ouster table took any step and rate, a grid the firmware
    # never sends (the pcap writer refused it only when asked for packets)
    assert [f"{w}x{hz}" for w, hz in OUSTER_LIDAR_MODES] == MODES.split(", ")
    for w, hz in OUSTER_LIDAR_MODES:  # each mode, also through the float32 a .blend stores
        s = lidar("os1_64", angle_resolution=float(np.float32(360.0 / w)), rotation_speed=hz)
        assert ROT.capabilities(s).device.columns == w
    with pytest.raises(SettingsError) as e:
        lidar("os0_128", angle_resolution=0.2)
    assert str(e.value) == ("angle_resolution must be 360 deg / the columns of an Ouster lidar mode "
                            "(0.703125, 0.3515625, 0.17578125, 0.087890625 deg; modes, columns x Hz: "
                            f"{MODES}), got 0.2")
    with pytest.raises(SettingsError) as e:
        lidar("os2_128", angle_resolution=360 / 2048, rotation_speed=20.0)  # 2048x20: no such mode
    assert str(e.value) == ("rotation_speed must be 10 Hz with 2048 columns (Ouster lidar modes, columns "
                            f"x Hz: {MODES}), got 20.0")
    with pytest.raises(SettingsError, match=r"^rotation_speed must be 10 or 20 Hz with 1024 columns"):
        lidar("os1_128", rotation_speed=15.0)
    # an imported Ouster table on any preset is held to the modes too
    t = LaserTable(vendor="ouster", model="OS1-64", elevation_deg=(1.0, -1.0))
    with pytest.raises(SettingsError, match=r"^angle_resolution must be 360 deg / the columns"):
        lidar("hdl64e_s2", calibration=t.to_json())
    s = lidar("hdl64e_s2", calibration=t.to_json(), angle_resolution=360 / 512)
    assert s.angle_resolution == 0.703125
    # Velodyne and Hesai: the user may change the step (the grid cast follows it)
    assert ROT.capabilities(lidar("vlp16", angle_resolution=0.1)).device.columns == pytest.approx(3600.0)
    s = lidar("pandar64", angle_resolution=0.4, rotation_speed=20.0)
    assert ROT.capabilities(s).device.columns == 900.0


# ---------------------------------------------------------------------------------------
# importing a unit's own calibration


def vlp16_scene(bpy, tmp_path) -> Path:
    """A copy of the demo scene whose camera 'Velodyne' is a VLP-16 (the preset's values)."""
    bpy.ops.wm.open_mainfile(filepath=str(CROSSING))
    bpy.data.objects["Velodyne"].data.blensor.preset = "vlp16"
    path = tmp_path / "vlp16.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path), copy=True)
    return path


def test_importing_a_vlp16_yaml_keeps_the_presets_model_and_firing_and_writes_pcap(bpy_mod, tmp_path):
    # issue 21 review, finding 2: the stored table was the YAML's alone, model "Velodyne
    # 16-laser calibration" and no firing times: the pcap writer refused the camera, and the
    # continuous-time model fired every laser at once
    scene = vlp16_scene(bpy_mod, tmp_path)
    res = run("calib", "import", VLP16, "--camera", "Velodyne", scene)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ("blensor: calibration VLP-16 (16 lasers, velodyne) from VLP16db.yaml "
                                  f"stored in camera 'Velodyne' of {scene}")
    info = run("info", scene, "--json")
    assert info.returncode == 0, info.stderr
    cam = next(c for c in json.loads(info.stdout)["cameras"] if c["name"] == "Velodyne")
    t = LaserTable.from_json(cam["settings"]["calibration"])
    preset = packaged_table("vlp16")  # the same file, with the VLP-16 manual's firing times
    assert (t.model, t.source, t.cycle_s) == ("VLP-16", "VLP16db.yaml", 55.296e-6)
    assert t.firing_s == preset.firing_s and t.firing_s[1] == pytest.approx(2.304e-6)
    # the unit's file rules where it has a value: its offsets are zeros, not the manual's (preset's)
    assert t == dataclasses.replace(preset, source="VLP16db.yaml", vert_offset_m=()) and t.vert_offset_m == ()
    out = tmp_path / "out"
    res = run("scan", scene, "--camera", "Velodyne", "--frames", "1", "--formats", "npz,pcap", "--out", out,
              "--quiet")
    assert res.returncode == 0, res.stderr
    pcap = out / "scan.pcap"
    assert pcap.is_file() and pcap.stat().st_size > 1206  # at least one 1206-byte VLP-16 data packet
    assert (out / "scan.yaml").is_file() and any(out.glob("*.npz"))
    import test_pcap  # velodyne-decoder reads the packets back to the npz's returns, where it is installed
    if test_pcap.DECODERS.exists():
        from blensor_addon.core.capabilities import Device
        parts = []
        for f in sorted(out.glob("scan*.npz")):
            with np.load(f) as z:
                first = z["return_number"] == 1 if "return_number" in z.files else slice(None)
                keys = ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel",
                        "reflectivity")
                # the radiometric model's received power: the packets' byte is its range-compensated value
                parts.append({k: z[k][first] for k in keys + (("signal",) if "signal" in z.files else ())})
        truth = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        dec = test_pcap.decode("velodyne", pcap, out / "scan.yaml", tmp_path / "dec.npz")
        stats = test_pcap.compare_velodyne(Device("velodyne", t.model, t, 10.0), truth, dec)
        print(f"imported VLP-16 on scenes/crossing.blend: {stats}")
        assert stats["points"] > 1000, stats


def test_importing_an_ouster_file_sets_the_grid_of_its_lidar_mode(bpy_mod, crossing, tmp_path):
    # issue 21 review, finding 2: the camera kept its 0.1728 deg step (2083 columns) for a
    # 2048x10 unit, a grid no Ouster sends
    doc = json.loads(OS0.read_text())
    doc["lidar_mode"] = "2048x10"
    doc["data_format"]["columns_per_frame"] = 2048
    doc["data_format"]["column_window"] = [0, 2047]
    path = tmp_path / "os0_2048.json"
    path.write_text(json.dumps(doc))
    cam = bpy_mod.data.objects["Velodyne"]
    p = cam.data.blensor
    assert (p.preset, p.start_angle, p.end_angle) == ("hdl64e_s2", 0.0, 360.0)
    t = blensor_addon.import_calibration(cam, path)
    assert (t.model, t.extra["lidar_mode"], t.lasers) == ("OS0-128", "2048x10", 128)
    assert (p.angle_resolution, p.rotation_speed) == (360 / 2048, 10.0)
    assert (p.start_angle, p.end_angle) == (-180.0, 180.0)  # Ouster's column order, as its presets
    from blensor_addon.scene.scanner import read_sensor
    _sensor, s = read_sensor(cam)
    assert ROT.capabilities(s).device.columns == 2048.0
    # a lidar mode the firmware does not have: refused naming it, the camera unchanged
    before = p.calibration
    doc["lidar_mode"], doc["data_format"]["columns_per_frame"] = "1024x15", 1024
    path.write_text(json.dumps(doc))
    with pytest.raises(SettingsError) as e:
        blensor_addon.import_calibration(cam, path)
    assert str(e.value) == f"calibration.lidar_mode must be an Ouster lidar mode ({MODES}), got '1024x15'"
    assert p.calibration == before and p.angle_resolution == 360 / 2048


def test_a_table_completed_by_another_units_preset_is_left_alone():
    yaml = LaserTable(vendor="velodyne", model="Velodyne 16-laser calibration", source="x.yaml",
                      elevation_deg=tuple(range(16)))
    assert not yaml.names_model and yaml.completed_by(packaged_table("hdl64e_s2")) is yaml  # 64 lasers
    assert yaml.completed_by(packaged_table("pandarxt32")) is yaml  # another vendor
    done = yaml.completed_by(packaged_table("vlp16"))
    assert (done.model, done.cycle_s, done.elevation_deg) == ("VLP-16", 55.296e-6, yaml.elevation_deg)
    named = dataclasses.replace(yaml, model="VLP-16 Hi-Res", firing_s=(1e-6,) * 16, cycle_s=1e-4)
    assert named.names_model and named.completed_by(packaged_table("vlp16")) is named
    assert not LaserTable(vendor="ouster", model="Ouster", elevation_deg=(0.0,)).names_model
    assert not LaserTable(vendor="hesai", model="Hesai 32-channel calibration",
                          elevation_deg=(0.0,) * 32).names_model


# ---------------------------------------------------------------------------------------
# line and Kinect groups stored before settings version 2

LINE_NEW = ("preset", "max_range", "min_range", "range_resolution", "mirror", "sweep_timing",
            "rotation_direction")


def old_camera(bpy, name, location, stored: dict | None = None, kinect_noise=None):
    """A line-scanner camera as a file saved before settings version 2 holds it: version 1,
    the settings version 2 added (and the LUX values it changed) never stored, except
    ``stored`` (name -> value, stored raw so no preset is applied)."""
    cam = add_camera(bpy, name, location=location, rotation=UP)
    p = cam.data.blensor
    p.sensor_type = "line"
    for prop in LINE_NEW:
        p.line.property_unset(prop)
    p.kinect.property_unset("noise_sigma")
    if kinect_noise is not None:
        p.kinect.noise_sigma = kinect_noise
    raw = p.line.bl_system_properties_get(do_create=True) if hasattr(p.line, "bl_system_properties_get") \
        else p.line
    for prop, value in (stored or {}).items():
        raw[prop] = value
    p.settings_version = 1
    return cam


def test_line_and_kinect_groups_saved_before_version_2_keep_their_2011_behaviour(bpy_mod, empty_scene,
                                                                                  tmp_path):
    # issue 21 review, finding 3: a LUX camera saved before version 2 loaded as the new unit
    # (layers +-0.4/1.2 deg, 200 m, 4 cm steps, vertical mirror, cw, mirror timing) and a Kinect
    # with 0.06 px of noise: the same file scanned differently
    # a wall 12 m ahead on the right half of the field, one 150 m ahead behind it (the 2011 LUX: 90 m)
    add_mesh(bpy_mod, "Wall", [(0, 12, -30), (40, 12, -30), (40, 12, 30), (0, 12, 30)], [(0, 1, 2, 3)])
    add_mesh(bpy_mod, "Far", [(-300, 150, -30), (300, 150, -30), (300, 150, 30), (-300, 150, 30)],
             [(0, 1, 2, 3)])
    old_camera(bpy_mod, "Old", (0.0, 0.0, 0.0))
    # stored before version 2: the preset ibeo_lux (index 0, then the 2011 tables), 60 m, the
    # vertical mirror; and a Kinect noise the user set
    old_camera(bpy_mod, "Stored", (0.0, 0.0, 0.0), {"preset": 0, "max_range": 60.0, "mirror": 0},
               kinect_noise=0.1)
    new = add_camera(bpy_mod, "New", rotation=UP)
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "v1.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "v1.blend"))
    objects = bpy_mod.data.objects
    line = objects["Old"].data.blensor.line
    assert (line.preset, line.max_range, line.min_range, line.range_resolution) == \
        ("ibeo_lux_2011", 90.0, 0.0, 0.0)
    assert (line.mirror, line.sweep_timing, line.rotation_direction) == ("inclined", "period", "ccw")
    p = objects["Old"].data.blensor
    assert p.kinect.noise_sigma == 0.0 and p.settings_version == 4
    line = objects["Stored"].data.blensor.line  # its stored values kept: the preset's values not applied
    assert (line.preset, line.max_range, line.mirror, line.sweep_timing) == \
        ("ibeo_lux_2011", 60.0, "vertical", "period")
    assert math.isclose(objects["Stored"].data.blensor.kinect.noise_sigma, 0.1, rel_tol=1e-6)
    new = objects["New"].data.blensor  # stamped at version 2 when saved: the new unit
    assert (new.line.preset, new.line.mirror, new.kinect.noise_sigma) == ("ibeo_lux", "vertical",
                                                                          pytest.approx(0.06))
    # the old camera scans as a camera whose ibeo_lux_2011 preset was chosen in the panel
    new.sensor_type = "line"
    assert blensor_addon.scan(objects["New"], backend="native").range_noisy.max() > 149.0  # the new unit
    new.line.preset = "ibeo_lux_2011"
    old = blensor_addon.scan(objects["Old"], backend="native")
    ref = blensor_addon.scan(objects["New"], backend="native")
    assert len(old) == len(ref) > 4 * 100
    for name in ("xyz_noisy", "range_noisy", "timestamp", "channel", "ray_index"):
        np.testing.assert_array_equal(getattr(old, name), getattr(ref, name), err_msg=name)
    assert old.range_noisy.max() < 20.0  # the near wall (12 m / cos 50 deg = 18.7 m); the far one beyond 90 m


# ---------------------------------------------------------------------------------------
# the line scanner's and the Kinect's minimum range


def test_line_and_kinect_refuse_min_range_at_or_beyond_their_farthest_range():
    # issue 21 review, finding 4: min_range 250 m on a 200 m LUX (every return dropped) was accepted
    with pytest.raises(SettingsError) as e:
        SENSORS["line"].settings({"min_range": 200.0})
    assert str(e.value) == "min_range must be less than max_range (200 m), got 200.0"
    with pytest.raises(SettingsError) as e:
        SENSORS["kinect"].settings({"min_range": 6.5})
    assert str(e.value) == "min_range must be less than max_depth (6 m), got 6.5"
    assert SENSORS["line"].settings({"min_range": 199.0}).min_range == 199.0
    # both use the shared detection (min_range on the measured range), not a copy of it
    for name in ("line", "kinect"):
        assert type(SENSORS[name]).detected is Sensor.detected


# ---------------------------------------------------------------------------------------
# one declaration each; the table's summary


def test_one_declaration_of_min_range_spin_directions_and_the_laser_limit():
    ref = min_range_setting().metadata["blensor"]
    for name, sensor in SENSORS.items():
        f = {f.name: f for f in dataclasses.fields(sensor.Settings)}.get("min_range")
        assert f is not None, name  # every sensor type has a minimum range
        meta = f.metadata["blensor"]
        assert (meta.label, meta.description, meta.unit, meta.lo, meta.hi) == \
            (ref.label, ref.description, ref.unit, ref.lo, ref.hi), name
    for name in ("rotating", "line"):
        f = {f.name: f for f in dataclasses.fields(SENSORS[name].Settings)}["rotation_direction"]
        assert f.metadata["blensor"].choices is ROTATION_DIRECTIONS
    meta = {f.name: f for f in dataclasses.fields(ROT.Settings)}["elevations"].metadata["blensor"]
    assert meta.count == (1, MAX_LASERS) == (1, 1024)
    with pytest.raises(SettingsError, match=r"calibration.elevation_deg must be 1 to 1024 laser elevations"):
        LaserTable(elevation_deg=(0.0,) * (MAX_LASERS + 1))


def test_laser_table_summary_and_no_intensity_scale():
    t = LaserTable(vendor="velodyne", model="VLP-16", source="VLP16db.yaml", elevation_deg=(0.0,) * 16)
    assert t.summary() == "VLP-16 (16 lasers, velodyne) from VLP16db.yaml"
    assert LaserTable(vendor="hesai", elevation_deg=(0.0, 1.0)).summary() == "hesai (2 lasers, hesai)"
    from blensor_addon.ui.panel import calibration_label
    assert calibration_label(t.to_json()) == "Laser table: VLP-16 (16 lasers, velodyne) from VLP16db.yaml"
    # the unused field is gone from the table, its JSON and the packaged tables; a table stored
    # before (with "intensity_scale": 1.0) still loads
    assert "intensity_scale" not in {f.name for f in dataclasses.fields(LaserTable)}
    assert "intensity_scale" not in t.to_json()
    for path in sorted(TABLES_DIR.glob("*.json")):
        assert "intensity_scale" not in json.loads(path.read_text()), path.name
    old = json.loads(t.to_json())
    old["intensity_scale"] = 1.0
    assert LaserTable.from_json(json.dumps(old)) == t


# ---------------------------------------------------------------------------------------
# the Velodyne presets' sector


def test_a_velodyne_preset_after_an_ouster_one_sweeps_the_full_turn(bpy_mod, empty_scene):
    # issue 21 review, finding 6: the Ouster preset's -180..180 deg stayed on a Velodyne chosen after it
    p = add_camera(bpy_mod).data.blensor
    p.preset = "os0_128"
    assert (p.start_angle, p.end_angle) == (-180.0, 180.0)
    for preset in ("vlp16", "hdl64e_s2", "hdl32e", "vlp32c", "vls128"):
        p.preset = "os1_64"
        p.preset = preset
        assert (p.start_angle, p.end_angle) == (0.0, 360.0), preset


# ---------------------------------------------------------------------------------------
# the ToF camera: the SR4000's standard 30 MHz modulation (5 m ambiguity range)


def test_tof_defaults_to_the_sr4000_standard_30_mhz_ambiguity_range_of_5_m(bpy_mod, empty_scene):
    from blensor_addon.core.sensors.tof import PRESETS as TOF_PRESETS
    tof = SENSORS["tof"]
    assert tof.settings({}).ambiguity_range == 5.0
    assert TOF_PRESETS["sr4000"].values["ambiguity_range"] == 5.0
    # a wall 8 m ahead folds to 3 m with the default (it folded to 8 m, inside 10 m, before)
    add_mesh(bpy_mod, "Wall", [(-50, 8, -50), (50, 8, -50), (50, 8, 50), (-50, 8, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=UP)
    cam.data.blensor.sensor_type = "tof"
    assert cam.data.blensor.tof.ambiguity_range == 5.0
    r = blensor_addon.scan(cam, backfolding=True, noise_sigma=0.0)
    assert abs(r.image("range_noisy")[72, 88] - 3.0) < 1e-3


def test_tof_groups_saved_before_version_3_keep_their_10_m_ambiguity_range(bpy_mod, empty_scene, tmp_path):
    from blensor_addon.ui.props import SETTINGS_VERSION
    assert SETTINGS_VERSION == 4
    add_mesh(bpy_mod, "Wall", [(-50, 8, -50), (50, 8, -50), (50, 8, 50), (-50, 8, 50)], [(0, 1, 2, 3)])
    for name, stored in (("Old", None), ("Stored", 7.5), ("New", None)):
        cam = add_camera(bpy_mod, name, rotation=UP)
        p = cam.data.blensor
        p.sensor_type = "tof"
        p.tof.backfolding = True
        p.tof.noise_sigma = 0.0
        if stored is not None:
            p.tof.ambiguity_range = stored
        if name != "New":  # as a file saved at version 2 holds it
            p.settings_version = 2
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "v2.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "v2.blend"))
    objects = bpy_mod.data.objects
    got = {n: (objects[n].data.blensor.tof.ambiguity_range, objects[n].data.blensor.settings_version)
           for n in ("Old", "Stored", "New")}
    assert got == {"Old": (10.0, 4), "Stored": (7.5, 4), "New": (5.0, 4)}
    folded = {n: float(blensor_addon.scan(objects[n]).image("range_noisy")[72, 88]) for n in got}
    assert folded == {"Old": pytest.approx(8.0, abs=1e-3), "Stored": pytest.approx(0.5, abs=1e-3),
                      "New": pytest.approx(3.0, abs=1e-3)}


# ---------------------------------------------------------------------------------------
# the VLS-128's firing sequence by firmware


def test_vls128_firmware_setting_selects_the_firing_sequence():
    from blensor_addon.core.sensors.rotating import LidarSettings, firing_offsets
    from blensor_addon.core.settings import meta_of
    meta = meta_of(LidarSettings, "vls128_firmware")
    assert meta.choices == ("old", "new") and meta.show_if == ("preset", "vls128")
    k = np.arange(128)
    old = ROT.settings(ROT.preset_values("vls128"))  # the preset: firmware before 5.2.3.0, as before
    assert old.vls128_firmware == "old" and old.table.cycle_s == pytest.approx(53.3e-6, abs=1e-12)
    np.testing.assert_allclose(firing_offsets(old), (k // 8 + k // 64) * 2.665e-6, atol=1e-12)
    new = ROT.settings({**ROT.preset_values("vls128"), "vls128_firmware": "new"})
    assert new.table.cycle_s == pytest.approx(57.8e-6, abs=1e-12)  # 20 firing groups of 2.89 us
    np.testing.assert_allclose(firing_offsets(new), (k // 8 + k // 64) * 2.89e-6, atol=1e-12)
    assert new.table.elevation_deg == old.table.elevation_deg and new.table.model == "VLS-128"
    # the unit's step at 10 Hz: one sequence (1730.1 columns a turn; 1876.2 before 5.2.3.0)
    from blensor_addon.core.sensors.rotating_presets import VLS128_SEQUENCE_S
    assert VLS128_SEQUENCE_S == {"old": 53.3e-6, "new": 57.8e-6}
    assert 360.0 / (VLS128_SEQUENCE_S["new"] * 3600.0) == pytest.approx(1730.1, abs=0.05)
    # another unit's table is not touched by the setting
    assert ROT.settings({**ROT.preset_values("vlp16"), "vls128_firmware": "new"}).table is \
        ROT.settings(ROT.preset_values("vlp16")).table
    with pytest.raises(SettingsError, match=r"vls128_firmware must be one of old, new, got '5.2'"):
        ROT.settings({"vls128_firmware": "5.2"})
