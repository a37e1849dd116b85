"""The return physics' default path (issue 22, "Defaults unchanged"): with every new
setting at its default, a LiDAR traced beam by beam (Sensor.trace_beams: sub-rays, split
cast, echoes, weather, intensity) gives exactly the returns of the one-ray-per-beam path
that every sensor took before issue 22, array for array and byte for byte."""
from __future__ import annotations

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.result import FIELDS
from blensor_addon.core.sensors import sensor as sensor_mod
from conftest import without_glass

BACKENDS = ("native", "bvhtree")


class _NotReturnSettings:
    """Stands in for ReturnSettings so that no settings object is one: Sensor.trace takes
    the pre-issue-22 path."""


def _scan_both(cam, monkeypatch, **kw):
    new = blensor_addon.scan(cam, **kw)
    with monkeypatch.context() as m:
        m.setattr(sensor_mod, "ReturnSettings", _NotReturnSettings)
        old = blensor_addon.scan(cam, **kw)
    return new, old


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("overrides", [
    {},  # the demo's HDL-64E S2 with its noise and bias table
    {"return_model": "linear"},
    {"sensor_type": "line"},
    {"sensor_type": "planar"},
], ids=["rotating", "linear-model", "line", "planar"])
def test_default_return_physics_is_the_one_ray_path_byte_for_byte(bpy_mod, crossing, monkeypatch, backend,
                                                                  overrides):
    without_glass(bpy_mod)  # the pre-issue path treats glass as opaque: compare on opaque surfaces
    cam = crossing.camera
    new, old = _scan_both(cam, monkeypatch, backend=backend, frame=5, **overrides)
    assert len(new) == len(old) > 500
    for name in FIELDS:
        a, b = getattr(new, name), getattr(old, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert sorted(new.extra) == sorted(old.extra)
    assert "return_number" not in new.extra  # one return per beam: not stored
    assert new.num_rays == old.num_rays


def test_multi_return_settings_declare_the_return_fields(crossing):
    cam = crossing.camera
    res = blensor_addon.scan(cam, frame=5, returns="dual")
    assert {"return_number", "number_of_returns"} <= set(res.capabilities.fields)
    assert res.return_number.dtype == np.uint8 and (res.return_number >= 1).all()
    assert (res.return_number <= res.number_of_returns).all()
    single = blensor_addon.scan(cam, frame=5)
    assert "return_number" not in single.capabilities.fields


def test_the_demo_window_lets_the_beams_through_to_the_room(bpy_mod, crossing, monkeypatch):
    # issue 22, section 3: the demo's shop front is a Glass BSDF pane; the beam path sees the counter
    # behind it, the pre-issue path stopped at the pane as if it were a wall
    cam = crossing.camera
    ids = {o.name: i + 1 for i, o in enumerate(sorted(
        (o for o in bpy_mod.data.objects if not o.get("blensor_scan")), key=lambda o: o.name_full))}
    new, old = _scan_both(cam, monkeypatch, frame=5)
    pane, counter = ids["ShopGlass"], ids["ShopCounter"]
    assert (old.object_id == pane).sum() > 50
    assert (new.object_id == pane).sum() < (old.object_id == pane).sum() // 10  # clear glass: near normal only
    assert (new.object_id == counter).sum() > (old.object_id == counter).sum()


def test_samples_without_divergence_are_refused_in_one_line(crossing):
    from blensor_addon.core.errors import SettingsError
    with pytest.raises(SettingsError, match="samples_per_beam.*beam_divergence is 0"):
        blensor_addon.scan(crossing.camera, frame=5, samples_per_beam=7)
