"""The range scan's packet plan (``jobs/plan.py``), without Blender: frames and time
intervals -> packets, the packet kind from the sensor's timing and the writers' needs,
and the one-line refusals."""
from __future__ import annotations

import subprocess
import sys

import pytest

from blensor_addon.core.capabilities import Capabilities, Timing, WriterNeeds
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.packets import Packet
from blensor_addon.jobs.plan import overlapping, plan_range, starting_in

FT = 1.0 / 24.0
SWEEP = Capabilities(Timing("sweep", period=0.1), grid=(64, 868))
IMAGE = Capabilities(Timing("exposure", exposure=0.0), grid=(480, 640), organized=True)
STREAM = Capabilities(Timing("stream", period=0.1), grid=None)
EVD = WriterNeeds(packets="frame")


def plan(caps=SWEEP, **kw):
    kw.setdefault("frame_start", 1)
    kw.setdefault("frame_end", 48)
    return plan_range(frame_time=FT, caps=caps, **kw)


def test_the_plan_imports_no_bpy():
    code = ("import sys, blensor_addon.jobs.plan; "
            "assert 'bpy' not in sys.modules, sorted(m for m in sys.modules if 'bpy' in m)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@pytest.mark.parametrize("frames,sweeps", [
    ([1], [0]),  # frame 1 = [0.0417, 0.0833) s lies in sweep 0 = [0, 0.1)
    (range(1, 2), [0]),
    ([3], [1]),  # [0.125, 0.1667): sweep 1
    ([2, 3], [0, 1]),  # [0.0833, 0.1667) overlaps sweeps 0 and 1
    (range(1, 49), list(range(0, 21))),  # [1/24, 49/24) s: sweeps 0 .. 20 (20 = [2.0, 2.1))
    ([24], [10]),  # frame 24 starts at exactly 1.0 s = sweep 10's start: sweep 9 ends there
    ([23], [9]),
])
def test_a_frame_range_selects_the_sweeps_that_overlap_it(frames, sweeps):
    p = plan(frames=frames, continuous=True)
    assert p.kind == "sweep" and p.packet_time == 0.1
    assert p.packets == tuple(Packet("sweep", k) for k in sweeps)
    assert p.requested == [min(frames), max(frames)]


def test_a_time_interval_selects_the_packets_that_start_in_it():
    assert plan(time=(0.05, 0.15)).indices == [1]
    assert plan(time=(0.1, 0.3)).indices == [1, 2]
    assert plan(time=(0.05, 0.15), packets="frame").indices == [2, 3]  # frames start at 2/24, 3/24
    with pytest.raises(SettingsError, match=r"time must be an interval in which a sweep starts"):
        plan(time=(0.11, 0.19))
    with pytest.raises(SettingsError, match=r"time must be an interval t0-t1"):
        plan(time=(0.3, 0.1))
    assert plan(time=(0.05, 0.15)).requested == {"time": [0.05, 0.15]}


def test_interval_helpers_at_the_edges():
    assert list(overlapping(0.1, 0.2, 0.1)) == [1]
    assert list(overlapping(0.1 + 1e-12, 0.2 - 1e-12, 0.1)) == [1]
    assert list(overlapping(-0.05, 0.05, 0.1)) == [-1, 0]
    assert list(starting_in(0.1, 0.2, 0.1)) == [1] and list(starting_in(0.11, 0.19, 0.1)) == []


def test_frame_packets_are_the_frames_and_the_frozen_model_defaults_to_them():
    p = plan(frames=[5, 3, 9], continuous=False)
    assert p.kind == "frame" and p.indices == [5, 3, 9] and p.packet_time == FT
    assert p.requested == [5, 3, 9]
    assert plan(frames=[1], caps=IMAGE).kind == "frame"
    with pytest.raises(SettingsError, match="contiguous range A-B with packets=sweep"):
        plan(frames=[1, 3])


def test_bad_frames_are_refused_in_one_line():
    for frames, needle in [([0], "within the scene's frame range 1-48"), ([], "frames must be"),
                           ([2, 2], "frame 2 more than once"), ([1.5], "frames must be"),
                           (range(40, 60), "40-59")]:
        with pytest.raises(SettingsError, match=needle):
            plan(frames=frames)


