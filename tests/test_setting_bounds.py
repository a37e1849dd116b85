"""Settings whose value would make a plan or a sweep absurdly long (hours of scene
evaluation before the first ray, or a column list of terabytes) are refused in one line
before any work starts, and the message states the bound."""
from __future__ import annotations

import math
import subprocess

import pytest

from blensor_addon.core.capabilities import Capabilities, Timing
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors.cylindrical import CylindricalSettings
from blensor_addon.core.sensors.line import LineSettings
from blensor_addon.core.sensors.planar import PlanarSettings
from blensor_addon.core.sensors.rotating import LidarSettings
from blensor_addon.core.settings import MIN_SWEEP_RATE, meta_of
from blensor_addon.jobs.plan import MAX_PACKET_TIME, plan_range
from conftest import CROSSING
from test_faults import BLENSOR, one_error_line


@pytest.mark.parametrize("cls, name", [(LidarSettings, "rotation_speed"), (LineSettings, "rotation_speed"),
                                       (PlanarSettings, "rotation_speed"),
                                       (CylindricalSettings, "rotation_frequency")])
def test_a_sweep_rate_below_the_slowest_is_refused_naming_the_bound(cls, name):
    meta = meta_of(cls, name)
    assert meta.lo == MIN_SWEEP_RATE == 0.01 and not meta.lo_open  # the metadata states it
    with pytest.raises(SettingsError) as err:
        cls(**{name: 1e-9}).validate()
    assert str(err.value) == f"{name} must be in [0.01, 1000] Hz, got 1e-09"
    cls(**{name: MIN_SWEEP_RATE}).validate()  # the bound itself is a valid value


def test_a_sweep_of_more_rays_than_the_budget_is_refused_before_its_columns_are_listed():
    # the line scanner listed 85 deg / 1e-9 deg columns (633 GiB) before the ray budget looked
    with pytest.raises(SettingsError, match=r"^angle_resolution must be at least [0-9.e+-]+ deg at these "
                                            r"settings \(340,000,000,000 rays per scan; the limit is"):
        LineSettings(angle_resolution=1e-9).validate()
    # a cylindrical revolution is points_per_second / rotation_frequency rays: 1e10 here
    with pytest.raises(SettingsError, match=r"^points_per_second must be at most [0-9.e+-]+ Hz at these "
                                            r"settings \(10,000,000,000 rays per scan"):
        CylindricalSettings(points_per_second=1e8, rotation_frequency=0.01, channels=1).validate()
    CylindricalSettings().validate()


def test_a_plan_whose_sweep_lasts_longer_than_an_hour_is_refused():
    caps = Capabilities(Timing("sweep", period=1e9, setting="rotation_speed"), grid=(64, 2083))
    with pytest.raises(SettingsError) as err:
        plan_range(frame_start=1, frame_end=48, frame_time=1 / 24, caps=caps, frames=range(1, 3))
    assert str(err.value) == ("rotation_speed must be a value whose sweep period is at most 3600 s, "
                              "got 'a period of 1e+09 s'")
    assert MAX_PACKET_TIME == 3600.0
    ok = Capabilities(Timing("sweep", period=MAX_PACKET_TIME, setting="rotation_speed"), grid=(64, 2083))
    plan = plan_range(frame_start=1, frame_end=48, frame_time=1 / 24, caps=ok, frames=range(1, 3))
    assert plan.indices == [0] and math.isclose(plan.packet_time, 3600.0)


def test_a_tiny_rotation_speed_on_the_command_line_is_one_line_at_once(tmp_path):
    # no answer after 180 s before: the transform pre-check walked the 2.4e10 scene frames
    # of one 1e9 s sweep
    out = tmp_path / "o"
    try:
        res = subprocess.run([BLENSOR, "scan", str(CROSSING), "--frames", "1-2", "--out", str(out), "--set",
                              "rotation_speed=1e-9", "--quiet"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("blensor scan --set rotation_speed=1e-9 gave no answer in 120 s")
    assert res.returncode == 2, res.stderr
    assert one_error_line(res) == "blensor: error: rotation_speed must be in [0.01, 1000] Hz, got 1e-09"
    assert not out.exists()

