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