def test_the_frame_named_twice_is_the_first_one_met_again_and_no_frames_are_named_as_none():
    # [3, 1, 1, 3]: 1 is the first frame met a second time (3 comes back later)
    with pytest.raises(SettingsError) as e:
        plan(frames=[3, 1, 1, 3])
    assert str(e.value) == ("frames must be distinct integers within the scene's frame range 1-48, "
                            "got 'frame 1 more than once'")
    with pytest.raises(SettingsError) as e:
        plan(frames=None)
    assert str(e.value) == "frames must be integers within the scene's frame range 1-48, got None"


def test_evd_beside_sweep_formats_is_refused_naming_the_formats_and_the_setting():
    needs = {"npz": WriterNeeds(), "evd": EVD, "pcd": WriterNeeds()}
    with pytest.raises(SettingsError) as e:
        plan(frames=[1, 2], needs=needs)
    msg = str(e.value)
    assert msg.startswith("packets must be frame to write evd beside npz, pcd") and "\n" not in msg
    # the reconciling setting works, and EVD alone gets its frames
    assert plan(frames=[1, 2], needs=needs, packets="frame").indices == [1, 2]
    assert plan(frames=[1, 2], needs={"evd": EVD}).kind == "frame"
    # frozen frames: auto gives frames already, nothing to reconcile
    assert plan(frames=[1, 2], needs=needs, continuous=False).kind == "frame"
    with pytest.raises(SettingsError, match="packets must be frame or auto with evd"):
        plan(frames=[1, 2], needs=needs, packets="sweep")
    with pytest.raises(SettingsError, match="need per-frame packets, b need per-sweep|agree on packets"):
        plan(frames=[1, 2], needs={"evd": EVD, "b": WriterNeeds(packets="sweep")})


def test_image_sensors_and_grid_needs():
    with pytest.raises(SettingsError, match="packets must be frame or auto for sensor type 'tof'"):
        plan(frames=[1], caps=IMAGE, packets="sweep", sensor="tof")
    with pytest.raises(SettingsError, match=r"formats must be formats for image sensors \(exr needs"):
        plan(frames=[1], needs={"exr": WriterNeeds(image=True)}, sensor="rotating")
    assert plan(frames=[1], caps=IMAGE, needs={"exr": WriterNeeds(image=True)}).kind == "frame"
    with pytest.raises(SettingsError, match="range_image needs one"):
        plan(frames=[1], caps=STREAM, needs={"range_image": WriterNeeds(grid=True)})
    # a stream is cut into packets of its period, like sweeps
    assert plan(frames=[1, 2, 3], caps=STREAM).indices == [0, 1]


def test_the_scene_frames_a_plan_needs_cover_every_packet():
    p = plan(frames=[1])  # sweep 0: [0, 0.1) s = frames 0 .. 2.4: 0 .. 3 evaluated
    assert list(p.scene_frames()) == [0, 1, 2, 3]
    assert p.span(p.packets[0]) == (0.0, 0.1)


def test_a_plan_of_more_than_max_packets_is_refused_in_one_line_naming_the_period_setting(monkeypatch):
    # issue 23 review: a 1e-9 s pattern period planned 41,666,668 sweeps of one scene frame (and built
    # them all) instead of a one-line refusal
    from blensor_addon.jobs import plan as planning
    monkeypatch.setattr(planning, "MAX_PACKETS", 20)
    fast = Capabilities(Timing("sweep", period=FT / 20, setting="pattern_period"), grid=(1, 10))
    assert len(plan(frames=[1], caps=fast)) == 20  # [1/24, 2/24) s: sweeps 20 .. 39
    with pytest.raises(SettingsError) as e:
        plan(frames=[1, 2], caps=fast)  # 40 sweeps
    msg = str(e.value)
    assert "\n" not in msg and "'40 sweep packets'" in msg
    assert msg.startswith("pattern_period must be a value whose sweep period (0.00208333 s now) gives at "
                          "most 20 packets")
    assert len(plan(time=(FT, 2 * FT - 1e-6), caps=fast)) == 20  # sweeps 20 .. 39 start in it
    with pytest.raises(SettingsError, match=r"^pattern_period must be .*'21 sweep packets'"):
        plan(time=(FT, 2 * FT + 1e-6), caps=fast)  # sweeps 20 .. 40
    with pytest.raises(
        SettingsError, match=r"^frames must be at most 20 scene frames a run, got '21 frames'"
    ):
        plan(frames=range(1, 22), packets="frame")
    with pytest.raises(SettingsError, match=r"^packets must be a value whose sweep period"):
        plan(frames=[1, 2], caps=Capabilities(Timing("stream", period=FT / 20), grid=None))  # none named
    monkeypatch.undo()
    # the real limit, 10**7, refuses the reviewer's repro at once (a range, never a list of 41 M packets)
    assert planning.MAX_PACKETS == 10**7
    tiny = Capabilities(Timing("sweep", period=1e-9, setting="pattern_period"), grid=(1, 1))
    with pytest.raises(SettingsError, match=r"'41,666,668 sweep packets'"):
        plan(frames=[1], caps=tiny)


