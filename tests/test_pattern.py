"""Pattern-file LiDARs (pattern files and hybrid solid-state units, docs/physics.md):
the file layout and its reader, one-line errors naming the row and column, the cache,
the sensor's timing, grid and LaserScan angles, the degenerate 2D pattern against the
planar scanner on the demo scene, analytic ranges to a wall with per-laser origins, the
command line end to end (npz, pcd, las, rosbag2 read back with pypcd4, laspy, rosbags),
determinism, and the example files and their generator."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CROSSING, ROOT, add_camera, add_mesh

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import get_sensor
from blensor_addon.core.sensors import pattern_file as pfm
from blensor_addon.core.sensors.pattern import firing_count, firings, loaded
from blensor_addon.core.sensors.raypattern import angles_of

EX = ROOT / "examples" / "patterns"
BLENSOR = str(Path(sys.executable).parent / "blensor")
PATTERN = get_sensor("pattern")


def settings(path, **kw):
    return PATTERN.settings({"pattern_file": str(path), **kw})


def csv(tmp_path, text, name="p.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------
# layout and conventions (numpy only)


def test_csv_npy_and_structured_npy_read_the_same_firings_sorted_by_time(tmp_path):
    az = np.array([10.0, -20.0, 30.0, 0.0])
    el = np.array([1.0, 2.0, -3.0, 0.0])
    t = np.array([0.003, 0.001, 0.002, 0.0])
    ch = np.array([1, 0, 1, 0])
    org = np.array([[0.1, 0.0, 0.0], [0.0, 0.2, 0.0], [0.1, 0.0, 0.0], [0.0, 0.2, 0.0]])
    pfm.write_csv(tmp_path / "a.csv", az, el, t, ch, org, period=0.004, comments=("test",))
    np.save(tmp_path / "b.npy", np.column_stack([az, el, t, ch, org]))
    rec = np.zeros(4, dtype=[("channel", "<u2"), ("time_s", "<f8"), ("azimuth_deg", "<f4"),
                             ("elevation_deg", "<f4"), ("origin_x_m", "<f8"), ("origin_y_m", "<f8"),
                             ("origin_z_m", "<f8")])
    for name, v in zip(pfm.COLUMNS + pfm.ORIGIN_COLUMNS, (az, el, t, ch, *org.T)):
        rec[name] = v
    np.save(tmp_path / "c.npy", rec)
    a, b, c = (pfm.load(str(tmp_path / n)) for n in ("a.csv", "b.npy", "c.npy"))
    assert a.period == 0.004 and b.period is None and c.period is None
    for p in (a, b, c):
        assert np.array_equal(p.time_s, [0.0, 0.001, 0.002, 0.003])  # sorted by time
        assert np.allclose(p.azimuth_deg, [0.0, -20.0, 30.0, 10.0])
        assert np.array_equal(p.channel, [0, 0, 1, 1])
        assert p.grid == (2, 2) and np.array_equal(p.position, [0, 1, 0, 1])
        assert np.allclose(p.origin, org[[3, 1, 2, 0]])
    # the CSV's rows are its lines (2 comments, the header, then the data from line 4)
    assert np.array_equal(a.row, [7, 5, 6, 4]) and np.array_equal(b.row, [3, 1, 2, 0])


def test_directions_and_origins_in_blensors_sensor_frame(tmp_path):
    # REP-103-like angles: azimuth 0 ahead (-Z here), +90 deg to the left (-X here), elevation up (+Y)
    p = csv(tmp_path, "# period_s: 1\n" + pfm.HEADER_ORIGINS + "\n0,0,0,0,1,2,3\n90,0,0.1,0,0,0,0\n"
                      "-90,0,0.2,0,0,0,0\n0,90,0.3,0,0,0,0\n45,30,0.4,0,0,0,0\n")
    pf = pfm.load(str(p))
    d = pf.directions
    assert np.allclose(d[:4], [[0, 0, -1], [-1, 0, 0], [1, 0, 0], [0, 1, 0]], atol=1e-15)
    c = math.cos(math.radians(30))
    assert np.allclose(d[4], [-c * math.sqrt(0.5), 0.5, -c * math.sqrt(0.5)])
    az, el = angles_of(d)
    wrapped = np.mod(np.rad2deg(az[[0, 1, 2, 4]]) + 180.0, 360.0) - 180.0  # (0 comes back as 2 pi - 1e-16)
    assert np.allclose(wrapped, [0, 90, -90, 45]) and np.isclose(np.rad2deg(el[4]), 30)
    # origin (x ahead 1, y left 2, z up 3) is (-2, 3, -1) in BlenSor's frame
    assert np.array_equal(pf.origins[0], np.float32([-2, 3, -1]))


def test_file_times_repeat_every_period_and_frames_tile_time(tmp_path):
    pf = pfm.load(str(EX / "mems_lissajous.csv"))
    P = pf.period
    assert P == 0.05 and len(pf) == 5000
    # a sweep packet (frame_time = P) is repetition k: k P + t_i
    for k in (0, 3, 17):
        idx, t = firings(pf, P, k, P, "range")
        assert np.array_equal(idx, np.arange(5000)) and np.array_equal(t, k * P + pf.time_s)
    # single: one repetition from the frame's time
    idx, t = firings(pf, P, 5, 1 / 24, "single")
    assert np.array_equal(t, 5 * (1 / 24) + pf.time_s)
    # scene frames of 1/24 s: every firing of 0..0.5 s exactly once, in time order
    got = [firings(pf, P, f, 1 / 24, "range") for f in range(12)]
    assert [g[0].shape[0] for g in got] == [firing_count(pf, P, f, 1 / 24, "range") for f in range(12)]
    t = np.concatenate([g[1] for g in got])
    idx = np.concatenate([g[0] for g in got])
    assert t.shape[0] == 50_000 and (np.diff(t) > 0).all()
    k = np.repeat(np.arange(10), 5000)
    assert np.array_equal(idx, np.tile(np.arange(5000), 10))
    assert np.abs(t - (k * P + pf.time_s[idx])).max() == 0.0


def test_capabilities_grid_period_and_laserscan_angles(tmp_path):
    planar = get_sensor("planar")
    ps = planar.settings(planar.preset_values("generic"))
    pc = planar.capabilities(ps)
    c2 = PATTERN.capabilities(settings(EX / "planar_2d.csv"))
    assert c2.timing.kind == "sweep" and c2.timing.period == 0.025 == pc.timing.period
    assert c2.grid == pc.grid == (1, 1080) and c2.column_angles == pc.column_angles
    assert c2.column_angles == (math.radians(-135.0), math.radians(0.25))
    cm = PATTERN.capabilities(settings(EX / "mems_lissajous.csv"))
    assert cm.grid == (1, 5000) and cm.column_angles is None and cm.timing.period == 0.05
    ca = PATTERN.capabilities(settings(EX / "at128_hybrid.npy", pattern_period=0.1))
    assert ca.grid == (128, 1200) and ca.column_angles is None and ca.timing.period == 0.1
    # pattern_period overrides the file's period
    assert PATTERN.capabilities(settings(EX / "planar_2d.csv", pattern_period=0.05)).timing.period == 0.05
    # channels that fire unequally often: no grid; uneven times: no LaserScan
    p = csv(tmp_path, "# period_s: 1\n" + pfm.HEADER + "\n0,0,0,0\n1,0,0.1,0\n2,0,0.2,1\n")
    assert PATTERN.capabilities(settings(p)).grid is None
    p = csv(tmp_path, "# period_s: 1\n" + pfm.HEADER + "\n0,0,0,0\n1,0,0.1,0\n2,0,0.7,0\n", "q.csv")
    c = PATTERN.capabilities(settings(p))
    assert c.grid == (1, 3) and c.column_angles is None
    # rings from the channels' mean elevations (AT128: channel k is ring k, the fan bottom up)
    at = loaded(settings(EX / "at128_hybrid.npy", pattern_period=0.1)).file
    assert np.array_equal(PATTERN.channel_rings(settings(EX / "at128_hybrid.npy", pattern_period=0.1)),
                          np.arange(128))
    assert np.allclose(at.channel_elevations(), -12.5 + 0.2 * np.arange(128), atol=1e-5)


def test_the_example_files_are_what_the_generator_writes_and_match_the_datasheet(tmp_path):
    res = subprocess.run([sys.executable, str(EX / "make_patterns.py"), str(tmp_path)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    for name in ("planar_2d.csv", "mems_lissajous.csv", "at128_hybrid.npy"):
        assert (tmp_path / name).read_bytes() == (EX / name).read_bytes(), name
    assert sum((EX / n).stat().st_size for n in ("planar_2d.csv", "mems_lissajous.csv", "at128_hybrid.npy")) \
        < 3_000_000
    at = pfm.load(str(EX / "at128_hybrid.npy"))
    # Hesai AT128: 128 channels, 120 x 25.4 deg, 0.1 x 0.2 deg, 10 Hz, 1,536,000 points/s single return
    assert len(at) == 153_600 and at.channels == 128 and len(at) * 10 == 1_536_000
    assert np.isclose(at.elevation_deg.min(), -12.5) and np.isclose(at.elevation_deg.max(), 12.9, atol=1e-5)
    assert np.isclose(np.ptp(at.azimuth_deg) + 0.1, 120.0, atol=1e-4)
    assert np.allclose(np.diff(np.unique(at.azimuth_deg)), 0.1, atol=1e-4)
    assert np.allclose(np.diff(np.unique(at.elevation_deg)), 0.2, atol=1e-5)
    mems = pfm.load(str(EX / "mems_lissajous.csv"))
    assert np.isclose(np.abs(mems.azimuth_deg).max(), 30.0, atol=0.01)
    assert np.isclose(np.abs(mems.elevation_deg).max(), 10.0, atol=0.01)


def test_parsed_files_are_cached_by_path_size_and_mtime(tmp_path):
    p = csv(tmp_path, "# period_s: 1\nazimuth_deg,elevation_deg,time_s,channel\n0,0,0,0\n")
    a = pfm.load(str(p))
    assert pfm.load(str(p)) is a
    p.write_text("# period_s: 1\nazimuth_deg,elevation_deg,time_s,channel\n5,0,0,0\n1,0,0.5,0\n")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 1_000_000))
    b = pfm.load(str(p))
    assert b is not a and len(b) == 2 and b.azimuth_deg[0] == 5.0


# ---------------------------------------------------------------------------------------
# bad files: one line naming the file, row and column

H = "# period_s: 0.1\nazimuth_deg,elevation_deg,time_s,channel\n"
BAD_CSV = [
    ("wrong header", "# period_s: 0.1\nazimuth,elevation,time,channel\n0,0,0,0\n",
     r"header 'azimuth_deg,elevation_deg,time_s,channel'.*line 2: unknown column\), got 'azimuth'"),
    ("missing column", "# period_s: 0.1\nazimuth_deg,elevation_deg,time_s\n0,0,0\n",
     r"line 2: no column 'channel'"),
    ("twice", "azimuth_deg,elevation_deg,time_s,channel,channel\n", r"line 1: column 'channel' twice"),
    ("two origins", "azimuth_deg,elevation_deg,time_s,channel,origin_x_m,origin_y_m\n", r"no 'origin_z_m'"),
    ("non-numeric", H + "0,0,0,0\n1,abc,0.01,0\n", r"elevation_deg cells are numbers.*line 4, column 2 "
                                                   r"\(elevation_deg\)\), got 'abc'"),
    ("nan", H + "0,0,0,0\nnan,0,0.01,0\n",
     r"azimuth_deg cells are finite numbers.*line 4, column 1 \(azimuth_deg\)"),
    ("inf", H + "0,0,inf,0\n", r"time_s cells are finite numbers.*line 3, column 3 \(time_s\)"),
    ("elevation", H + "0,0,0,0\n0,0,0.01,0\n0,91.5,0.02,0\n",
     r"elevation_deg cells are in \[-90, 90\] deg.*line 5, column 2 \(elevation_deg\)\), got 91.5"),
    ("azimuth", H + "400,0,0,0\n", r"azimuth_deg cells are in \[-360, 360\] deg.*line 3, column 1"),
    ("negative time", H + "0,0,-0.01,0\n", r"time_s cells are at least 0 s.*line 3, column 3 \(time_s\)"),
    ("late time", H + "0,0,0,0\n0,0,0.1,0\n",
     r"time_s cells are below the period 0.1 s.*line 4, column 3 \(time_s\)\), got 0.1"),
    ("fractional channel", H + "0,0,0,1.5\n",
     r"channel cells are integers in \[0, 65535\].*line 3, column 4"),
    ("negative channel", H + "0,0,0,0\n0,0,0.01,-1\n",
     r"channel cells are integers.*line 4, column 4 \(channel\)"),
    ("cells", H + "0,0,0\n", r"4 cells a row, as its header.*line 3: 3 cells"),
    ("empty", "", r"the header .* and one row per firing .*empty"),
    ("comments only", "# nothing\n\n", r"empty"),
    ("header only", H, r"at least one firing .*no rows after the header"),
    ("period line", "# period_s: -1\n" + H[16:] + "0,0,0,0\n", r"period_s is in \[0.0001, 3600\] s.*line 1"),
    # issue 23 review: a period below the floor (1e-4 s) planned 41,666,668 sweeps of one scene frame
    ("tiny period", "# period_s: 1e-9\n" + H[16:] + "0,0,0,0\n",
     r"period_s is in \[0.0001, 3600\] s \(.*tiny_period.csv, line 1\), got '1e-9'"),
    ("origin", pfm.HEADER_ORIGINS + "\n0,0,0,0,0,5000,0\n",
     r"origin_y_m cells are in \[-1000, 1000\] m.*line 2, column 6 \(origin_y_m\)"),
    ("permuted columns", "# period_s: 0.1\nchannel,time_s,elevation_deg,azimuth_deg\n0,0,-95,0\n",
     r"elevation_deg cells are in \[-90, 90\] deg.*line 3, column 3 \(elevation_deg\)"),
]


def _one_line(err: SettingsError, path) -> str:
    msg = str(err)
    assert "\n" not in msg and msg.startswith("pattern_file must be ") and str(path) in msg, msg
    return msg


@pytest.mark.parametrize("case,text,needle", BAD_CSV, ids=[c[0] for c in BAD_CSV])
def test_a_bad_csv_is_one_line_naming_the_file_line_and_column(tmp_path, case, text, needle):
    p = csv(tmp_path, text, f"{case.replace(' ', '_')}.csv")
    with pytest.raises(SettingsError) as e:
        loaded(settings(p))
    assert e.value.setting == "pattern_file"
    assert re.search(needle, _one_line(e.value, p)), str(e.value)


def test_bad_npy_files_and_paths_are_one_line(tmp_path, monkeypatch):
    cases = []
    np.save(tmp_path / "shape.npy", np.zeros((3, 5)))
    cases.append(("shape.npy", {}, r"\(N, 4\) or \(N, 7\).*got 'shape \(3, 5\)'"))
    a = np.zeros((3, 4))
    a[:, 2] = [0, 0.01, 0.02]
    a[2, 1] = np.nan
    np.save(tmp_path / "nan.npy", a)
    cases.append(("nan.npy", {"pattern_period": 0.1}, r"elevation_deg cells are finite.*row 2, column 1 "
                                                      r"\(elevation_deg\)"))
    a[2, 1] = 0.0
    np.save(tmp_path / "noperiod.npy", a)
    cases.append(("noperiod.npy", {}, None))
    names = [("az", "f8"), ("elevation_deg", "f8"), ("time_s", "f8"), ("channel", "f8")]
    np.save(tmp_path / "names.npy", np.zeros(2, dtype=names))
    cases.append(("names.npy", {"pattern_period": 0.1}, r"fields: unknown column\), got 'az'"))
    np.save(tmp_path / "empty.npy", np.zeros((0, 4)))
    cases.append(("empty.npy", {"pattern_period": 0.1}, r"at least one firing"))
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY garbage" * 3)
    cases.append(("garbage.npy", {}, r"a readable .npy pattern file"))
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x81" * 10)
    cases.append(("binary.csv", {}, r"UTF-8 text \(CSV\) pattern file.*undecodable byte"))
    (tmp_path / "p.txt").write_text(H + "0,0,0,0\n")
    cases.append(("p.txt", {}, r"ending in .csv or .npy"))
    cases.append(("missing.csv", {}, r"an existing .csv or .npy pattern file .*missing.csv, No such file"))
    (tmp_path / "dir.csv").mkdir()
    cases.append(("dir.csv", {}, r"not a regular file"))
    for name, kw, needle in cases:
        with pytest.raises(SettingsError) as e:
            loaded(settings(tmp_path / name, **kw))
        if needle is None:  # a .npy without pattern_period: names the period setting
            assert e.value.setting == "pattern_period" and "gives no period" in str(e.value)
            continue
        assert re.search(needle, _one_line(e.value, tmp_path / name)), (name, str(e.value))
    for bad, needle in (("", "none given"), ("//rel.csv", "relative to the .blend")):
        with pytest.raises(SettingsError, match=needle):
            loaded(settings(bad))
    # the ray budget: a file of more firings than one scan may cast, refused while it is read
    monkeypatch.setattr(pfm, "ray_limit", lambda: 1000)
    shutil.copy(EX / "mems_lissajous.csv", tmp_path / "big.csv")
    with pytest.raises(SettingsError,
                       match=r"at most 1,000 firings a period \(the ray budget\).*big.csv, line 1005"):
        pfm.load(str(tmp_path / "big.csv"))
    shutil.copy(EX / "at128_hybrid.npy", tmp_path / "at.npy")
    with pytest.raises(SettingsError, match=r"at most 1,000 firings.*153,600 rows"):
        pfm.load(str(tmp_path / "at.npy"))


def test_a_frame_of_many_periods_is_refused_naming_pattern_period(monkeypatch):
    from blensor_addon.core.sensors import pattern as pmod
    s = settings(EX / "planar_2d.csv")
    assert PATTERN.check_budget(s, 0, 1 / 24, "range", None) == 1800  # 1/24 s at 43,200 firings/s
    assert PATTERN.check_budget(s, 7, 0.025, "range", None) == 1080  # a sweep packet: one repetition
    monkeypatch.setattr(pmod, "ray_limit", lambda: 2000)
    monkeypatch.setattr("blensor_addon.core.sensors.budget.ray_limit", lambda: 2000)
    with pytest.raises(SettingsError, match=r"pattern_period must be at least .* s at these settings"):
        PATTERN.check_budget(settings(EX / "planar_2d.csv"), 0, 1.0, "range", None)


# ---------------------------------------------------------------------------------------
# scans in Blender


def _scan(cam, kind, index, **overrides):
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    sc = Scanner(cam, overrides=overrides, axes="blensor")
    try:
        return sc.scan(Packet(kind, index))[0]
    finally:
        sc.close()


FIELDS = ("range", "range_noisy", "xyz", "xyz_noisy", "azimuth", "elevation", "ray_index", "channel", "ring",
          "intensity", "reflectivity", "normal", "object_id", "semantic")


def test_the_2d_pattern_reproduces_the_planar_scanner_on_the_demo_scene(bpy_mod, crossing):
    """planar_2d.csv holds the planar ``generic`` preset's rays (same azimuths, same firing
    times written with exact float round trips); with the same range, noise and
    reflectivity limit the scans are identical: the same directions (the same formula on
    the same float64 angles), the same returns, the same noise draws in the same order.
    Timestamps: identical in a single scan (``frame * frame_time + t_i``, t_i parsed back
    exactly); in a range scan ``k P + t_i`` against the planar's ``g / (count * rate)``:
    within float64 rounding (measured 5.6e-17 s), which moves nothing the scene casts."""
    cam = bpy_mod.data.objects["Velodyne"]
    planar = {"sensor_type": "planar", "preset": "generic"}
    pattern = {"sensor_type": "pattern", "pattern_file": str(EX / "planar_2d.csv"), "max_range": 30.0,
               "noise_sigma": 0.03, "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.005333333}
    for kind, index in (("single", 3), ("sweep", 5), ("frame", 7)):
        a, b = _scan(cam, kind, index, **planar), _scan(cam, kind, index, **pattern)
        assert len(a) == len(b) > 500 and a.grid_shape == b.grid_shape and a.num_rays == b.num_rays, kind
        for f in FIELDS:
            assert np.array_equal(getattr(a, f), getattr(b, f)), (kind, f)
        tol = 0.0 if kind == "single" else 1e-15
        assert np.abs(a.timestamp - b.timestamp).max() <= tol, kind
        assert b.sensor_type == "pattern" and b.capabilities.column_angles == a.capabilities.column_angles


def _wall_scene(bpy):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    cam = add_camera(bpy)  # looks down world -Z: a floor at z = -5 is a wall 5 m ahead
    add_mesh(bpy, "Wall", [(-100, -100, -5), (100, -100, -5), (100, 100, -5), (-100, 100, -5)],
             [(0, 1, 2, 3)])
    return cam


def test_analytic_ranges_origins_and_times_to_a_wall(bpy_mod, tmp_path):
    cam = _wall_scene(bpy_mod)
    az = np.array([0.0, 20.0, -35.0, 10.0, 0.0, 45.0])
    el = np.array([0.0, 10.0, -5.0, 30.0, 0.0, -20.0])
    t = np.array([0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    ch = np.array([0, 1, 2, 0, 1, 2])
    org = np.array([[0.0, 0.0, 0.0], [0.5, 0.2, -0.1], [-1.0, 0.0, 0.3]])[ch]
    pfm.write_csv(tmp_path / "w.csv", az, el, t, ch, org, period=0.1)
    ov = {"sensor_type": "pattern", "pattern_file": str(tmp_path / "w.csv"), "time_model": "frame"}
    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    sc = Scanner(cam, overrides=ov, axes="ros")
    r = sc.scan(Packet("sweep", 4))[0]
    single = sc.scan(Packet("single", 2))[0]
    sc.close()
    a, e = np.deg2rad(az), np.deg2rad(el)
    rng = (5.0 - org[:, 0]) / (np.cos(e) * np.cos(a))  # along x (ahead) from the origin's x
    assert r.grid_shape == (3, 2) and len(r) == 6
    order = np.argsort(r.timestamp)
    assert np.allclose(r.range[order], rng, rtol=0, atol=1e-5)
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], 1)
    assert np.allclose(r.xyz[order], org + rng[:, None] * d, atol=1e-4)  # REP-103 points from the origins
    assert np.allclose(r.xyz[order][:, 0], 5.0, atol=1e-4)
    assert np.array_equal(r.timestamp[order], 4 * 0.1 + t)  # k P + t_i
    assert np.array_equal(r.ray_index[order], ch * 2 + np.array([0, 0, 0, 1, 1, 1]))
    assert np.array_equal(r.channel[order], ch)
    ft = 1.0 / 24.0  # bpy's default 24 fps
    assert np.array_equal(np.sort(single.timestamp), 2 * ft + t)
    # reported angles: the rays' own (BlenSor's azimuth psi, counter-clockwise from ahead)
    wrapped = np.mod(np.rad2deg(r.azimuth[order]) + 180.0, 360.0) - 180.0
    assert np.allclose(wrapped, az) and np.allclose(r.elevation[order], e)


def test_noise_is_seeded_and_a_scan_is_deterministic(bpy_mod, tmp_path):
    cam = _wall_scene(bpy_mod)
    ov = {"sensor_type": "pattern", "pattern_file": str(EX / "mems_lissajous.csv"), "noise_sigma": 0.02}
    a, b = _scan(cam, "sweep", 1, **ov, seed=3), _scan(cam, "sweep", 1, **ov, seed=3)
    c = _scan(cam, "sweep", 1, **ov, seed=4)
    assert len(a) > 4000
    for f in FIELDS + ("timestamp",):
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
    assert not np.array_equal(a.range_noisy, c.range_noisy) and np.array_equal(a.range, c.range)
    err = a.range_noisy - a.range
    assert abs(err.mean()) < 0.002 and 0.018 < err.std() < 0.022


def test_a_blend_relative_pattern_path_and_beam_divergence(bpy_mod, tmp_path):
    cam = _wall_scene(bpy_mod)
    shutil.copy(EX / "planar_2d.csv", tmp_path / "two_d.csv")
    b = cam.data.blensor
    b.sensor_type = "pattern"
    b.pattern.pattern_file = "//two_d.csv"
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)  # look along +Y, level: the 2D plane is horizontal
    add_mesh(bpy_mod, "Front", [(-50, 6, -5), (50, 6, -5), (50, 6, 5), (-50, 6, 5)], [(0, 1, 2, 3)])
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(tmp_path / "scene.blend"))
    old = os.getcwd()
    os.chdir("/")
    try:
        r = _scan(cam, "single", 1)
        # the 2D pattern's rays hit the front wall 6 m ahead at 6 / cos(azimuth)
        az = np.arctan2(np.sin(r.azimuth), np.cos(r.azimuth))
        ok = np.abs(az) < np.radians(80)
        assert ok.sum() > 500
        assert np.allclose(r.range[ok], 6.0 / np.cos(az[ok]), atol=1e-4)
        # the return physics as the other LiDARs: footprint sub-rays, one return per beam
        d = _scan(cam, "single", 1, beam_divergence=0.003, samples_per_beam=7)
        assert len(np.unique(d.ray_index)) == len(d) and abs(len(d) - len(r)) <= 4
    finally:
        os.chdir(old)


# ---------------------------------------------------------------------------------------
# the command line


def run(*args, cwd=None):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_cli_scans_the_demo_with_pattern_files_into_every_format(tmp_path):
    import laspy
    from pypcd4 import PointCloud
    from rosbags.highlevel import AnyReader
    out = tmp_path / "mems"
    args = ("scan", CROSSING, "--frames", "1-3", "--formats", "npz,pcd,las,rosbag2", "--seed", "2",
            "--set", "sensor_type=pattern", "--set", f"pattern_file={EX / 'mems_lissajous.csv'}",
            "--set", "noise_sigma=0.01")
    res = run(*args, "--out", out)
    assert res.returncode == 0, res.stderr
    man = json.loads((out / "manifest.json").read_text())
    # 20 Hz sweeps over frames 1-3 (t in [1/24, 4/24) s): sweeps 0..3
    assert man["packets"] == "sweep" and [f["frame"] for f in man["frames"]] == [0, 1, 2, 3]
    z = np.load(out / "scan00002.npz")
    assert np.array_equal(z["grid_shape"], [1, 5000]) and len(z["range"]) > 3000
    pf = pfm.load(str(EX / "mems_lissajous.csv"))
    assert np.array_equal(z["timestamp"], 2 * 0.05 + pf.time_s[z["ray_index"].astype(np.int64)])
    las = laspy.read(out / "clean" / "scan00002.las")
    assert len(las.points) == len(z["range"])
    pcd = PointCloud.from_path(out / "clean" / "scan00002.pcd")
    assert pcd.points == len(z["range"])
    with AnyReader([out / "rosbag2"]) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts["/blensor/points"] == 4 and "/blensor/scan" not in counts  # not one plane: no LaserScan
    again = run(*args, "--out", tmp_path / "again", "--quiet")
    assert again.returncode == 0, again.stderr
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        assert f.read_bytes() == (tmp_path / "again" / f.relative_to(out)).read_bytes(), f


def test_cli_2d_pattern_writes_laserscan_and_at128_scans(tmp_path):
    from rosbags.highlevel import AnyReader
    res = run("scan", CROSSING, "--frames", "2", "--out", tmp_path / "2d", "--formats", "npz,rosbag2",
              "--set", "sensor_type=pattern", "--set", f"pattern_file={EX / 'planar_2d.csv'}",
              "--set", "packets=frame", "--quiet")
    assert res.returncode == 0, res.stderr
    with AnyReader([tmp_path / "2d" / "rosbag2"]) as reader:
        scans = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()
                 if c.topic == "/blensor/scan"]
    assert scans
    m = scans[0]
    assert np.isclose(m.angle_increment, math.radians(0.25)) and np.isclose(m.scan_time, 0.025)
    assert np.isclose(m.time_increment, 0.025 / 1080)
    assert math.radians(-135.0) - 1e-6 <= m.angle_min and m.angle_max <= math.radians(135.0)
    res = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "at", "--formats", "npz",
              "--set", "sensor_type=pattern", "--set", f"pattern_file={EX / 'at128_hybrid.npy'}",
              "--set", "pattern_period=0.1", "--quiet")
    assert res.returncode == 0, res.stderr
    z = np.load(tmp_path / "at" / "scan00000.npz")
    assert np.array_equal(z["grid_shape"], [128, 1200]) and len(z["range"]) > 100_000
    assert z["timestamp"].max() < 0.1 and set(np.unique(z["channel"])) <= set(range(128))


def test_cli_a_period_below_the_floor_exits_2_with_one_line_and_no_files(tmp_path):
    # issue 23 review: '# period_s: 1e-9' and one firing planned 41,666,668 sweeps of frame 1
    tiny = csv(tmp_path, "# period_s: 1e-9\n" + H[16:] + "0,0,0,0\n", "tiny.csv")
    ok = csv(tmp_path, "# period_s: 1\n" + H[16:] + "0,0,0,0\n", "ok.csv")
    cases = ((tiny, (), "pattern_file must be a pattern file whose period_s is in [0.0001, 3600] s"),
             (ok, ("--set", "pattern_period=1e-9"), "pattern_period must be 0 (the file's own period) or in "
                                                    "[0.0001, 3600] s, got 1e-09"))
    for path, extra, needle in cases:
        res = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "o", "--set", "sensor_type=pattern",
                  "--set", f"pattern_file={path}", *extra)
        assert res.returncode == 2, res.stderr
        lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], res.stderr
        assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    # the floor itself is accepted: frame 1 ([1/24, 2/24) s) holds 417 repetitions of 1e-4 s
    assert PATTERN.check_budget(settings(ok, pattern_period=1e-4), 1, 1 / 24, "range", None) == 417


def test_cli_bad_pattern_file_exits_2_with_one_line_and_no_files(tmp_path):
    bad = csv(tmp_path, H + "0,0,0,0\n0,95,0.01,0\n", "bad.csv")
    for value, needle in ((bad, "line 4, column 2 (elevation_deg)"), (tmp_path / "nope.csv", "No such file")):
        res = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "o", "--set", "sensor_type=pattern",
                  "--set", f"pattern_file={value}")
        assert res.returncode == 2, res.stderr
        lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and "pattern_file must be" in lines[0] and needle in lines[0], res.stderr
        assert "Traceback" not in res.stderr
        assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    # '//' on the command line: relative to the .blend
    shutil.copy(CROSSING, tmp_path / "crossing.blend")
    shutil.copy(EX / "planar_2d.csv", tmp_path / "p2.csv")
    res = run("scan", tmp_path / "crossing.blend", "--frames", "1", "--out", tmp_path / "rel", "--set",
              "sensor_type=pattern", "--set", "pattern_file=//p2.csv", "--quiet", cwd="/")
    assert res.returncode == 0, res.stderr
    assert len(np.load(tmp_path / "rel" / "scan00001.npz")["range"]) > 500


def test_cli_a_pattern_firing_faster_than_the_bound_exits_2_with_one_line(tmp_path):
    # 10,000 firings every 1e-4 s: 1e8 rays/s, 20,000 packets of two scene frames
    rows = "".join(f"{i % 360 - 180},0,{i * 1e-8:.8f},0\n" for i in range(10_000))
    fast = csv(tmp_path, "# period_s: 0.0001\n" + H[16:] + rows, "fast.csv")
    res = run("scan", CROSSING, "--frames", "1-2", "--out", tmp_path / "o", "--set", "sensor_type=pattern",
              "--set", f"pattern_file={fast}")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "pattern_file must be a pattern firing at most 1e+07 rays a second" in lines[0]
    assert "10,000 firings every 0.0001 s = 1e+08 rays/s" in lines[0] and not (tmp_path / "o").exists()
    # the same file repeated every 1e-3 s (1e7 rays/s exactly) is within the bound
    res = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "o2", "--set", "sensor_type=pattern",
              "--set", f"pattern_file={fast}", "--set", "pattern_period=0.001", "--quiet")
    assert res.returncode == 0, res.stderr
