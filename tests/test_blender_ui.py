"""Add-on registration, settings saved in the .blend, operators (real bpy)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import blensor_addon
from conftest import CROSSING, ROOT, add_camera, point_norm


def test_register_unregister_register(bpy_mod):
    blensor_addon.unregister()
    assert not hasattr(bpy_mod.types.Camera, "blensor")
    assert not hasattr(bpy_mod.types, "BLENSOR_OT_scan")
    blensor_addon.register()
    assert hasattr(bpy_mod.types.Camera, "blensor") and hasattr(bpy_mod.types.Material, "blensor")
    assert hasattr(bpy_mod.types, "BLENSOR_OT_scan") and hasattr(bpy_mod.types, "BLENSOR_PT_sensor")
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    cam = bpy_mod.data.cameras.new("c")
    assert cam.blensor.preset == "hdl64e_s2" and cam.blensor.angle_resolution == pytest.approx(0.1728)


def test_settings_survive_save_and_reload_in_fresh_process(bpy_mod, empty_scene, tmp_path):
    cam = bpy_mod.data.cameras.new("Lidar")
    obj = bpy_mod.data.objects.new("Lidar", cam)
    empty_scene.collection.objects.link(obj)
    s = cam.blensor
    s.preset = "vlp16"   # applies the VLP-16 defaults
    # issue 21, section 2: one 55.296 us firing sequence at 10 Hz (was the datasheet's rounded 0.2 deg)
    assert s.angle_resolution == pytest.approx(0.1990656) and s.max_range == pytest.approx(100.0)
    s.noise_sigma = 0.02
    s.seed = 42
    s.bias_distribution = "laplace"
    s.end_angle = 180.0
    mat = bpy_mod.data.materials.new("Glassy")
    mat.blensor.mirror = True
    mat.blensor.reflectivity = 0.25
    mat.use_fake_user = True
    path = tmp_path / "saved.blend"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(path))
    code = textwrap.dedent(f"""
        import json, bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(path)!r})
        s = bpy.data.cameras["Lidar"].blensor
        m = bpy.data.materials["Glassy"].blensor
        print(json.dumps([s.preset, s.angle_resolution, s.noise_sigma, s.seed, s.bias_distribution,
                          s.end_angle, m.mirror, m.reflectivity]))
        blensor_addon.unregister()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got[0] == "vlp16" and got[1] == pytest.approx(0.1990656) and got[2] == pytest.approx(0.02)
    assert got[3:6] == [42, "laplace", 180.0] and got[6] is True and got[7] == pytest.approx(0.25)


def test_scan_operator_makes_point_meshes_and_leaves_scene_unchanged(bpy_mod, crossing):
    before = {o.name: (tuple(o.matrix_world.translation), len(o.data.vertices) if o.type == "MESH" else 0)
              for o in bpy_mod.data.objects}
    cam = bpy_mod.data.objects["Velodyne"]
    cam.data.blensor.add_noisy_scan_mesh = True
    assert bpy_mod.ops.blensor.scan() == {"FINISHED"}
    scan, noisy = bpy_mod.data.objects["Scan.1"], bpy_mod.data.objects["NoisyScan.1"]
    n = len(scan.data.vertices)
    assert n > 100000 and len(noisy.data.vertices) == n
    attrs = scan.data.attributes
    for name in ("timestamp", "range", "range_noisy", "object_id", "channel", "intensity", "normal", "color"):
        assert name in attrs
    rng = np.empty(n, np.float32)
    attrs["range"].data.foreach_get("value", rng)
    co = np.empty(n * 3, np.float32)
    scan.data.vertices.foreach_get("co", co)
    ch = np.empty(n, np.int32)
    attrs["channel"].data.foreach_get("value", ch)
    np.testing.assert_allclose(np.linalg.norm(co.reshape(-1, 3), axis=1), point_norm(rng, ch), rtol=1e-5)
    # placed at the sensor, in the camera's axes (the demo camera stores REP-103: x ahead =
    # the camera's -Z, y left = its -X, z up = its +Y), so the points sit on the scene
    assert cam.data.blensor.axes == "ros"
    M, C = np.array(scan.matrix_world), np.array(cam.matrix_world)
    np.testing.assert_allclose(M[:3, 3], C[:3, 3], atol=1e-5)
    np.testing.assert_allclose(M[:3, :3], C[:3, :3] @ np.array([[0, -1, 0], [0, 0, 1], [-1, 0, 0]]), atol=1e-5)
    # a second scan coexists; nothing of the user's objects changed
    bpy_mod.context.scene.frame_set(5)
    bpy_mod.ops.blensor.scan()
    assert "Scan.5" in bpy_mod.data.objects and "Scan.1" in bpy_mod.data.objects
    bpy_mod.context.scene.frame_set(1)
    for name, state in before.items():
        o = bpy_mod.data.objects[name]
        assert (tuple(o.matrix_world.translation), len(o.data.vertices) if o.type == "MESH" else 0) == state
    assert bpy_mod.ops.blensor.delete_scans() == {"FINISHED"}
    assert not [o for o in bpy_mod.data.objects if o.name.startswith(("Scan.", "NoisyScan."))]