def test_every_swept_or_streamed_sensor_names_its_period_setting_whose_floor_is_1e_4_s(tmp_path):
    # issue 23 review: the pattern period had no floor; check every sweep/stream sensor's period setting
    from blensor_addon.core.sensors import SENSORS
    from blensor_addon.core.settings import meta_of
    one = tmp_path / "one.csv"
    one.write_text("# period_s: 0.1\nazimuth_deg,elevation_deg,time_s,channel\n0,0,0,0\n")
    base = {"pattern": {"pattern_file": str(one)}}
    named = {}
    for name, sensor in SENSORS.items():
        if sensor.organized:  # image sensors: one exposure per scene frame, no period
            continue
        caps = sensor.capabilities(sensor.settings(base.get(name, {})))
        assert caps.timing.kind in ("sweep", "stream"), name
        setting = caps.timing.setting
        named[name] = setting
        meta = meta_of(sensor.Settings, setting)
        if meta.unit == "Hz":  # a frequency: the period is 1 / value; its upper bound is the floor
            fastest = sensor.capabilities(sensor.settings({**base.get(name, {}), setting: meta.hi}))
            assert fastest.timing.period >= 1e-4, name
            with pytest.raises(SettingsError, match=f"^{setting} must be"):
                sensor.settings({**base.get(name, {}), setting: meta.hi * 1.001})
        else:
            assert meta.unit == "s", name
            ok = sensor.capabilities(sensor.settings({**base.get(name, {}), setting: 1e-4}))
            assert ok.timing.period == 1e-4
            with pytest.raises(SettingsError, match=rf"^{setting} must be 0 \(the file's own period\) or in "
                               r"\[0.0001, 3600\] s, got 1e-09"):
                sensor.settings({**base.get(name, {}), setting: 1e-9})
    assert named == {"rotating": "rotation_speed", "line": "rotation_speed", "planar": "rotation_speed",
                     "rosette": "report_frequency", "cylindrical": "rotation_frequency",
                     "pattern": "pattern_period"}


# -- every refusal's whole line, and the edges of the time arithmetic (tools/mutation.sh runs these
# against mutants of jobs/plan.py: a changed name, bound or word in a message fails here) ----------

RANGE = "integers within the scene's frame range 1-48"
SWEEPS = WriterNeeds(packets="sweep")


def sweep_caps(period: float, setting: str = "") -> Capabilities:
    """A sensor sweeping every ``period`` s, its period set by ``setting``."""
    return Capabilities(Timing("sweep", period=period, setting=setting), grid=(1, 1))

INTERVAL = "an interval t0-t1 (s) with t0 < t1 within the scene's frames, 0.0416667-2.04167 s"
SWEEP_EVD = {"evd": EVD, "npz": WriterNeeds(), "evd2": EVD}


