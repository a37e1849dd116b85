"""sensor_msgs/LaserScan (docs/formats.md; seed 004 "Laser-Scan Output", REP-117): the
fields of a planar scan of the demo crossing read back from the bag (rosbags), the npz and
the CSV (numpy); a one-laser rotating head against a wall's closed form in both spin
directions; the plan refusing sensors without column angles; rosbag2's other bytes
unchanged by the refactor (only range_min); a pattern fired in part of its period (its own
time_increment and stamps) and a multi-return scan (each beam's strongest return)."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.timebase import parse_start_time
from blensor_addon.io.laserscan_msg import SCALARS
from blensor_addon.jobs.range_scan import scan_range

#: the default time base (UNIX ns of scene time 0) of the bags' stamps
BASE = parse_start_time(None)
from conftest import ROOT, add_camera, add_mesh
from test_rosbag import read_bag

PLANAR = dict(sensor_type="planar", preset="utm30lx", min_range=0.5, time_model="frame", packets="frame")


def rows(z, s):
    """Scan s of a laserscan npz: (ranges, intensities) without the padding."""
    n = int(z["count"][s])
    assert np.isnan(z["ranges"][s, n:]).all() and np.isnan(z["intensities"][s, n:]).all()
    return z["ranges"][s, :n], z["intensities"][s, :n]


def test_planar_laserscan_of_the_crossing_in_the_bag_the_npz_and_the_csv(bpy_mod, crossing, tmp_path):
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, [1, 2], tmp_path / "a", ("npz", "laserscan", "rosbag2"), **PLANAR)
    assert job.status == "complete"
    job = scan_range(cam, [1, 2], tmp_path / "b", ("laserscan",), options={"laserscan.format": "csv"},
                     **PLANAR)
    assert job.status == "complete"
    names = sorted(p.name for p in (tmp_path / "b" / "laserscan").iterdir())
    assert names == ["scan00001.csv", "scan00002.csv"]
    # the same scan gives the same bytes
    assert scan_range(cam, [1, 2], tmp_path / "c", ("laserscan",), **PLANAR).status == "complete"
    for f in (1, 2):
        name = f"laserscan/scan{f:05d}.npz"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    # UTM-30LX: -135..135 deg at 0.25 deg = 1080 columns a sweep, 40 Hz: 43,200 columns/s; a scene
    # frame of 1/24 s holds 1800: frame 1 = global columns 1800..3599 = sweep columns 720..1079 | 0..1079
    # | 0..359, frame 2 = 3600..5399 = 360..1079 | 0..1079
    expect = {1: ([1800, 2160, 3240], [360, 1080, 360]), 2: ([3600, 4320], [720, 1080])}
    bag = read_bag(tmp_path / "a" / "rosbag2")["/blensor/scan"]
    assert len(bag) == 5
    k = 0
    for f, (g0, counts) in expect.items():
        z = np.load(tmp_path / "a" / "laserscan" / f"scan{f:05d}.npz")
        pts = np.load(tmp_path / "a" / f"scan{f:05d}.npz")
        assert z["count"].tolist() == counts and int(z["frame"]) == f
        first = np.array(g0) % 1080
        assert z["first_column"].tolist() == first.tolist()
        np.testing.assert_allclose(z["stamp"], np.array(g0) / 43200, rtol=0, atol=1e-15)
        np.testing.assert_allclose(z["angle_min"], np.deg2rad(-135 + 0.25 * first), rtol=1e-6)
        np.testing.assert_allclose(z["angle_increment"], math.radians(0.25), rtol=1e-6)
        np.testing.assert_allclose(z["angle_max"], z["angle_min"] + (z["count"] - 1) * math.radians(0.25),
                                   rtol=1e-6)
        np.testing.assert_allclose(z["time_increment"], 1 / 43200, rtol=1e-6)
        np.testing.assert_allclose(z["scan_time"], 0.025, rtol=1e-6)
        assert (z["range_min"] == np.float32(0.5)).all() and (z["range_max"] == 30).all()
        # every ray of the packet, +inf where nothing returned; the ranges the point cloud holds
        want = np.full(sum(counts), np.inf, np.float32)
        want[pts["ray_index"]] = pts["range_noisy"]
        inten = np.zeros(sum(counts), np.float32)
        inten[pts["ray_index"]] = np.round(np.clip(pts["intensity"], 0, 1) * 255)
        got = np.concatenate([rows(z, s)[0] for s in range(len(counts))])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.concatenate([rows(z, s)[1] for s in range(len(counts))]), inten)
        hit = np.isfinite(got)
        assert 0.3 * got.size < hit.sum() < got.size  # the street's buildings, open sky beyond 30 m
        assert got[hit].min() >= 0.5 and got[hit].max() < 30.1
        # the bag's messages hold the same fields (float32) and the header stamp
        for s in range(len(counts)):
            t, m, msgtype = bag[k]
            k += 1
            assert msgtype == "sensor_msgs/msg/LaserScan" and m.header.frame_id == "blensor_sensor"
            # (the bag's stamps: the default time base plus scene time; the npz's: scene time)
            ns = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
            assert t == ns == BASE + round(g0[s] / 43200 * 1e9)
            for name in SCALARS:
                assert np.float32(getattr(m, name)) == z[name][s], name
            r, i = rows(z, s)
            np.testing.assert_array_equal(m.ranges, r)
            np.testing.assert_array_equal(m.intensities, i)
        # the CSV: one row per ray, the same values
        c = np.genfromtxt(tmp_path / "b" / "laserscan" / f"scan{f:05d}.csv", delimiter=",", names=True)
        assert c.dtype.names == ("scan", "ray", "stamp", "time", "angle", "range", "intensity", "angle_min",
                                 "angle_max", "angle_increment", "time_increment", "scan_time", "range_min",
                                 "range_max")
        assert c.shape == (sum(counts),)
        for s in range(len(counts)):
            sel = c[c["scan"] == s]
            r, i = rows(z, s)
            assert sel["ray"].tolist() == list(range(len(r)))
            np.testing.assert_array_equal(sel["range"].astype(np.float32), r)
            np.testing.assert_array_equal(sel["intensity"].astype(np.float32), i)
            for name in SCALARS:
                assert (sel[name].astype(np.float32) == z[name][s]).all(), name
            assert (sel["stamp"] == z["stamp"][s]).all()
            np.testing.assert_allclose(sel["angle"], np.float64(z["angle_min"][s]) + sel["ray"] * np.float64(
                z["angle_increment"][s]), rtol=0, atol=1e-12)
            dt = np.float64(z["time_increment"][s])
            np.testing.assert_allclose(sel["time"], z["stamp"][s] + sel["ray"] * dt, rtol=0, atol=1e-12)


@pytest.mark.parametrize("direction", ["cw", "ccw"])
def test_one_laser_rotating_head_writes_a_laserscan_of_a_wall(bpy_mod, empty_scene, tmp_path, direction):
    # a wall 6 m ahead (REP-103 x), from 50 m left to 10 m right: a ray at angle a (ccw from
    # ahead) hits it at 6 / cos(a) iff -6 tan(a) lies in [-50, 10] m, i.e. a in [-59.04, 83.16] deg
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 2
    add_mesh(bpy_mod, "Wall", [(-50, 6, -50), (10, 6, -50), (10, 6, 50), (-50, 6, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=(math.pi / 2, 0.0, 0.0))  # looks along world +Y; its left is -X
    job = scan_range(
        cam,
        [1, 2],
        tmp_path,
        ("laserscan", "rosbag2"),
        sensor_type="rotating",
        preset="generic",
        elevations=(0.0,),
        angle_resolution=1.0,
        rotation_speed=10.0,
        noise_sigma=0.0,
        bias_distribution="gaussian",
        bias_sigma=0.0,
        min_range=0.25,
        max_range=100.0,
        rotation_direction=direction,
        time_model="continuous",
        packets="sweep",
    )
    assert job.status == "complete"
    # sweeps of 0.1 s overlapping frames 1-2 ([1/24, 3/24) s): sweeps 0 and 1, one whole turn each
    scans = read_bag(tmp_path / "rosbag2")["/blensor/scan"]
    assert [t for t, _, _ in scans] == [BASE, BASE + 100_000_000]
    step = -1.0 if direction == "cw" else 1.0  # a clockwise head's azimuth falls with time
    for sweep, (_, m, _) in enumerate(scans):
        z = np.load(tmp_path / "laserscan" / f"scan{sweep:05d}.npz")
        assert z["count"].tolist() == [360] and z["first_column"].tolist() == [0]
        assert m.angle_min == 0.0 and math.isclose(m.angle_increment, math.radians(step), rel_tol=1e-6)
        assert math.isclose(m.angle_max, math.radians(359 * step), rel_tol=1e-6)
        assert math.isclose(m.time_increment, 0.1 / 360, rel_tol=1e-6) and math.isclose(m.scan_time, 0.1,
                                                                                         rel_tol=1e-6)
        assert m.range_min == np.float32(0.25) and m.range_max == 100.0
        a = m.angle_min + m.angle_increment * np.arange(360)
        x = -6.0 * np.tan(a)
        wall = (np.cos(a) > 0) & (x >= -50) & (x <= 10)
        assert wall.sum() == 59 + 83 + 1
        assert np.array_equal(np.isfinite(m.ranges), wall)
        np.testing.assert_allclose(m.ranges[wall], 6.0 / np.cos(a[wall]), rtol=1e-5)
        assert np.isposinf(m.ranges[~wall]).all() and (m.intensities[~wall] == 0).all()
        np.testing.assert_array_equal(z["ranges"][0], m.ranges)


def test_sensors_without_column_angles_are_refused_when_planned(bpy_mod, crossing, tmp_path):
    from blensor_addon.core.sensors import SENSORS
    from blensor_addon.io.laserscan_msg import check_laserscan
    cam = bpy_mod.data.objects["Velodyne"]  # the demo's HDL-64E: 64 lasers
    with pytest.raises(SettingsError) as err:
        scan_range(cam, [1, 2], tmp_path, ("npz", "laserscan"))
    msg = str(err.value)
    assert "\n" not in msg and "64 ray grid rows" in msg
    assert msg.startswith("formats must be formats the sensor can serve (laserscan needs one scan plane")
    assert not (tmp_path / "laserscan").exists() and not list(tmp_path.glob("scan*.npz"))
    # which rotating heads are 2D scanners: one laser at elevation 0, a whole turn of whole columns
    rot = SENSORS["rotating"]

    def angles(**kw):
        return rot.capabilities(rot.settings({"preset": "generic", "elevations": (0.0,), **kw})).column_angles

    assert angles(angle_resolution=0.5) == (0.0, -math.radians(0.5))  # cw from end_angle 360 = 0
    assert np.allclose(angles(angle_resolution=0.5, start_angle=-90.0, end_angle=270.0),
                       (-math.pi / 2, -math.radians(0.5)))
    assert angles(angle_resolution=0.5, rotation_direction="ccw") == (0.0, math.radians(0.5))
    for kw in (
        {"elevations": (0.0, 1.0)},
        {"elevations": (2.0,)},
        {"end_angle": 180.0},
        {"angle_resolution": 0.1728},
        {"rotation_direction": "ccw", "start_angle": 90.0, "end_angle": 450.0},
    ):
        assert angles(**{"angle_resolution": 0.5, **kw}) is None, kw
        with pytest.raises(SettingsError, match="laserscan needs one scan plane"):
            check_laserscan(rot.capabilities(rot.settings({"preset": "generic", "elevations": (0.0,),
                                                           "angle_resolution": 0.5, **kw})))
    planar = SENSORS["planar"]
    check_laserscan(planar.capabilities(planar.settings({})))  # one plane: accepted
    with pytest.raises(SettingsError, match="laserscan needs"):
        check_laserscan(planar.capabilities(planar.settings({"elevations": (0.0, 2.0)})))


def _old_rosbag2():
    """rosbag2.py as it was before issue 23 (git history), as a module of the package."""
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", "683300e:blensor_addon/io/formats/rosbag2.py"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history with the contract commit 683300e")
    spec = importlib.util.spec_from_loader("blensor_addon.io.formats._rosbag2_before_23", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "blensor_addon.io.formats"
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    try:
        exec(compile(src, "rosbag2_before_23.py", "exec"), mod.__dict__)
    finally:
        sys.modules.pop(spec.name, None)
    return mod


def test_rosbag2_bytes_are_unchanged_but_range_min(bpy_mod, crossing, tmp_path):
    # the bag written by rosbag2 before the LaserScan math moved to io/laserscan_msg.py and before
    # RigBag: every message byte for byte the same, the LaserScans but for range_min (0.0 then)
    from rosbags.typesys import Stores, get_typestore

    from blensor_addon.io.formats import RunInfo, make_options
    from blensor_addon.io.formats.rosbag2 import Rosbag2Writer
    from blensor_addon.scene.scanner import Scanner
    from blensor_addon.core.packets import Packet
    old = _old_rosbag2()
    cam = bpy_mod.data.objects["Velodyne"]
    results = []
    for ov in ({"sensor_type": "planar", "preset": "lms511", "min_range": 0.3}, {"sensor_type": "tof"}):
        sc = Scanner(cam, overrides=ov, axes="ros")
        try:
            results += [sc.scan(Packet("frame", f))[0] for f in (1, 2)]
        finally:
            sc.close()
    opts = make_options(("rosbag2",), {"rosbag2.labels": True})["rosbag2"]
    raw = {}
    ts = get_typestore(Stores.ROS2_HUMBLE)
    for key, cls in (("old", old.Rosbag2Writer), ("new", Rosbag2Writer)):
        (tmp_path / key).mkdir()
        # the old writer's stamps counted from UNIX time 0: the new one on that time base
        w = cls(tmp_path / key, opts) if key == "old" else cls(tmp_path / key, opts, RunInfo(start_ns=0))
        for r in results:
            w.append(r)
        w.close("complete")
        from rosbags.highlevel import AnyReader
        with AnyReader([tmp_path / key / "rosbag2"], default_typestore=ts) as rd:
            raw[key] = [(c.topic, c.msgtype, t, bytes(m)) for c, t, m in rd.messages()]
    assert [m[:3] for m in raw["old"]] == [m[:3] for m in raw["new"]]
    scans = 0
    for (topic, msgtype, _, a), (_, _, _, b) in zip(raw["old"], raw["new"]):
        if topic != "/blensor/scan":
            assert a == b, topic
            continue
        scans += 1
        x, y = ts.deserialize_cdr(a, msgtype), ts.deserialize_cdr(b, msgtype)
        assert x.range_min == 0.0 and y.range_min == np.float32(0.3)
        y.range_min = 0.0
        assert ts.serialize_cdr(y, msgtype).tobytes() == a
    assert scans == 4  # LMS511 at 25 Hz: a frame of 1/24 s crosses one sweep start (0.08, 0.12 s)


# issue 23 review: a 2D scanner's real timing (its sector fired in part of the period) and several
# returns a beam


def _hokuyo(path):
    """A UTM-30LX-like pattern: 1080 firings, -135 .. 134.75 deg at 0.25 deg, fired evenly in 3/4 of a
    25 ms period from 1/8 of it (the mirror's dead 90 deg behind the unit split around t = 0)."""
    from blensor_addon.core.sensors.pattern_file import write_csv
    P, n = 0.025, 1080
    dt = 0.75 * P / n
    write_csv(str(path), -135.0 + 0.25 * np.arange(n), np.zeros(n), P / 8 + dt * np.arange(n),
              np.zeros(n, int), period=P)
    return P, n, dt


def test_a_pattern_fired_in_part_of_its_period_writes_laserscans_with_its_own_timing(bpy_mod, crossing,
                                                                                      tmp_path):
    # issue 23 review: such a pattern declared no column_angles, so no LaserScan at all
    from blensor_addon.core.sensors import get_sensor
    from blensor_addon.core.sensors import pattern_file as pfm
    P, n, dt = _hokuyo(tmp_path / "utm.csv")
    pat = get_sensor("pattern")
    caps = pat.capabilities(pat.settings({"pattern_file": str(tmp_path / "utm.csv")}))
    assert caps.column_angles == (math.radians(-135.0), math.radians(0.25)) and caps.grid == (1, n)
    assert caps.column_time[0] == P / 8 and math.isclose(caps.column_time[1], dt, rel_tol=1e-12)
    # the planar model's timing (columns over the whole period from 0) keeps column_time None
    planar_2d = pfm.load(str(ROOT / "examples" / "patterns" / "planar_2d.csv"))
    assert planar_2d.column_angles(0.025) is not None and planar_2d.column_time(0.025) is None
    cam = bpy_mod.data.objects["Velodyne"]
    for packets in ("sweep", "frame"):
        out = tmp_path / packets
        job = scan_range(cam, [1, 2], out, ("npz", "laserscan", "rosbag2"), sensor_type="pattern",
                         pattern_file=str(tmp_path / "utm.csv"), packets=packets, noise_sigma=0.0)
        assert job.status == "complete"
        bag = read_bag(out / "rosbag2")["/blensor/scan"]
        k = 0
        for f in [e["frame"] for e in json.loads((out / "manifest.json").read_text())["frames"]]:
            z = np.load(out / "laserscan" / f"scan{f:05d}.npz")
            pts = np.load(out / f"scan{f:05d}.npz")
            S = len(z["count"])
            # every ray's firing time from the scans' stamps and time_increment: the points' own times
            t = np.concatenate([z["stamp"][s] + dt * np.arange(z["count"][s]) for s in range(S)])
            np.testing.assert_allclose(pts["timestamp"], t[pts["ray_index"]], rtol=0, atol=1e-12)
            r = np.concatenate([rows(z, s)[0] for s in range(S)])
            np.testing.assert_array_equal(r[pts["ray_index"]], pts["range_noisy"].astype(np.float32))
            for s in range(S):
                c0 = int(z["first_column"][s])
                sweep = round((z["stamp"][s] - P / 8 - c0 * dt) / P)  # the stamp is the first ray's time
                assert math.isclose(z["stamp"][s], sweep * P + P / 8 + c0 * dt, rel_tol=0, abs_tol=1e-15)
                assert z["time_increment"][s] == np.float32(dt) and z["scan_time"][s] == np.float32(P)
                assert np.isclose(z["angle_min"][s], math.radians(-135.0 + 0.25 * c0))
                stamp, m, _ = bag[k]
                k += 1
                ns = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
                assert stamp == BASE + round(z["stamp"][s] * 1e9) == ns
                assert m.time_increment == np.float32(0.75 * 0.025 / 1080) and m.scan_time == np.float32(P)
                np.testing.assert_array_equal(m.ranges, rows(z, s)[0])
            if packets == "sweep":  # a sweep packet is one whole sweep f, fired from f P + P / 8
                assert z["count"].tolist() == [n] and z["first_column"].tolist() == [0]
                assert z["stamp"][0] == f * P + P / 8
        assert k == len(bag) > 0
    # frame 1 = [1/24, 2/24) s starts exactly at column 780 of sweep 1 (1/24 = 0.025 + P/8 + 780 dt):
    # scans of columns 780..1079, then sweep 2's 0..1079, then sweep 3's 0..299 (up to 2/24 s)
    z = np.load(tmp_path / "frame" / "laserscan" / "scan00001.npz")
    assert z["first_column"].tolist() == [780, 0, 0] and z["count"].tolist() == [300, 1080, 300]
    np.testing.assert_allclose(z["stamp"], [1 / 24, 0.05 + P / 8, 0.075 + P / 8], rtol=0, atol=1e-15)


def test_a_multi_return_laserscan_keeps_each_beams_strongest_return(bpy_mod, crossing, tmp_path):
    # issue 23 review: with several returns a beam the LaserScan kept whichever came last
    from blensor_addon.core.sensors.intensity import received_power
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, [1, 2], tmp_path, ("npz", "laserscan"), sensor_type="planar", returns="all",
                     beam_divergence=0.015, samples_per_beam=16)
    assert job.status == "complete"
    not_last = not_first = 0
    for f in (1, 2):
        pts = np.load(tmp_path / f"scan{f:05d}.npz")
        z = np.load(tmp_path / "laserscan" / f"scan{f:05d}.npz")
        r = np.concatenate([rows(z, s)[0] for s in range(len(z["count"]))])
        i = np.concatenate([rows(z, s)[1] for s in range(len(z["count"]))])
        ri = pts["ray_index"].astype(np.int64)
        power = received_power(pts["intensity"], pts["range"], "lambert")  # intensity / r^2 (issue 22)
        beams, counts = np.unique(ri, return_counts=True)
        assert (counts > 1).sum() >= 10  # the divergent beam splits on edges
        for b in beams:
            at = np.flatnonzero(ri == b)
            best = at[np.argmax(power[at])]  # the nearest among equals (rows nearest first)
            assert r[b] == np.float32(pts["range_noisy"][best]), b
            assert i[b] == np.round(np.clip(pts["intensity"][best], 0, 1) * 255)
            not_last += best != at[-1]
            not_first += best != at[0]
        assert np.isposinf(np.delete(r, beams)).all()
    assert not_last > 0 and not_first > 0  # neither the last nor the first return would pass