def test_scan_range_operator_runs_synchronously_in_background(bpy_mod, crossing, tmp_path):
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 3, 5
    s = bpy_mod.data.objects["Velodyne"].data.blensor
    s.output_dir = str(tmp_path)
    s.formats = {"npz", "evd"}
    s.packets = "frame"  # EVD holds one output per scene frame: so do the other formats
    assert bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT") == {"FINISHED"}
    tmp_path = tmp_path / "scan"  # the panel's range scan writes into its own subfolder
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["manifest.json", "scan.evd", "scan00003.npz", "scan00004.npz", "scan00005.npz", "trajectory.tum"]
    # a second run into the same folder is refused (no mixing of runs)
    with pytest.raises(RuntimeError, match="use --overwrite, or Overwrite in the panel"):
        bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT")
    s.overwrite = True
    s.frame_of_reference = "world"
    assert bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT") == {"FINISHED"}
    assert json.loads((tmp_path / "manifest.json").read_text())["frame_of_reference"] == "world"
    # every format unticked: refused, nothing written
    s.output_dir = str(tmp_path / "none")
    s.formats = set()
    with pytest.raises(RuntimeError, match="formats must be at least one format ticked"):
        bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT")
    assert not (tmp_path / "none").exists()
    # every writer's options are camera properties made from the registry, and reach the run
    from blensor_addon.io.formats import WRITERS
    props = {f"{name}_{f.name}" for name, w in WRITERS.items() for f in dataclasses.fields(w.Options)}
    assert props >= {"pcd_ascii", "kitti_points", "rosbag2_storage"} and all(hasattr(s, p) for p in props)
    s.output_dir = str(tmp_path / "opts")
    s.formats = {"kitti", "rosbag2"}
    s.kitti_points, s.rosbag2_storage = "clean", "sqlite3"
    assert bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT") == {"FINISHED"}
    man = json.loads((tmp_path / "opts" / "scan" / "manifest.json").read_text())
    assert man["options"]["kitti"]["points"] == "clean"
    assert man["options"]["rosbag2"]["storage"] == "sqlite3"
    assert (tmp_path / "opts" / "scan" / "rosbag2" / "rosbag2.db3").is_file()


def test_operator_errors_reach_the_user(bpy_mod, crossing):
    bpy_mod.data.objects["Velodyne"].data.blensor.max_range = 0.0
    with pytest.raises(RuntimeError, match=r"max_range must be in \(0, 100000\] m"):
        bpy_mod.ops.blensor.scan()


def test_demo_scene_matches_its_build_script(tmp_path):
    # scenes/crossing.blend is what scenes/build_crossing.py makes (same objects, same motion)
    code = textwrap.dedent("""
        import sys, json, bpy
        sys.path.insert(0, sys.argv[1])
        import build_crossing
        build_crossing.build(__import__('pathlib').Path(sys.argv[2]))
    """)
    subprocess.run([sys.executable, "-c", code, str(CROSSING.parent), str(tmp_path / "c.blend")],
                   check=True, capture_output=True)
    summary = textwrap.dedent("""
        import sys, json, bpy
        out = {}
        for path in sys.argv[1:]:
            bpy.ops.wm.open_mainfile(filepath=path)
            sc = bpy.context.scene
            objs = {}
            for f in (1, 24, 48):
                sc.frame_set(f)
                for o in sc.objects:
                    objs.setdefault(o.name, []).append([round(v, 5) for v in o.matrix_world.translation])
            out[path] = objs
        a, b = out.values()
        print(json.dumps(a == b))
    """)
    res = subprocess.run([sys.executable, "-c", summary, str(CROSSING), str(tmp_path / "c.blend")],
                         check=True, capture_output=True, text=True)
    assert res.stdout.strip().splitlines()[-1] == "true"