@pytest.mark.parametrize("kw,message", [
    ({"frames": range(0, 5)}, f"frames must be {RANGE}, got '0-4'"),
    # a range's ends are checked before any list is built: 2**62 frames are refused at once
    ({"frames": range(40, 2**62)}, f"frames must be {RANGE}, got '40-4611686018427387903'"),
    ({"frames": []}, f"frames must be {RANGE}, got []"),
    ({"frames": 5}, f"frames must be {RANGE}, got 5"),
    ({"frames": [1.5]}, f"frames must be {RANGE}, got [1.5]"),
    ({"frames": [True]}, f"frames must be {RANGE}, got [True]"),
    ({"frames": [0, 3]}, f"frames must be {RANGE}, got '0-3'"),
    ({"frames": [3, 49]}, f"frames must be {RANGE}, got '3-49'"),
    ({"frames": [4, 3, 5, 3]}, f"frames must be distinct {RANGE}, got 'frame 3 more than once'"),
    ({"frames": [1, 3]}, "frames must be a contiguous range A-B with packets=sweep, got [1, 3]"),
    ({"time": (0.1,)}, f"time must be {INTERVAL}, got (0.1,)"),
    ({"time": "ab"}, f"time must be {INTERVAL}, got 'ab'"),
    ({"time": 5}, f"time must be {INTERVAL}, got 5"),
    ({"time": (0.3, 0.3)}, f"time must be {INTERVAL}, got '0.3-0.3'"),
    ({"time": (float("nan"), 0.3)}, f"time must be {INTERVAL}, got 'nan-0.3'"),
    ({"time": (0.1, float("inf"))}, f"time must be {INTERVAL}, got '0.1-inf'"),
    ({"time": (FT - 1e-6, 0.2)}, f"time must be {INTERVAL}, got '0.0416657-0.2'"),
    ({"time": (1.0, 49 * FT + 1e-6)}, f"time must be {INTERVAL}, got '1-2.04167'"),
    ({"time": (0.11, 0.19)},
     "time must be an interval in which a sweep starts (one every 0.1 s), got '0.11-0.19 s'"),
    ({"time": (0.05, 0.06), "packets": "frame"},
     "time must be an interval in which a frame starts (one every 0.0416667 s), got '0.05-0.06 s'"),
    ({"frames": [1], "packets": "bogus"}, "packets must be one of auto, frame, sweep, got 'bogus'"),
    ({"frames": [1], "caps": IMAGE, "packets": "sweep", "sensor": "tof"},
     "packets must be frame or auto for sensor type 'tof' (an image sensor takes one image per scene frame), "
     "got 'sweep'"),
    ({"frames": [1], "needs": {"evd": EVD, "npz": WriterNeeds(), "a": SWEEPS, "evd2": EVD}},
     "formats must be formats that agree on packets (write them in separate runs), got 'evd,evd2 need "
     "per-frame packets, a per-sweep'"),
    ({"frames": [1], "packets": "sweep", "needs": {"npz": WriterNeeds(), "evd": EVD}},
     "packets must be frame or auto with evd (it writes one output per scene frame), got 'sweep'"),
    ({"frames": [1], "packets": "frame", "needs": {"sw": SWEEPS}},
     "packets must be sweep or auto with sw (it writes one output per sweep), got 'frame'"),
    ({"frames": [1], "needs": SWEEP_EVD},
     "packets must be frame to write evd,evd2 beside npz (evd,evd2 needs one output per scene frame; with "
     "packets=auto the others would get sweeps; or write them in separate runs), got 'auto'"),
    ({"frames": [1], "continuous": False, "needs": {"sw": SWEEPS, "npz": WriterNeeds()}},
     "packets must be sweep to write sw beside npz (sw needs one output per sweep; with packets=auto the "
     "others would get frames; or write them in separate runs), got 'auto'"),
    ({"frames": [1], "needs": {"npz": None, "exr": WriterNeeds(image=True)}, "sensor": "line"},
     "formats must be formats for image sensors (exr needs an image sensor: one with an organized pixel "
     "grid), got 'exr with sensor type line'"),
    ({"frames": [1], "caps": STREAM, "needs": {"npz": None, "range_image": WriterNeeds(grid=True)},
      "sensor": "rosette"},
     "formats must be formats without a ray grid (range_image needs one; sensor type rosette has a pattern "
     "with no grid), got 'range_image with sensor type rosette'"),
    ({"frames": [1], "caps": sweep_caps(0.0), "packets": "sweep"},
     "packets must be frame for sensor type 'sensor' (it has no sweep period), got 'sweep'"),
    ({"frames": [1], "caps": sweep_caps(float("inf")), "packets": "sweep", "sensor": "x"},
     "packets must be frame for sensor type 'x' (it has no sweep period), got 'sweep'"),
    ({"frames": [1], "caps": sweep_caps(3600.5, "rotation_speed")},
     "rotation_speed must be a value whose sweep period is at most 3600 s, got 'a period of 3600.5 s'"),
    ({"frames": [1], "caps": sweep_caps(3600.5)},
     "packets must be a value whose sweep period is at most 3600 s, got 'a period of 3600.5 s'"),
    ({"frames": [1], "caps": sweep_caps(1e-9, "pattern_period")},
     "pattern_period must be a value whose sweep period (1e-09 s now) gives at most 10,000,000 packets in "
     "the requested span (or fewer frames), got '41,666,668 sweep packets'"),
])
def test_every_refusal_of_the_plan_is_its_whole_line(kw, message):
    with pytest.raises(SettingsError) as e:
        plan(**kw)
    assert str(e.value) == message


