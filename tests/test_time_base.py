"""One time base for every format (``--start-time``, blensor_addon/core/timebase.py): its
forms and refusals, and the absolute stamps of rosbag2, pcap, LAS ``gps_time`` and the npz
on one run, while KITTI ``times.txt``, PCD and the trajectory stay relative."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import CROSSING
from pcap_synth import ouster_device, synthetic_result, velodyne_device
from test_faults import one_error_line, run

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.timebase import (ALLOWED, DEFAULT_START_TIME, iso, las_gps_time, parse_start_time,
                                         run_start_time)
from blensor_addon.io.formats import WRITERS, RunInfo, make_options

#: 2020-01-01T00:00:00Z in UNIX seconds
DEFAULT_UNIX = 1_577_836_800


@pytest.mark.parametrize("given, ns", [
    (None, DEFAULT_UNIX * 10**9),
    ("2020-01-01T00:00:00Z", DEFAULT_UNIX * 10**9),
    ("2020-01-01T02:00:00+02:00", DEFAULT_UNIX * 10**9),
    ("2020-01-01T00:00:00", DEFAULT_UNIX * 10**9),  # no offset: UTC
    ("2020-01-01T00:00:00.000000123Z", DEFAULT_UNIX * 10**9 + 123),  # nanoseconds kept exactly
    ("1577836800.25", DEFAULT_UNIX * 10**9 + 250_000_000),
    (1_577_836_800, DEFAULT_UNIX * 10**9),
    (1_700_000_000.5, 1_700_000_000_500_000_000),
])
def test_start_time_forms(given, ns):
    assert parse_start_time(given) == ns
    assert DEFAULT_START_TIME == "2020-01-01T00:00:00Z" and iso(DEFAULT_UNIX * 10**9) == DEFAULT_START_TIME


@pytest.mark.parametrize("bad", ["yesterday", "", "2020-13-01T00:00:00Z", 0, 0.0, -1, float("nan"),
                                 float("inf"), "315964799", "2038-01-19T03:14:08Z", True,
                                 "2020-01-01T00:00:00.1234567891Z",
                                 # numbers whose scaling to ns overflowed (OverflowError, decimal.Overflow)
                                 1e300, 10**100, "1e7000000", "-1e-7000000", "1e99000", "1" * 100])
def test_bad_start_times_are_refused_naming_the_forms(bad):
    with pytest.raises(SettingsError) as e:
        parse_start_time(bad)
    assert str(e.value) == f"--start-time must be {ALLOWED}, got {bad!r}"


def test_pcap_start_time_is_another_name_of_the_time_base():
    ns, rest = run_start_time(None, {"pcap.start_time": "1700000000", "pcd.ascii": True})
    assert ns == 1_700_000_000 * 10**9 and rest == {"pcd.ascii": True}
    with pytest.raises(SettingsError, match="pcap.start_time must be not given with --start-time"):
        run_start_time("2021-01-01T00:00:00Z", {"pcap.start_time": 1.7e9})


def test_las_gps_time_is_adjusted_standard_gps_time():
    # 2020-01-01T00:00:00Z: 1,261,872,018 GPS seconds (1,261,872,000 s since 1980-01-06
    # plus 18 leap seconds); adjusted standard GPS time subtracts 10^9 (LAS 1.4 R15)
    assert las_gps_time(DEFAULT_UNIX * 10**9, 0.0) == 261_872_018.0
    # 2016-12-31T23:59:59Z, before the last leap second: 17 s
    assert las_gps_time(1_483_228_799 * 10**9, 0.5) == 1_483_228_799 - 315_964_800 + 17 - 1e9 + 0.5
    # the GPS epoch itself
    assert las_gps_time(315_964_800 * 10**9, 0.0) == -1e9


# -- the command line ---------------------------------------------------------------------------

def test_a_bad_start_time_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "out"
    res = run("scan", CROSSING, "--frames", "1", "--out", out, "--formats", "npz", "--start-time", "soon")
    assert res.returncode == 2
    assert one_error_line(res) == f"blensor: error: --start-time must be {ALLOWED}, got 'soon'"
    assert not out.exists()


def test_start_time_and_its_pcap_alias_together_are_refused(tmp_path):
    out = tmp_path / "out"
    res = run("scan", CROSSING, "--frames", "1", "--out", out, "--formats", "npz", "--start-time",
              "2021-01-01T00:00:00Z", "--option", "pcap.start_time=1600000000")
    assert res.returncode == 2
    assert one_error_line(res) == ("blensor: error: pcap.start_time must be not given with --start-time (one "
                                   "or the other: --start-time is the run's time base for every format), "
                                   "got 'pcap.start_time=1600000000'")
    assert not out.exists()


def _bag_messages(folder: Path) -> list:
    """[(topic, log time ns, header stamp ns or None)] of the bag in ``folder``."""
    from rosbags.highlevel import AnyReader
    out = []
    with AnyReader([folder]) as reader:
        for conn, t, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            head = getattr(msg, "header", None)
            if head is None and hasattr(msg, "transforms"):
                head = msg.transforms[0].header
            if head is None and hasattr(msg, "clock"):
                head = msg
                stamp = msg.clock.sec * 10**9 + msg.clock.nanosec
            else:
                stamp = head.stamp.sec * 10**9 + head.stamp.nanosec
            out.append((conn.topic, t, stamp))
    return out


@pytest.fixture(scope="module")
def stamped_runs(tmp_path_factory):
    """Two runs of frames 1-2 of the demo with every time-bearing format: the default time
    base and ``--start-time 2021-06-01T14:00:00.5+02:00``."""
    d = tmp_path_factory.mktemp("timebase")
    runs = {}
    for name, extra in (("default", []), ("given", ["--start-time", "2021-06-01T14:00:00.5+02:00"])):
        res = run("scan", CROSSING, "--frames", "1-2", "--out", d / name, "--formats",
                  "npz,pcd,kitti,las,rosbag2", "--quiet", *extra)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        runs[name] = d / name
    return runs


@pytest.mark.parametrize("name, base", [("default", DEFAULT_UNIX * 10**9),
                                        ("given", 1_622_548_800 * 10**9 + 500_000_000)])
def test_every_absolute_stamp_counts_from_the_time_base(stamped_runs, name, base):
    out = stamped_runs[name]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["start_time"] == iso(base)
    packets = manifest["frames"]
    period = manifest["packet_time"]
    # npz: the base beside the scene-relative timestamps
    with np.load(out / f"scan{packets[0]['frame']:05d}.npz") as z:
        assert int(z["start_time_ns"]) == base and z["start_time_ns"].dtype == np.int64
        t = z["timestamp"]
        assert 0.0 <= t.min() and t.max() < 2 * period  # scene time, not absolute
    # LAS: adjusted standard GPS time of base + timestamp, bit 0 of the global encoding set
    import laspy
    las = laspy.read(out / "noisy" / f"scan{packets[0]['frame']:05d}.las")
    assert las.header.global_encoding.gps_time_type == laspy.header.GpsTimeType.STANDARD
    assert las.header.global_encoding.value & 1 == 1
    gps = np.sort(np.asarray(las.gps_time))
    want = np.sort(las_gps_time(base, t))
    assert np.abs(gps - want).max() < 1e-6
    assert gps.min() >= las_gps_time(base, 0.0) > 2.6e8  # adjusted GPS s (2020: 261,872,018)
    # rosbag2: every header stamp and log time is base + scene time; the first one is the base
    msgs = _bag_messages(out / "rosbag2")
    assert msgs[0][0] == "/tf_static" and msgs[0][1] == base and msgs[0][2] == base
    for topic, logged, stamp in msgs:
        assert base <= logged <= base + 10**9 * (len(packets) + 1) * period, topic
        assert base - 10**9 * period <= stamp <= base + 10**9 * (len(packets) + 1) * period, topic
    starts = sorted(s for tp, _, s in msgs if tp == "/blensor/odom")
    assert starts == [base + round(p["frame"] * period * 1e9) for p in packets]
    # KITTI times.txt stays relative to the first scan; PCD times within the packet
    times = np.loadtxt(out / "times.txt", ndmin=1)
    assert times[0] == 0.0 and np.allclose(np.diff(times), period)


def test_relative_formats_do_not_move_with_the_time_base(stamped_runs):
    a, b = stamped_runs["default"], stamped_runs["given"]
    for rel in ("times.txt", "poses.txt", "velodyne/000000.bin", "trajectory.tum",
                "noisy/scan00000.pcd", "clean/scan00001.pcd"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    for rel in ("scan00000.npz", "noisy/scan00000.las", "rosbag2/rosbag2.mcap"):
        assert (a / rel).read_bytes() != (b / rel).read_bytes(), rel


# -- pcap ---------------------------------------------------------------------------------------

def _records(pcap: Path) -> list[tuple[int, int, bytes]]:
    """[(record seconds, microseconds, UDP payload)] of a capture."""
    data = pcap.read_bytes()
    pos, out = 24, []
    while pos < len(data):
        sec, usec, incl, _ = struct.unpack_from("<IIII", data, pos)
        out.append((sec, usec, data[pos + 16 + 42:pos + 16 + incl]))
        pos += 16 + incl
    return out


def _pcap(folder: Path, results, start_ns: int | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    run_info = RunInfo() if start_ns is None else RunInfo(start_ns=start_ns)
    w = WRITERS["pcap"](folder, make_options(("pcap",), {})["pcap"], run_info)
    for r in results:
        w.append(r)
    w.close("complete")
    return folder / "scan.pcap"


def test_velodyne_pcap_counts_from_the_time_base(tmp_path):
    dev = velodyne_device("VLP-16")
    r = synthetic_result(dev, 0, 48, 0, hole=0)
    for name, base in (("default", None), ("given", 1_622_548_800 * 10**9 + 1_234_567_000)):
        recs = _records(_pcap(tmp_path / name, [r], base))
        b = DEFAULT_UNIX * 10**9 if base is None else base
        # a packet is stamped at its first firing (us past the hour) and sent after its last
        first_us = (b + round(float(r.timestamp[0]) * 1e9) + 500) // 1000
        assert struct.unpack_from("<I", recs[0][2], 1200)[0] == first_us % 3_600_000_000
        sent = recs[0][0] * 10**6 + recs[0][1]
        assert first_us < sent < first_us + 2000  # 24 columns of 55.296 us
        assert recs[0][0] >= b // 10**9 > 0


def test_ouster_pcap_timestamps_are_exact_ns_from_the_time_base(tmp_path):
    from blensor_addon.io.packets.ouster import OusterEncoder
    dev = ouster_device()
    # 32 columns on the unit's 1024-column encoder grid (as every preset has them)
    r = synthetic_result(dev, 0, 32, 0, hole=0, psi0=2 * np.pi * 100 / 1024)
    base = 1_622_548_800 * 10**9 + 123  # a float64 UNIX time cannot hold the 123 ns
    recs = _records(_pcap(tmp_path, [r], base))
    enc = OusterEncoder(dev, base)
    stamps = np.concatenate([np.frombuffer(p, dtype=enc.dtype)["timestamp"] for _, _, p in recs])
    period = 1.0 / (dev.rotation_speed * dev.columns)
    want = base + np.round(np.arange(32) * period * 1e9).astype(np.uint64)
    got = np.sort(stamps[stamps > 0]).astype(np.int64)  # (columns the run did not fire: 0)
    assert got[0] == base  # the 123 ns kept
    assert len(got) == 32 and np.abs(got - want.astype(np.int64)).max() <= 1  # a column time's half-ns tie


def test_resume_with_another_time_base_is_refused_and_keeps_the_files(stamped_runs, tmp_path):
    import shutil
    out = tmp_path / "run"
    shutil.copytree(stamped_runs["default"], out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    res = run("scan", CROSSING, "--frames", "1-2", "--out", out, "--formats", "npz,pcd,kitti,las,rosbag2",
              "--resume", "--start-time", "2021-01-01T00:00:00Z")
    assert res.returncode == 2
    assert one_error_line(res) == (f"blensor: error: --resume must be a folder scanned with the same "
                                   f"start_time, got \"'2020-01-01T00:00:00Z' in {out / 'manifest.json'}, "
                                   "'2021-01-01T00:00:00Z' now\"")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_the_time_table_names_every_format_that_writes_times():
    import re
    text = (Path(__file__).resolve().parent.parent / "docs" / "formats.md").read_text(encoding="utf-8")
    table = text.split("## Time bases", 1)[1]
    rows = " ".join(ln.split("|")[1].lower() for ln in table.splitlines()
                    if ln.startswith("| ") and "---" not in ln)
    timeless = {"range_image", "exr", "npy", "pfm", "dmap", "preview"}  # images: no times
    missing = [f for f in WRITERS if f not in timeless and not re.search(rf"\b{f}\b", rows)]
    assert not missing, missing
    assert "2020-01-01T00:00:00Z" in table and "adjusted standard GPS time" in table


@pytest.fixture(scope="module")
def stored_scenes(tmp_path_factory):
    """The demo with a time base stored on the camera (the panel's Start time), with the pcap
    writer's former stored option only (a file saved before ``start_time``), and with a bad one."""
    import subprocess
    import sys
    import textwrap
    d = tmp_path_factory.mktemp("stored")
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        def variant(name, edit):
            bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
            edit(bpy.data.objects["Velodyne"].data.blensor)
            bpy.ops.wm.save_as_mainfile(filepath={str(d)!r} + "/" + name + ".blend")
        variant("stored", lambda p: setattr(p, "start_time", "2021-06-01T00:00:00Z"))
        variant("legacy", lambda p: p.__setitem__("pcap_start_time", 1.7e9))
        variant("bad", lambda p: setattr(p, "start_time", "whenever"))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return d


@pytest.mark.parametrize("scene, extra, want", [
    ("stored", [], "2021-06-01T00:00:00Z"),
    ("stored", ["--start-time", "2022-01-01T00:00:00Z"], "2022-01-01T00:00:00Z"),  # the command wins
    ("legacy", [], "2023-11-14T22:13:20Z"),  # pcap_start_time = 1.7e9 s of an older file
])
def test_a_camera_stores_its_time_base(stored_scenes, tmp_path, scene, extra, want):
    out = tmp_path / "out"
    res = run("scan", stored_scenes / f"{scene}.blend", "--frames", "1", "--out", out, "--formats", "npz",
              "--quiet", *extra)
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "manifest.json").read_text())["start_time"] == want
    with np.load(out / "scan00000.npz") as z:
        assert iso(int(z["start_time_ns"])) == want


def test_a_bad_stored_time_base_is_one_line_and_exit_2(stored_scenes, tmp_path):
    out = tmp_path / "out"
    res = run("scan", stored_scenes / "bad.blend", "--frames", "1", "--out", out, "--formats", "npz")
    assert res.returncode == 2
    assert one_error_line(res) == f"blensor: error: start_time must be {ALLOWED}, got 'whenever'"
    assert not out.exists()