# ---------------------------------------------------------------------------------------
# stored values: explicit enum numbers, settings versions


def _stored(p) -> dict:
    """The values a property group stores, as Blender keeps them (numbers for enums)."""
    from blensor_addon.compat import stored_idprops
    raw = stored_idprops(p)
    return {k: raw[k] for k in raw.keys() if not hasattr(raw[k], "keys")}


def test_enums_store_explicit_numbers_that_saved_files_hold(bpy_mod, empty_scene):
    from blensor_addon.io.formats import FLAG_BITS, WRITERS
    cam = bpy_mod.data.cameras.new("c")
    p = cam.blensor
    p.sensor_type = "tof"
    p.formats = {"npz", "las", "dmap"}
    p.depth_formats = {"npy", "pfm"}
    p.motion_formats = {"kitti"}
    got = _stored(p)
    # sensor_type: the sensor's number; formats: one bit per format (npz 0, las 3, dmap 12)
    assert got["sensor_type"] == 3 and got["formats"] == 1 + 8 + 4096
    assert got["depth_formats"] == (1 << 10) + (1 << 11) and got["motion_formats"] == 1 << 2
    items = {i.identifier: i.value for i in p.bl_rna.properties["formats"].enum_items}
    assert items == {k: 1 << FLAG_BITS[k] for k in WRITERS}
    # every registered type is an item with its number (what the file stores); the built-in
    # types' numbers are pinned in tests/test_core.py (STORED_SENSOR_NUMBERS)
    from blensor_addon.core.sensors import SENSORS
    from test_core import STORED_SENSOR_NUMBERS
    items = {i.identifier: i.value for i in p.bl_rna.properties["sensor_type"].enum_items}
    assert items == {k: s.number for k, s in SENSORS.items()}
    assert {k: items[k] for k in STORED_SENSOR_NUMBERS} == STORED_SENSOR_NUMBERS
    depth = {i.identifier for i in p.bl_rna.properties["depth_formats"].enum_items}
    assert depth == {"exr", "npy", "pfm", "dmap"}


def test_old_scenes_keep_blensor_axes_and_new_cameras_get_ros(bpy_mod, tmp_path):
    from blensor_addon.ui.props import SETTINGS_VERSION
    data = ROOT / "tests" / "data" / "v01_scene.blend"
    # saved before REP-103 became the default: upgraded, keeping the axes it scanned with
    bpy_mod.ops.wm.open_mainfile(filepath=str(data))
    p = bpy_mod.data.objects["Lidar"].data.blensor
    assert p.axes == "blensor" and p.settings_version == SETTINGS_VERSION == 4  # 4: the radiometric model
    # the demo scene, built by its script with the current settings version: REP-103
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))
    p = bpy_mod.data.objects["Velodyne"].data.blensor
    assert p.axes == "ros" and p.is_property_set("settings_version") and p.settings_version == SETTINGS_VERSION
    assert bpy_mod.data.objects["Velodyne"].data.blensor.time_model == "continuous"  # stored: kept
    assert bpy_mod.data.objects["Velodyne"].data.blensor.formats == {"npz", "evd", "pcd"}  # stored 7
    # a new camera: REP-103, kept through save and load (stamped with the version when saved)
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    cam = add_camera(bpy_mod, "New")
    assert cam.data.blensor.axes == "ros" and cam.data.blensor.settings_version == 0
    cam.data.blensor.max_bounces = 3
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "new.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "new.blend"))
    p = bpy_mod.data.objects["New"].data.blensor
    assert (p.axes, p.time_model, p.max_bounces) == ("ros", "continuous", 3)
    assert p.settings_version == SETTINGS_VERSION
    # a camera that chose an axes keeps it whatever its version
    p.axes = "blensor"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "chosen.blend"))
    bpy_mod.ops.wm.open_mainfile(filepath=str(tmp_path / "chosen.blend"))
    assert bpy_mod.data.objects["New"].data.blensor.axes == "blensor"


