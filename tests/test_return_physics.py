"""The return physics' default path (defaults unchanged): with every new
setting at its default, a LiDAR traced beam by beam (Sensor.cast_beams: sub-rays, split
cast, echoes, weather, intensity) gives exactly the returns of the one-ray-per-beam path
that every sensor took before the return physics, array for array and byte for byte."""
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
    # clear glass returns near normal incidence only
    assert (new.object_id == pane).sum() < (old.object_id == pane).sum() // 10
    assert (new.object_id == counter).sum() > (old.object_id == counter).sum()


def test_samples_without_divergence_are_refused_in_one_line(crossing):
    from blensor_addon.core.errors import SettingsError
    with pytest.raises(SettingsError, match="samples_per_beam.*beam_divergence is 0"):
        blensor_addon.scan(crossing.camera, frame=5, samples_per_beam=7)


def test_a_dual_return_scan_goes_through_the_packets_to_velodyne_decoder(bpy_mod, crossing, tmp_path):
    # issue 22 review (the seams end to end): a VLP-16 scan of the demo with a 3 mrad beam, 7 sub-rays
    # and returns = dual; its pcap read back by velodyne-decoder gives, per beam, the last return in
    # the even block and the stronger (by received power) of the two in the odd one
    from test_pcap import decode, write_pcap

    from blensor_addon.io.packets import return_power
    r = blensor_addon.scan(crossing.camera, frame=5, preset="vlp16", angle_resolution=0.2,
                           rotation_speed=10.0, samples_per_beam=7, beam_divergence=0.003, returns="dual",
                           noise_sigma=0.0, bias_distribution="gaussian", bias_sigma=0.0)
    two = r.number_of_returns == 2
    assert two.sum() > 100 and (~two).sum() > 1000  # edges give two echoes, flat surfaces one
    write_pcap(tmp_path, [r], points="clean")
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    kind = dec["return_type"]  # velodyne-decoder's ReturnMode: 1 STRONGEST, 2 LAST, 3 BOTH
    assert (kind == 3).sum() == (~two).sum()
    assert (kind == 1).sum() == (kind == 2).sum() == two.sum() // 2
    # a dual pair is (last, strongest) or, when the strongest is the last, (last, second strongest):
    # with two returns the odd block (STRONGEST) holds the nearer one, the even block (LAST) the farther
    dist = np.sqrt(dec["x"] ** 2 + dec["y"] ** 2 + dec["z"] ** 2)  # a VLP-16 has no beam offsets
    for k, number in ((1, 1), (2, 2)):
        want = np.sort(np.round(r.range[two & (r.return_number == number)] / 0.002).astype(np.int64))
        got = np.sort(np.round(dist[kind == k] / 0.002).astype(np.int64))
        assert np.abs(got - want).max() <= 1
    # and the scan's dual selection kept, of every beam, its strongest detected echo (by received power)
    from blensor_addon.core.sensors import beam as beam_mod
    all_r = blensor_addon.scan(crossing.camera, frame=5, preset="vlp16", angle_resolution=0.2,
                               rotation_speed=10.0, samples_per_beam=7, beam_divergence=0.003, returns="all",
                               max_returns=15, noise_sigma=0.0, bias_distribution="gaussian", bias_sigma=0.0)
    pa = beam_mod.power(all_r.intensity, all_r.range)
    best = {}
    for i, b in enumerate(all_r.ray_index.tolist()):
        if b not in best or pa[i] > pa[best[b]]:
            best[b] = i
    kept: dict = {}
    for b, rr in zip(r.ray_index.tolist(), r.range.tolist()):
        kept.setdefault(b, []).append(rr)
    assert len(best) > 20000
    assert all(any(abs(float(all_r.range[i]) - x) < 1e-4 for x in kept.get(b, [])) for b, i in best.items())
