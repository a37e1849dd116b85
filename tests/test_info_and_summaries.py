"""What ``blensor info`` and the commands' summaries print: a stored float32 as its shortest
decimal, counts with the right number ("1 sweep", "2 sweeps")."""
from __future__ import annotations

import re

import numpy as np

from conftest import CROSSING
from test_faults import run

from blensor_addon.cli import counted, info_value


def test_info_prints_the_shortest_decimal_of_each_stored_float():
    res = run("info", CROSSING)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "  time_step: 0.0003" in lines and "  angle_resolution: 0.1728" in lines, res.stdout
    noisy = [ln for ln in lines if re.search(r"\d\.\d*(0000|9999)\d+", ln)]
    assert noisy == [], noisy


def test_info_value_gives_the_float32_back():
    for v in (0.075, 0.1728, 3e-4, 905.0, 1e-7, 123456.7, -24.85):
        stored = float(np.float32(v))
        shown = info_value(stored)
        assert np.float32(shown) == np.float32(stored) and len(repr(shown)) <= len(repr(v)) + 1, (v, shown)
    assert info_value(0.1) == 0.1 and info_value(float("inf")) == float("inf")  # (0.1: a float64 value)
    assert info_value((float(np.float32(0.075)), 2)) == (0.075, 2) and info_value("text") == "text"


def test_one_of_a_thing_is_singular(tmp_path):
    assert (counted(1, "sweep"), counted(2, "sweep"), counted(0, "frame")) == \
        ("1 sweep", "2 sweeps", "0 frames")
    scan = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "s", "--quiet")
    assert scan.returncode == 0 and re.fullmatch(r"blensor: 1 sweep, \d+ points, [\d.]+ s \(\w+\) -> .+\n",
                                                 scan.stdout), scan.stdout
    motion = run("motion", CROSSING, "--frames", "1", "--out", tmp_path / "m", "--quiet")
    assert motion.returncode == 0 and motion.stdout.startswith("blensor: motion of 1 frame, "), motion.stdout
    depth = run("depth", CROSSING, "--frames", "1", "--out", tmp_path / "d", "--quiet")
    assert depth.returncode == 0 and depth.stdout.startswith("blensor: 1 depth map (exr), "), depth.stdout
