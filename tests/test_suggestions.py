"""A mistyped name (a ``--set`` setting, a format, an ``--option`` key, a camera, a preset)
ends as exit 2 with one line that shows the name typed and the closest name (difflib)."""
from __future__ import annotations

import pytest

from conftest import CROSSING
from test_faults import one_error_line, run, visible_files

from blensor_addon.core.errors import SettingsError, did_you_mean

TYPOS = [
    (("scan", "--set", "rotaton_speed=5"),
     "--set rotaton_speed must be a setting of sensor type 'rotating': ",
     "got 'rotaton_speed'; did you mean 'rotation_speed'?"),
    (("scan", "--formats", "npz,pcdd"), "--formats must be a comma-separated subset of ",
     "got 'npz,pcdd'; did you mean 'pcd' for 'pcdd'?"),
    (("scan", "--formats", "kiti"), "--formats must be ", "got 'kiti'; did you mean 'kitti'?"),
    (("scan", "--formats", "pcd", "--option", "pcd.asci=1"), "pcd.asci must be one of the options of pcd",
     "got 'pcd.asci=1'; did you mean 'pcd.ascii'?"),
    (("scan", "--option", "pdc.ascii=1"), "--option must be FORMAT.OPTION=VALUE",
     "got 'pdc.ascii'; did you mean 'pcd' for 'pdc'?"),
    (("scan", "--camera", "Velodyn"), "--camera must be one of the scene's cameras: Velodyne",
     "got 'Velodyn'; did you mean 'Velodyne'?"),
    (("scan", "--set", "preset=vlp-16"), "preset must be one of hdl64e_s2, ",
     "got 'vlp-16'; did you mean 'vlp16'?"),
    (("depth", "--formats", "exrr"), "--formats must be a comma-separated subset of exr,",
     "got 'exrr'; did you mean 'exr'?"),
    (("motion", "--formats", "tumm"), "--formats must be a comma-separated subset of blensor,",
     "got 'tumm'; did you mean 'tum'?"),
]


@pytest.mark.parametrize("args, start, end", TYPOS, ids=[" ".join(t[0]) for t in TYPOS])
def test_a_mistyped_name_is_shown_with_the_closest_name(tmp_path, args, start, end):
    out = tmp_path / "out"
    res = run(*args, CROSSING, "--frames", "1", "--out", out) if args[0] != "motion" else \
        run(*args, CROSSING, "--out", out)
    line = one_error_line(res)
    assert res.returncode == 2
    assert line.startswith("blensor: error: " + start) and line.endswith(end), line
    assert not out.exists() or visible_files(out) == []


def test_no_suggestion_when_nothing_is_close():
    assert did_you_mean("zzzz", ["npz", "pcd"]) == ""
    assert str(SettingsError("--formats", "one of npz", "zzzz", did_you_mean("zzzz", ["npz"]))) \
        == "--formats must be one of npz, got 'zzzz'"


def test_the_python_api_suggests_too():
    from blensor_addon.core.sensors import get_sensor
    with pytest.raises(SettingsError) as e:
        get_sensor("rotating").settings({"rotaton_speed": 5.0})
    assert str(e.value).endswith("; did you mean 'rotation_speed'?")


def test_a_mistyped_sensor_type_is_suggested(tmp_path):
    res = run("scan", CROSSING, "--set", "sensor_type=rotatin", "--frames", "1", "--out", tmp_path / "o")
    line = one_error_line(res)
    assert res.returncode == 2 and line.startswith("blensor: error: sensor_type must be one of rotating, ")
    assert line.endswith("got 'rotatin'; did you mean 'rotating'?"), line