def test_a_raw_packet_format_needs_a_sensor_that_models_a_real_unit():
    from blensor_addon.io.packets import packet_presets
    with pytest.raises(SettingsError) as e:
        plan(frames=[1], needs={"pcap": WriterNeeds(device=True)}, sensor="rotating")
    assert str(e.value) == ("formats must be formats of real units' data (pcap needs a preset that models a "
                            f"real unit: {', '.join(packet_presets())}), "
                            "got 'pcap with sensor type rotating'")
    unit = Capabilities(Timing("sweep", period=0.1), grid=(16, 10), device=object())
    assert plan(frames=[1], caps=unit, needs={"pcap": WriterNeeds(device=True)}).indices == [0]


def test_a_writers_own_check_gets_the_sensors_capabilities_and_a_gridless_sensor_serves_plain_formats():
    seen = []
    assert plan(frames=[1], caps=STREAM, needs={"npz": WriterNeeds(check=seen.append)}).indices == [0]
    assert seen == [STREAM]


def test_frames_and_intervals_at_the_edges_of_the_scene_are_accepted():
    assert plan(frames=(f for f in [1, 2])).indices == [0, 1]  # any iterable of frames
    assert plan(frames=range(1, 49), packets="frame").indices == list(range(1, 49))
    # the ends are inclusive within 1e-9 s
    assert plan(time=(FT - 1e-9, 0.2)).indices == [1]
    assert plan(time=(1.95, 49 * FT + 1e-9)).indices == [20]
    assert plan(time=(1.95, 49 * FT)).indices == [20]
    # the longest sweep allowed, MAX_PACKET_TIME
    assert plan(frames=[1], caps=sweep_caps(3600.0)).indices == [0]


def test_the_tolerance_of_packet_edges_grows_with_the_time():
    # 1e-9 of a period near t = 0, 1e-9 of t beyond one period: float rounding of a late packet's start
    # (t / P a hair above k) still counts that packet as starting in [t0, t1)
    assert starting_in(0.1 * (1 + 1.7e-9), 0.15, 0.1) == range(2, 2)
    assert starting_in(0.1 * (1 + 0.7e-9), 0.15, 0.1) == range(1, 2)
    assert starting_in(1e5 + 5e-5, 1e5 + 0.35, 0.1) == range(10**6, 10**6 + 4)
    assert starting_in(1e5 + 5e-4, 1e5 + 0.35, 0.1) == range(10**6 + 1, 10**6 + 4)
    # an interval shorter than the tolerance still overlaps the packet covering its start
    assert overlapping(1.0, 1.0 + 1e-12, 0.1) == range(10, 11)


def test_a_plans_spans_and_scene_frames_at_exact_and_rounded_boundaries():
    p = plan(frames=[10])  # [10/24, 11/24) s lies in sweep 4 = [0.4, 0.5) s: frames 9.6 .. 12.0
    assert p.indices == [4] and p.span(Packet("sweep", 3)) == (3 * 0.1, 4 * 0.1)
    assert list(p.scene_frames()) == [9, 10, 11, 12, 13]
    # frame 6 of a frozen run ends at 7 * FT, which divides back to 6.999999999999999
    f = plan(frames=[6], continuous=False)
    assert f.span(f.packets[0]) == (6 * FT, 7 * FT) and list(f.scene_frames()) == [6, 7, 8]
