"""Rigs (docs/architecture.md): several sensor cameras in one pass over time, real Blender on
the demo's rig variant (``scenes/crossing_rig.blend``: the roof HDL-64E S2 ``Velodyne``, two
side VLP-16s and a front Kinect on the ``EgoCar``)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
RIG_BLEND = ROOT / "scenes" / "crossing_rig.blend"
BLENSOR = str(Path(sys.executable).parent / "blensor")
LIDARS = ("Velodyne", "VLP16_Left", "VLP16_Right")


def blensor(*args, cwd=None):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def rig_scene(bpy_mod):
    bpy_mod.ops.wm.open_mainfile(filepath=str(RIG_BLEND))
    return bpy_mod.context.scene


def _files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".npz", ".pcd")}


def _counting(bpy):
    count = [0]

    def counted(*_):
        count[0] += 1
    bpy.app.handlers.frame_change_post.append(counted)
    return count, counted


def test_rig_files_are_the_bytes_of_separate_runs_with_fewer_scene_evaluations(rig_scene, bpy_mod, tmp_path):
    # issue 23, section 3: one pass over time, the scene evaluated once per time for all
    # sensors; each sensor's files those of a run of that camera alone (lidar sweeps and the
    # Kinect's per-frame images interleaved)
    from blensor_addon.jobs.range_scan import scan_range
    from blensor_addon.jobs.rig_scan import scan_rig
    cams = [rig_scene.objects[n] for n in (*LIDARS, "Kinect")]
    frames = range(1, 4)
    count, handler = _counting(bpy_mod)
    try:
        separate = 0
        for c in cams:
            count[0] = 0
            scan_range(c, frames, tmp_path / "sep" / c.name, ("npz", "pcd"))
            separate += count[0]
        count[0] = 0
        job = scan_rig(cams, frames, tmp_path / "rig", ("npz", "pcd"))
        rig = count[0]
    finally:
        bpy_mod.app.handlers.frame_change_post.remove(handler)
    assert job.status == "complete"
    a, b = _files(tmp_path / "sep"), _files(tmp_path / "rig")
    assert a and a == b  # the same files, byte for byte
    assert {k.split("/")[0] for k in b} == set(c.name for c in cams)
    assert rig < separate / 2, (rig, separate)
    man = json.loads((tmp_path / "rig" / "rig.json").read_text())
    assert man["status"] == "complete" and man["base"] == "EgoCar"
    assert [s["camera"] for s in man["sensors"]] == [c.name for c in cams]
    assert [s["sensor_type"] for s in man["sensors"]] == ["rotating"] * 3 + ["kinect"]
    for c in cams:  # every member folder is a complete single run
        m = json.loads((tmp_path / "rig" / c.name / "manifest.json").read_text())
        assert m["status"] == "complete" and m["camera"] == c.name


def test_rig_extrinsics_are_the_sensors_poses_on_the_vehicle(rig_scene, tmp_path):
    # scenes/build_crossing.py RIG: VLP16_Left at (0.2, 0.95, 1.9) m in the car's frame,
    # looking left (yaw +90 deg); the roof HDL-64E at (0, 0, 2.5) looking ahead
    from blensor_addon.io.extrinsics import read_calib_rig
    from blensor_addon.jobs.rig_scan import scan_rig
    cams = [rig_scene.objects[n] for n in LIDARS]
    job = scan_rig(cams, range(1, 2), tmp_path, ("npz",))
    left = job.extrinsics["vlp16_left"]
    want = np.array([[0, -1, 0, 0.2], [1, 0, 0, 0.95], [0, 0, 1, 1.9], [0, 0, 0, 1]], float)
    np.testing.assert_allclose(left, want, atol=1e-6)
    roof = job.extrinsics["velodyne"]
    np.testing.assert_allclose(roof, np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 2.5], [0, 0, 0, 1.0]]),
                               atol=1e-6)
    calib = read_calib_rig(tmp_path / "calib_rig.txt")
    assert list(calib) == ["velodyne", "vlp16_left", "vlp16_right"]
    for n in calib:
        np.testing.assert_allclose(calib[n], job.extrinsics[n], atol=1e-9)
    man = json.loads((tmp_path / "rig.json").read_text())
    np.testing.assert_allclose(np.array(man["sensors"][1]["base_to_sensor"]).reshape(4, 4), want, atol=1e-6)


def test_rig_base_may_be_a_camera(rig_scene, tmp_path):
    # --rig-base Velodyne: the extrinsics in the roof sensor's REP-103 frame
    from blensor_addon.jobs.rig_scan import scan_rig
    cams = [rig_scene.objects[n] for n in LIDARS]
    job = scan_rig(cams, range(1, 2), tmp_path, ("npz",), base="Velodyne")
    np.testing.assert_allclose(job.extrinsics["velodyne"], np.eye(4), atol=1e-9)
    np.testing.assert_allclose(job.extrinsics["vlp16_left"][:3, 3], [0.2, 0.95, -0.6], atol=1e-6)


def test_cancelled_rig_keeps_every_finished_packet_and_resume_gives_the_same_bytes(rig_scene, tmp_path):
    from blensor_addon.jobs.rig_scan import scan_rig
    cams = [rig_scene.objects[n] for n in LIDARS]
    frames = range(1, 6)
    full = scan_rig(cams, frames, tmp_path / "full", ("npz",))
    steps = []
    job = scan_rig(
        cams, frames, tmp_path / "cut", ("npz",), should_cancel=lambda: steps.append(1) or len(steps) > 4
    )
    assert job.status == "cancelled" and 0 < len(job.done) < len(full.done)
    assert json.loads((tmp_path / "cut" / "rig.json").read_text())["status"] == "cancelled"
    cut = _files(tmp_path / "cut")
    whole = _files(tmp_path / "full")
    assert cut and all(whole[k] == v for k, v in cut.items())  # finished packets intact
    again = scan_rig(cams, frames, tmp_path / "cut", ("npz",), resume=True)
    assert again.reused == len(job.done) and again.status == "complete"
    assert _files(tmp_path / "cut") == whole


def test_cli_rig_all_sensors_and_camera_list(tmp_path):
    r = blensor("scan", RIG_BLEND, "--all-sensors", "--frames", "1", "--out", tmp_path / "all", "--quiet")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "all").iterdir() if p.is_dir()) == sorted(
        ["Kinect", "VLP16_Left", "VLP16_Right", "Velodyne"])
    r = blensor(
        "scan", RIG_BLEND, "--camera", "Velodyne,VLP16_Left", "--frames", "1", "--out", tmp_path / "two"
    )
    assert r.returncode == 0, r.stderr
    assert "rig of 2 sensors" in r.stdout
    # a second run into the folder is refused without --overwrite, and nothing changes
    before = _files(tmp_path / "two")
    r = blensor(
        "scan", RIG_BLEND, "--camera", "Velodyne,VLP16_Left", "--frames", "1", "--out", tmp_path / "two"
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--overwrite" in r.stderr
    assert _files(tmp_path / "two") == before
    r = blensor(
        "scan",
        RIG_BLEND,
        "--camera",
        "Velodyne,VLP16_Left",
        "--frames",
        "1",
        "--out",
        tmp_path / "two",
        "--overwrite",
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    assert _files(tmp_path / "two") == before


@pytest.mark.parametrize("args, setting", [
    (("--camera", "Velodyne,Velodyne"), "--camera"),
    (("--camera", "Velodyne,Nope"), "--camera"),
    (("--camera", "Velodyne,VLP16_Left", "--rig-base", "Nope"), "--rig-base"),
    (("--camera", "Velodyne", "--all-sensors"), "--all-sensors"),
])
def test_cli_rig_bad_input_is_one_line_and_writes_nothing(tmp_path, args, setting):
    out = tmp_path / "out"
    r = blensor("scan", RIG_BLEND, *args, "--frames", "1", "--out", out)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"blensor: error: {setting}"), r.stderr
    assert not out.exists()


def test_rig_refuses_sensors_that_disagree_on_visibility_before_writing(rig_scene, tmp_path):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.rig_scan import scan_rig
    rig_scene.objects["VLP16_Left"].data.blensor.visibility = "viewport"
    cams = [rig_scene.objects[n] for n in LIDARS]
    with pytest.raises(SettingsError, match="visibility"):
        scan_rig(cams, range(1, 2), tmp_path / "out", ("npz",))
    assert not (tmp_path / "out").exists()


def test_rig_writes_one_bag_with_every_sensors_topics_and_the_extrinsics_in_tf_static(rig_scene, tmp_path):
    # issue 23, section 3: every sensor's messages in one bag on their own topics; the
    # extrinsics in /tf_static; the same bytes in every run (one writer thread, in order)
    from rosbags.highlevel import AnyReader
    from blensor_addon.jobs.rig_scan import scan_rig
    cams = [rig_scene.objects[n] for n in (*LIDARS, "Kinect")]
    job = scan_rig(cams, range(1, 3), tmp_path / "a", ("npz", "rosbag2"))
    scan_rig(cams, range(1, 3), tmp_path / "b", ("npz", "rosbag2"))
    bag = tmp_path / "a" / "rosbag2"
    assert (bag / "rosbag2.mcap").read_bytes() == (tmp_path / "b" / "rosbag2" / "rosbag2.mcap").read_bytes()
    assert not any(
        (tmp_path / "a" / c.name / "rosbag2").exists() for c in cams
    )  # one bag, at the rig's level
    with AnyReader([bag]) as reader:
        topics = {c.topic: c.msgcount for c in reader.connections}
        for ns in ("velodyne", "vlp16_left", "vlp16_right"):
            assert topics[f"/blensor/{ns}/points"] == len(job.members[0].done)  # one cloud per sweep
        assert topics["/blensor/kinect/depth/image"] == 2  # one image per scene frame
        static = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()
                  if c.topic == "/tf_static"]
    assert len(static) == 1
    got = {t.child_frame_id: t for t in static[0].transforms if t.header.frame_id == "base_link"}
    for name, T in job.extrinsics.items():
        tr = got[name].transform.translation
        np.testing.assert_allclose([tr.x, tr.y, tr.z], T[:3, 3], atol=1e-9)


TWO_SENSORS = """<sdf>
<sensor type="ray" name="front2d"><update_rate>10</update_rate>
<ray><scan><horizontal><samples>181</samples><min_angle>-1.57</min_angle><max_angle>1.57</max_angle></horizontal>
<vertical><samples>1</samples><min_angle>0</min_angle><max_angle>0</max_angle></vertical></scan>
<range><min>0.05</min><max>30</max></range></ray></sensor>
<sensor type="ray" name="spin3d"><update_rate>10</update_rate>
<ray><scan><horizontal><samples>900</samples><min_angle>-3.14159265</min_angle><max_angle>3.14159265</max_angle>
</horizontal><vertical><samples>16</samples><min_angle>-0.26</min_angle><max_angle>0.26</max_angle></vertical></scan>
<range><min>0.3</min><max>100</max></range></ray></sensor>
</sdf>
"""


def test_cli_sensor_file_with_two_sensors_scans_them_as_a_rig(tmp_path):
    # issue 23: blensor scan SCENE --sensor FILE scans the file's sensors (a rig when several),
    # the .blend unchanged; a format one member cannot serve is refused naming that camera
    blend = ROOT / "scenes" / "crossing.blend"
    before = blend.read_bytes()
    xml = tmp_path / "two.xml"
    xml.write_text(TWO_SENSORS)
    r = blensor("scan", blend, "--sensor", xml, "--frames", "1-2", "--formats", "npz,laserscan", "--out",
                tmp_path / "bad")
    assert r.returncode == 2 and "(camera 'spin3d')" in r.stderr.splitlines()[-1], r.stderr
    assert not (tmp_path / "bad").exists()
    r = blensor(
        "scan", blend, "--sensor", xml, "--frames", "1-2", "--formats", "npz", "--out", tmp_path / "ok"
    )
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / "ok" / "rig.json").read_text())
    assert [(s["camera"], s["sensor_type"]) for s in man["sensors"]] == [("front2d", "planar"),
                                                                          ("spin3d", "rotating")]
    assert list((tmp_path / "ok" / "front2d").glob("scan*.npz")) and list(
        (tmp_path / "ok" / "spin3d").glob("*.npz")
    )
    assert blend.read_bytes() == before


def test_resume_with_rosbag2_solo_and_rig(tmp_path):
    # issue 23 review: --resume with rosbag2 was always refused (the manifest stores the
    # option base_to_sensor as a JSON list, the new run had a tuple); a rig's members resume
    # too (the one bag is written again whole)
    for args, name in ((("--camera", "Velodyne"), "solo"), (("--camera", "Velodyne,VLP16_Left"), "rig")):
        out = tmp_path / name
        r = blensor(
            "scan", RIG_BLEND, *args, "--frames", "1-2", "--formats", "npz,rosbag2", "--out", out, "--quiet"
        )
        assert r.returncode == 0, r.stderr
        r = blensor(
            "scan", RIG_BLEND, *args, "--frames", "1-3", "--formats", "npz,rosbag2", "--out", out, "--resume"
        )
        assert r.returncode == 0, r.stderr
        full = tmp_path / f"{name}_full"
        r = blensor(
            "scan", RIG_BLEND, *args, "--frames", "1-3", "--formats", "npz,rosbag2", "--out", full, "--quiet"
        )
        assert r.returncode == 0, r.stderr
        assert _files(out) == _files(full) and _files(out)


def test_resume_names_the_one_option_that_differs(tmp_path):
    r = blensor("scan", RIG_BLEND, "--frames", "1", "--formats", "npz,rosbag2", "--out", tmp_path, "--quiet")
    assert r.returncode == 0, r.stderr
    r = blensor("scan", RIG_BLEND, "--frames", "1", "--formats", "npz,rosbag2", "--out", tmp_path, "--resume",
                "--option", "rosbag2.labels=true")
    assert r.returncode == 2 and "same options.rosbag2.labels, got 'False in" in r.stderr, r.stderr


def test_a_solo_run_into_a_rigs_folder_is_refused_even_with_overwrite(tmp_path):
    # issue 23 review: a solo --overwrite into a rig's folder mixed the two runs
    r = blensor(
        "scan", RIG_BLEND, "--camera", "Velodyne,VLP16_Left", "--frames", "1", "--out", tmp_path, "--quiet"
    )
    assert r.returncode == 0, r.stderr
    before = _files(tmp_path)
    r = blensor("scan", RIG_BLEND, "--camera", "Velodyne", "--frames", "1", "--out", tmp_path, "--overwrite")
    assert r.returncode == 2 and "rig.json" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert _files(tmp_path) == before and not (tmp_path / "manifest.json").exists()


def test_rig_set_refusal_names_the_camera(tmp_path):
    # --set applies to every camera of a rig: a setting one camera's sensor lacks is named with it
    r = blensor(
        "scan", RIG_BLEND, "--all-sensors", "--set", "rotation_speed=5", "--frames", "1", "--out", tmp_path
    )
    assert r.returncode == 2 and "(camera 'Kinect')" in r.stderr, r.stderr


def test_rig_write_failure_counts_every_members_packets(tmp_path):
    # issue 23 review: the failure line counted the first member's frames only
    import os
    import shutil
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and tmpfs to make a small file system")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(disk)], capture_output=True
    ).returncode:
        pytest.skip("needs root and tmpfs to make a small file system")
    try:
        r = blensor("scan", RIG_BLEND, "--camera", "Velodyne,VLP16_Left", "--frames", "1-48", "--out", disk,
                    "--quiet")
        assert r.returncode == 1, r.stderr
        man = json.loads((disk / "rig.json").read_text())
        assert man["status"] == "failed"
        done = sum(s["done"] for s in man["sensors"])
        kept = sum(len(json.loads((disk / s["folder"] / "manifest.json").read_text())["frames"])
                   for s in man["sensors"])
        assert done == kept > 0
        assert f"{done} finished frames" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