def test_upgrade_turns_typed_format_strings_into_sets(bpy_mod, empty_scene):
    from blensor_addon.compat import stored_idprops
    from blensor_addon.ui.props import upgrade_camera
    cam = add_camera(bpy_mod, "Old")
    raw = stored_idprops(cam.data.blensor)
    raw["depth_formats"] = "npy, PFM,bogus"  # what versions before 1 stored: typed text
    raw["motion_formats"] = "tum"
    p = cam.data.blensor
    assert upgrade_camera(cam.data) is True  # before anything reads them (Blender drops a mistyped value)
    assert p.depth_formats == {"npy", "pfm"} and p.motion_formats == {"tum"} and p.axes == "blensor"
    assert p.time_model == "frame" and p.settings_version == 4  # version 4: the radiometric model
    assert upgrade_camera(cam.data) is False  # once


def test_headless_read_path_upgrades_without_the_handlers(tmp_path):
    # a tool that registers only the properties (no load handler) calls upgrade_settings()
    code = textwrap.dedent(f"""
        import bpy
        from blensor_addon.ui import props
        for cls in props.build_classes():
            bpy.utils.register_class(cls)
        props.register_properties()
        bpy.ops.wm.open_mainfile(filepath={str(ROOT / "tests" / "data" / "v01_scene.blend")!r})
        p = bpy.data.objects["Lidar"].data.blensor
        before = p.axes
        n = props.upgrade_settings()
        print("AXES", before, p.axes, n == len(bpy.data.cameras) > 0, props.upgrade_settings())
        props.unregister_properties()
        for cls in reversed(props.CLASSES):
            bpy.utils.unregister_class(cls)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("AXES")][-1]
    # before the upgrade the unset axes reads the new default; after it, what v0.1 scanned with
    assert line.split()[1:] == ["ros", "blensor", "True", "0"]


def test_a_sensor_registered_after_the_add_on_gets_its_settings_and_enum_item(tmp_path):
    code = textwrap.dedent(f"""
        import sys, bpy, blensor_addon
        sys.path.insert(0, {str(ROOT / "examples" / "custom_sensor")!r})
        import run
        blensor_addon.register()
        blensor_addon.register_sensor(run.FanSensor())
        blensor_addon.register_writer(run.XyzWriter)
        bpy.ops.wm.read_factory_settings(use_empty=True)
        cam = bpy.data.cameras.new("c")
        p = cam.blensor
        p.sensor_type = "fan"
        p.fan.columns = 7
        p.formats = {{"xyz"}}
        from blensor_addon.compat import stored_idprops
        from blensor_addon.io.formats import FLAG_BITS
        raw = stored_idprops(p)
        print("FAN", raw["sensor_type"], p.fan.columns, p.xyz_digits, raw["formats"] == 1 << FLAG_BITS["xyz"])
        try:
            blensor_addon.register_sensor(run.FanSensor())
        except Exception as exc:
            print("DUP", exc)
        blensor_addon.unregister()
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAN 4242 7 6 True" in res.stdout
    assert "DUP sensor must be a name not registered yet" in res.stdout


def test_camera_properties_are_reserved_from_sensor_names(bpy_mod):
    # a plug-in sensor's settings group is named after it on Camera.blensor: the names of
    # the camera's own properties are refused at registration
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.sensors import CAMERA_PROPERTIES, Sensor, register_sensor
    from blensor_addon.ui.props import OUTPUT_OPTIONS
    assert CAMERA_PROPERTIES == {"sensor_type", *OUTPUT_OPTIONS}
    with pytest.raises(SettingsError, match="sensor must be a storage group no other sensor uses"):
        register_sensor(type("Axes", (Sensor,), {"name": "axes"})())
    with pytest.raises(SettingsError, match="storage group no other sensor uses, got 'preset'"):
        register_sensor(type("P", (Sensor,), {"name": "preset"})())  # a rotating LiDAR setting
