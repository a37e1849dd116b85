"""The output folder's policy on hostile input: what an earlier run left is deleted only
once everything of the new run is validated (transforms included), ``--resume`` never
deletes or overwrites finished packets of another range or rig member, a manifest never
reaches outside its folder, the search for earlier outputs looks only where BlenSor
writes, and the operating system's folders are refused by rule."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import CROSSING
from test_faults import one_error_line, run, visible_files

RIG_BLEND = CROSSING.parent / "crossing_rig.blend"


def snapshot(folder: Path) -> dict:
    """Relative path -> bytes of every file below ``folder`` (hidden ones included)."""
    return {n: (folder / n).read_bytes() for n in visible_files(folder)}


@pytest.fixture(scope="module")
def far_scenes(tmp_path_factory):
    """The demo crossing with its sensor (or one object) out of reach, made in one Blender
    subprocess: at 1e31 m (continuous and frozen time), at inf (Blender stores FLT_MAX)."""
    d = tmp_path_factory.mktemp("far")
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        def variant(name, edit):
            bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
            edit(bpy.data.objects["Velodyne"])
            bpy.ops.wm.save_as_mainfile(filepath={str(d)!r} + "/" + name + ".blend")
        variant("far", lambda c: setattr(c, "location", (1e31, 0.0, 0.0)))
        variant("inf", lambda c: setattr(c, "location", (float("inf"), 0.0, 0.0)))
        variant("far_frozen", lambda c: (setattr(c, "location", (1e31, 0.0, 0.0)),
                                         setattr(c.data.blensor, "time_model", "frame")))
        def far_object(c):
            bpy.ops.mesh.primitive_cube_add()
            bpy.context.object.name = "Far"
            bpy.context.object.location = (0.0, 1e31, 0.0)
        variant("far_object", far_object)
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return d


@pytest.mark.parametrize("name,obj,value", [
    ("far", "Velodyne", "1e+31"), ("inf", "Velodyne", "3.40282e+38"), ("far_frozen", "Velodyne", "1e+31"),
    ("far_object", "Far", "1e+31")])
def test_a_transform_out_of_reach_is_refused_before_overwrite_deletes_the_earlier_run(far_scenes, tmp_path,
                                                                                      name, obj, value):
    out = tmp_path / "o"
    res = run("scan", CROSSING, "--frames", "1-2", "--out", out, "--formats", "npz,pcd", "--quiet")
    assert res.returncode == 0, res.stderr
    before = snapshot(out)
    res = run("scan", far_scenes / f"{name}.blend", "--frames", "1-2", "--out", out, "--formats", "npz,pcd",
              "--overwrite", "--quiet")
    assert res.returncode == 2, res.stderr
    line = one_error_line(res)
    assert re.fullmatch(rf"blensor: error: transform of object '{obj}' must be finite and within \+-1e\+09 "
                        r"\(m, every entry of its world matrix\) at every time scanned, got "
                        rf"'{re.escape(value)} at t = [0-9.e+-]+ s \(frame [01]\)'", line), line
    assert snapshot(out) == before  # byte for byte, the manifest included


def test_resume_never_deletes_or_overwrites_the_packets_of_another_range(tmp_path):
    out = tmp_path / "o"
    fmt = ("--formats", "npz,pcd,kitti", "--quiet")
    assert run("scan", CROSSING, "--frames", "1-6", "--out", out, *fmt).returncode == 0
    before = snapshot(out)
    # frames 1-6 are sweeps 0-2, frames 13-18 sweeps 5-7: the earlier sweeps are not in the plan
    res = run("scan", CROSSING, "--frames", "13-18", "--out", out, "--resume", *fmt)
    assert res.returncode == 2, res.stderr
    assert one_error_line(res) == (
        "blensor: error: --frames must be a range holding the earlier run's finished packets (--resume keeps "
        "them: this folder holds sweeps 0-2 of --frames 1-6; resume with a range around them, or use "
        "--overwrite to replace them), got '13-18'")
    res = run("scan", CROSSING, "--time", "0.5-0.8", "--out", out, "--resume", *fmt)
    assert res.returncode == 2 and one_error_line(res).startswith(
        "blensor: error: --time must be a range holding the earlier run's finished packets"), res.stderr
    assert snapshot(out) == before
    # a range around the earlier one resumes it: its packets are reused, not rewritten
    other = tmp_path / "p"
    assert run("scan", CROSSING, "--frames", "1-3", "--out", other, "--formats", "npz,pcd",
               "--quiet").returncode == 0
    kept = {n: b for n, b in snapshot(other).items() if n.endswith((".npz", ".pcd"))}
    res = run("scan", CROSSING, "--frames", "1-6", "--out", other, "--formats", "npz,pcd", "--resume")
    assert res.returncode == 0 and ", 2 reused," in res.stdout, res.stdout + res.stderr
    assert all((other / n).read_bytes() == b for n, b in kept.items())
    assert json.loads((other / "manifest.json").read_text())["status"] == "complete"


def test_resume_with_a_multi_frame_format_says_in_one_line_why_it_rescans(tmp_path):
    out = tmp_path / "o"
    fmt = ("--frames", "1-3", "--formats", "npz,kitti", "--out", out, "--quiet")
    assert run("scan", CROSSING, *fmt).returncode == 0
    before = snapshot(out)
    res = run("scan", CROSSING, *fmt, "--resume")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and re.fullmatch(
        r"blensor: note: --resume rescans the 2 packets of the earlier run: kitti writes files over the "
        r"whole run that need every packet's scan; the files are the bytes of an uninterrupted run",
        lines[0]), res.stderr
    after = snapshot(out)
    assert {n: b for n, b in after.items() if n != "manifest.json"} == \
        {n: b for n, b in before.items() if n != "manifest.json"}
    man = [json.loads(s["manifest.json"]) for s in (before, after)]
    assert man[0]["frames"] == man[1]["frames"] and man[1]["status"] == "complete"


@pytest.mark.parametrize("where", ["absolute", "parent"])
def test_a_manifest_listing_a_file_outside_the_folder_is_refused_and_nothing_is_touched(tmp_path, where):
    out = tmp_path / "o"
    assert run("scan", CROSSING, "--frames", "1-2", "--out", out, "--quiet").returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("not BlenSor's")
    man = json.loads((out / "manifest.json").read_text())
    listed = str(victim) if where == "absolute" else "../victim.txt"
    man["frames"][0]["files"].append(listed)
    (out / "manifest.json").write_text(json.dumps(man))
    before = snapshot(out)
    res = run("scan", CROSSING, "--frames", "1-2", "--out", out, "--overwrite", "--quiet")
    assert res.returncode == 2, res.stderr
    assert one_error_line(res) == (
        "blensor: error: --out must be a folder whose manifest.json lists only files inside it (--overwrite "
        "never deletes anything else; choose another folder), got "
        f"'{out} (its manifest.json lists {listed})'")
    assert victim.read_text() == "not BlenSor's" and snapshot(out) == before


def test_the_search_for_earlier_outputs_looks_only_where_blensor_writes(tmp_path, monkeypatch):
    from blensor_addon.io.formats import output_patterns
    from blensor_addon.io.outdir import OutputFolder, range_run_files
    out = tmp_path / "o"
    deep = out / "data" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for i in range(50):
        (deep / f"scan{i:05d}.npz").write_bytes(b"x")
    (out / "velodyne" / "old").mkdir(parents=True)
    (out / "velodyne" / "000000.bin").write_bytes(b"x")
    (out / "velodyne" / "old" / "000001.bin").write_bytes(b"x")
    (out / "clean").mkdir()
    (out / "clean" / "scan00000.pcd").write_bytes(b"x")
    (out / "scan00000.npz").write_bytes(b"x")
    (out / "notes.txt").write_bytes(b"x")
    listed = []
    real = os.scandir

    def spy(path="."):
        listed.append(Path(path).relative_to(out).as_posix())
        return real(path)
    monkeypatch.setattr(os, "scandir", spy)
    folder = OutputFolder(out, manifest="manifest.json", patterns=output_patterns(), listed=range_run_files)
    found = [p.relative_to(out).as_posix() for p in folder.existing()]
    assert found == ["clean/scan00000.pcd", "scan00000.npz", "velodyne/000000.bin"]
    assert sorted(listed) == [".", "clean", "velodyne"]  # never data/..., never velodyne/old


@pytest.mark.parametrize("target", ["/", "/etc/blensor-out", "/proc/blensor-out", "/usr", "link-to-etc",
                                    "/var/log", "/run/blensor-out"])
def test_the_operating_systems_folders_are_refused_by_rule(tmp_path, target):
    if target == "link-to-etc":
        (tmp_path / "l").symlink_to("/etc")
        target = tmp_path / "l" / "blensor-out"
    res = run("scan", CROSSING, "--frames", "1", "--out", target, "--quiet")
    assert res.returncode == 2, res.stderr
    line = one_error_line(res)
    assert line.startswith("blensor: error: --out must be a folder outside the operating system's folders "
                           "(the root /, /bin, /boot, /dev, /etc, "), line
    assert line.endswith(f"got '{target}'"), line
    assert not Path("/etc/blensor-out").exists() and not Path("/.blensor.lock").exists()


def test_users_folders_below_var_and_run_are_not_system_folders():
    # home folders of Fedora Silverblue (/home -> /var/home), removable drives, CI workspaces
    from blensor_addon.io.outdir import system_folder
    for ok in ("/var/home/ada/out", "/run/media/ada/USB/out", "/var/lib/jenkins/ws/out", "/var/tmp/out"):
        assert system_folder(Path(ok)) is None, ok
    for bad in ("/var", "/var/log", "/run", "/run/user", "/etc/x", "/usr/share/x", "/"):
        assert system_folder(Path(bad)) is not None, bad


def test_a_rig_folder_holds_exactly_the_members_rig_json_lists(tmp_path):
    out = tmp_path / "rig"
    base = ("--frames", "1-2", "--out", out, "--quiet")
    res = run("scan", RIG_BLEND, "--camera", "VLP16_Left,VLP16_Right", *base)
    assert res.returncode == 0, res.stderr
    before = snapshot(out)
    # resuming with another member set would leave VLP16_Right's folder beside a rig.json without it
    res = run("scan", RIG_BLEND, "--camera", "VLP16_Left", "--rig-base", "EgoCar", "--resume", *base)
    assert res.returncode == 2, res.stderr
    assert one_error_line(res) == (
        "blensor: error: --camera must be the cameras of the earlier rig with --resume (its folder holds "
        "VLP16_Left, VLP16_Right; use --overwrite to replace the rig), got "
        "'VLP16_Left (VLP16_Right dropped)'")
    assert snapshot(out) == before
    # --overwrite with another member set removes the dropped member's files and folder
    res = run("scan", RIG_BLEND, "--camera", "VLP16_Left,Kinect", "--overwrite", *base)
    assert res.returncode == 0, res.stderr
    rig = json.loads((out / "rig.json").read_text())
    members = sorted(s["folder"] for s in rig["sensors"])
    assert members == ["Kinect", "VLP16_Left"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == members


def test_a_huge_manifest_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    # a planted multi-GB manifest.json was read whole before its size was checked
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.io import outdir
    monkeypatch.setattr(outdir, "MANIFEST_MAX_BYTES", 4096)
    path = tmp_path / "manifest.json"
    path.write_bytes(b'{"blensor_version": "0", "pad": "' + b"a" * (1 << 22) + b'"}')
    read = []
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real(fd, n))
    with pytest.raises(SettingsError, match=r"manifest\.json must be a manifest of at most 0 MiB"):
        outdir.read_manifest(path)
    assert sum(read) <= 4097
