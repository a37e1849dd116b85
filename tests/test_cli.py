"""The ``blensor`` console script (subprocesses, pip bpy)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CROSSING

BLENSOR = str(Path(sys.executable).parent / "blensor")


def run(*args, cwd=None):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_scan_writes_files_and_summary(tmp_path):
    res = run("scan", CROSSING, "--frames", "2-3", "--out", tmp_path / "o", "--formats", "npz,evd,pcd",
              "--seed", "5", "--frame-of-reference", "world", "--set", "packets=frame")
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("blensor: 2 frames,") and "points" in line and " s (native)" in line
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["seed"] == 5 and man["frame_of_reference"] == "world" and man["status"] == "complete"
    z = np.load(tmp_path / "o" / "scan00002.npz")
    assert str(z["frame_of_reference"]) == "world"
    # world coordinates: the scene's ground (z = 0 .. 0.16 m) is the most common height
    hist, edges = np.histogram(z["xyz"][:, 2], bins=np.arange(-0.5, 15.0, 0.25))
    assert -0.25 <= edges[hist.argmax()] <= 0.25
    # the same command twice gives the same bytes
    res2 = run("scan", CROSSING, "--frames", "2-3", "--out", tmp_path / "p", "--formats", "npz,evd,pcd",
               "--seed", "5", "--frame-of-reference", "world", "--set", "packets=frame",
               "--quiet", "--quiet")
    assert res2.returncode == 0 and res2.stdout == "" and res2.stderr == ""  # --quiet twice: silent
    for f in sorted(p for p in (tmp_path / "o").rglob("*") if p.is_file()):
        rel = f.relative_to(tmp_path / "o")
        assert f.read_bytes() == (tmp_path / "p" / rel).read_bytes(), rel


def test_a_single_frame_scans_the_sweep_that_covers_it(tmp_path):
    # frame 1 spans [1/24, 2/24) s: inside sweep 0 = [0, 0.1) s of the 10 Hz head
    for frames in ("1", "1-1"):
        res = run("scan", CROSSING, "--frames", frames, "--out", tmp_path / frames, "--quiet")
        assert res.returncode == 0, res.stderr
        man = json.loads((tmp_path / frames / "manifest.json").read_text())
        assert [e["frame"] for e in man["frames"]] == [0] and man["packets"] == "sweep"
        assert man["frames"][0]["time"] == 0.0 and man["frames_requested"] == [1, 1]
        assert man["frames"][0]["files"] == ["scan00000.npz"]


def test_bvhtree_backend_from_the_command_line(tmp_path):
    res = run("scan", CROSSING, "--frames", "4", "--out", tmp_path, "--backend", "bvhtree", "--set",
              "time_model=frame")
    assert res.returncode == 0, res.stderr
    assert "(bvhtree)" in res.stdout
    assert json.loads((tmp_path / "manifest.json").read_text())["backend"] == "bvhtree"
    assert len(np.load(tmp_path / "scan00004.npz")["range"]) > 40000


def test_info_lists_cameras():
    res = run("info", CROSSING)
    assert res.returncode == 0
    assert "camera 'Velodyne' (scene camera)" in res.stdout and "preset: hdl64e_s2" in res.stdout
    assert "64 lasers, -24.85..4.97 deg" in res.stdout  # issue 21: the 64e_s2.1-sztaki.yaml unit


@pytest.mark.parametrize("args,needle", [
    (["scan", "missing.blend"], "SCENE.blend must be an existing .blend file"),
    (["scan", CROSSING, "--camera", "Nope"], "--camera must be one of the scene's cameras: Velodyne"),
    (["scan", CROSSING, "--camera", "Road"], "--camera must be one of the scene's cameras"),
    (["scan", CROSSING, "--frames", "40-60"], "--frames must be integers within the scene's frame range 1-48"),
    (["scan", CROSSING, "--frames", "x"], "--frames must be A-B or A"),
    (["scan", CROSSING, "--formats", "xyz"], "--formats must be a comma-separated subset of npz,evd,pcd,las"),
    (["scan", CROSSING, "--backend", "gpu"], "--backend must be one of auto, native, bvhtree"),
    (["scan", CROSSING, "--seed", "-3"], "--seed must be an integer >= 0"),
    (["scan", CROSSING, "--frame-of-reference", "utm"], "--frame-of-reference must be one of sensor, world"),
    (["scan", CROSSING, "--out", "/proc/blensor"], "--out must be a folder outside the operating system's"),
    (["scan", CROSSING, "--out", str(CROSSING / "sub")], "--out must be a writable folder"),
    (["scan", CROSSING, "--set", "noise_sigma=1e308"], "noise_sigma must be in [0, 1000] m"),
    (["scan", CROSSING, "--frames", "1-99999999999999999999999"], "--frames must be integers within"),
    (["scan"], "blensor: error:"),
    # a second round of hostile input: each of these was accepted, misnamed or a traceback
    (["scan", CROSSING, "--out", ""], "--out must be a folder path, got ''"),  # wrote into the current folder
    (["depth", CROSSING, "--out", " "], "--out must be a folder path"),
    (["scan", CROSSING, "--set", "seed=1.5"], "--set seed must be an integer in [0, 2147483647], got '1.5'"),
    (["scan", CROSSING, "--set", "sensor_type="], "sensor_type must be one of rotating,"),
    (["scan", CROSSING, "--set", "ref_slope=-1e308"], "ref_slope must be in [-1000, 1000] 1/m"),
    (["scan", CROSSING, "--set", "ref_limit=1e300"], "ref_limit must be in [-1000, 1000]"),
    (["scan", CROSSING, "--time", "5-6"], "--time must be an interval t0-t1 (s)"),
    # EVD (one output per scene frame) beside formats that would get sweeps: the setting that reconciles them
    (["scan", CROSSING, "--formats", "npz,evd"],
     "packets must be frame to write evd beside npz (evd needs one output per scene frame; with packets=auto "
     "the others would get sweeps; or write them in separate runs), got 'auto'"),
    (["scan", CROSSING, "--formats", "pcd", "--pcd-ascii", "--option", "pcd.ascii=false"],
     "--pcd-ascii must be not given with --option pcd.ascii"),
    # a value starting with "-" was taken for an option ("expected one argument"); Blender
    # keeps a scene's frame range at 0 or above, so the value is refused naming that range
    (["scan", CROSSING, "--frames", "-3--1"], "--frames must be integers within the scene's frame range 1-48, "
                                              "got '-3--1'"),
    (["scan", CROSSING, "--frames", "-2"], "--frames must be integers within the scene's frame range 1-48"),
    (["scan", CROSSING, "--time", "-1-0.5"], "--time must be an interval t0-t1 (s) with t0 < t1 within the "
                                             "scene's frames, 0.0416667-2.04167 s, got '-1-0.5'"),
])
def test_bad_input_exits_2_with_one_line_and_no_files(tmp_path, args, needle):
    res = run(*args, cwd=tmp_path)
    assert res.returncode == 2
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], res.stderr
    assert "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []  # not even the default out/ folder


def test_bad_sensor_setting_in_file_exits_2(tmp_path):
    import textwrap
    bad = tmp_path / "bad.blend"
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        bpy.data.objects["Velodyne"].data.blensor.angle_resolution = -1.0
        bpy.ops.wm.save_as_mainfile(filepath={str(bad)!r})
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    res = run("scan", bad, "--out", tmp_path / "o", "--frames", "1")
    assert res.returncode == 2
    assert "angle_resolution must be in (0, 360] deg, got -1.0" in res.stderr
    assert not (tmp_path / "o").exists()


def test_main_gives_the_signal_handlers_back_even_after_a_parser_error():
    import signal

    from blensor_addon import cli
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(SystemExit):
        cli.main(["nosuchcommand"])
    assert {s: signal.getsignal(s) for s in before} == before and cli._SIGNALS is None


def test_depth_help_lists_every_setting_the_depth_command_accepts():
    import dataclasses

    from blensor_addon import cli
    from blensor_addon.core.sensors import get_sensor
    names = [f.name for f in dataclasses.fields(get_sensor("depth").Settings)]
    sub = next(a for a in cli._build_parser()._actions if a.dest == "command").choices["depth"]
    text = " ".join(sub.format_help().split())
    assert len(names) > 4 and "readout_time" in names
    for name in names:
        assert name in text, name


def test_every_command_takes_formats_and_motion_keeps_format(tmp_path):
    # issue 20, 5: motion took --format while scan and depth took --formats
    a = run("motion", CROSSING, "--frames", "1-2", "--out", tmp_path / "a", "--formats", "tum,json",
            "--quiet")
    b = run("motion", CROSSING, "--frames", "1-2", "--out", tmp_path / "b", "--format", "tum,json",
            "--quiet")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    files = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*")
                   if p.is_file())
    assert any(f.startswith("tum/") for f in files) and "motion.json" in files
    for f in files:
        if f != "motion.json":  # (its path and version fields name the run)
            assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    for option in ("--formats", "--format"):  # the error names the option as typed
        bad = run("motion", CROSSING, option, "tum,bogus", "--out", tmp_path / "c")
        assert bad.returncode == 2 and bad.stderr.strip() == (
            f"blensor: error: {option} must be a comma-separated subset of blensor,tum,kitti,json, "
            "got 'tum,bogus'")


def test_scan_help_lists_every_format_option_and_a_bad_key_names_the_valid_ones(tmp_path):
    import dataclasses

    from blensor_addon.io.formats import WRITERS
    res = run("scan", "--help")
    assert res.returncode == 0
    text = res.stdout
    keys = [(f"{n}.{f.name}", f.metadata["blensor"]) for n, w in WRITERS.items()
            for f in dataclasses.fields(w.Options)]
    assert len(keys) >= 4 and "format options (--option FORMAT.KEY=VALUE):" in text
    for key, meta in keys:
        assert f"  {key}: {meta.description}; {meta.allowed()}" in text, key
    for option, line in [
        ("pcd.bogus=1", "pcd.bogus must be one of the options of pcd: pcd.ascii, got 'pcd.bogus=1'"),
        ("rosbag2.point=clean", "rosbag2.point must be one of the options of rosbag2: rosbag2.storage, "
                                "rosbag2.points, rosbag2.labels, rosbag2.odom_frame, rosbag2.base_frame, "
                                "rosbag2.sensor_frame, rosbag2.base_to_sensor, got 'rosbag2.point=clean'; "
                                "did you mean 'rosbag2.points'?"),
        ("npz.x=1", "npz.x must be one of the options of npz: npz.compress, got 'npz.x=1'"),
        ("ply.x=1", "ply.x must be one of the options of ply: (none: ply has no options), got 'ply.x=1'"),
        ("kitti.points=clean", "kitti.points must be an option of a format being written (npz,pcd,rosbag2,ply), "
                               "got 'kitti.points=clean'"),
    ]:
        res = run("scan", CROSSING, "--formats", "npz,pcd,rosbag2,ply", "--option", option, "--out",
                  tmp_path / "o")
        assert res.returncode == 2 and res.stderr.strip() == f"blensor: error: {line}", res.stderr
    assert not (tmp_path / "o").exists()


def test_stdout_of_json_commands_is_json_only():
    # issue 20, 5: Blender's "Read blend: ..." line reached stdout, info --json included
    for args in (["info", CROSSING, "--json"], ["sensors", "--json"]):
        res = run(*args)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)  # nothing else on stdout
        assert doc and "Read blend" not in res.stdout + res.stderr
    res = run("info", CROSSING)
    assert res.returncode == 0 and res.stdout.startswith("scene 'Crossing': frames 1-48") and res.stderr == ""


def test_axes_default_is_the_cameras_stored_choice(tmp_path):
    import textwrap
    blend = tmp_path / "ros.blend"
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        bpy.data.objects["Velodyne"].data.blensor.axes = "ros"
        bpy.ops.wm.save_as_mainfile(filepath={str(blend)!r})
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert "default: the camera's stored choice" in " ".join(run("scan", "--help").stdout.split())
    for name, extra, want in [("stored", [], "ros"), ("given", ["--axes", "blensor"], "blensor")]:
        res = run("scan", blend, "--frames", "1-3", "--out", tmp_path / name, "--quiet", *extra)
        assert res.returncode == 0, res.stderr
        assert json.loads((tmp_path / name / "manifest.json").read_text())["axes"] == want
    ros = np.load(tmp_path / "stored" / "scan00001.npz")["xyz"]
    blensor = np.load(tmp_path / "given" / "scan00001.npz")["xyz"]
    # REP-103 (x ahead, y left, z up) from BlenSor's (x right, y up, -z ahead): (-z, -x, y)
    np.testing.assert_allclose(ros, np.stack([-blensor[:, 2], -blensor[:, 0], blensor[:, 1]], 1), atol=1e-5)


def test_names_from_the_blend_are_escaped_on_the_terminal(tmp_path):
    # issue 20, 7.10: an escape sequence or newline in an object name reached the terminal raw
    import textwrap
    blend = tmp_path / "evil.blend"
    evil = "Cam\x1b]0;pwned\x07\nX"
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        bpy.data.objects["Velodyne"].name = {evil!r}
        bpy.context.scene.name = "Scene\\x1b[2J"
        bad = bpy.data.meshes.new("m")
        bad.from_pydata([(0, 0, float("nan")), (1, 0, 0), (0, 1, 0)], [], [(0, 1, 2)])
        ob = bpy.data.objects.new("Obj\\x1b[31m\\r", bad)
        bpy.context.scene.collection.objects.link(ob)
        bpy.ops.wm.save_as_mainfile(filepath={str(blend)!r})
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    info = run("info", blend)
    assert info.returncode == 0, info.stderr
    assert "scene 'Scene\\x1b[2J'" in info.stdout and "camera 'Cam\\x1b]0;pwned\\x07\\nX' (scene camera)" \
        in info.stdout
    bad = run("scan", blend, "--camera", "Nope\x1b[31m", "--out", tmp_path / "o")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "one of the scene's cameras: Cam\\x1b]0;pwned\\x07\\nX, got 'Nope\\x1b[31m'" in bad.stderr
    scan = run("scan", blend, "--frames", "1-3", "--out", tmp_path / "s", "--quiet")
    assert scan.returncode == 0, scan.stderr
    assert scan.stderr.strip() == ("blensor: warning: object 'Obj\\x1b[31m\\r' has non-finite (NaN/inf) "
                                   "coordinates; 1 of its triangles or instances are left out of the scan")
    for res in (info, bad, scan):
        assert not any(c in res.stdout + res.stderr for c in "\x1b\x07\r")
