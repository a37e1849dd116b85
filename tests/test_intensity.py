"""Intensity models (docs/physics.md): ``lambert`` (seed 002 Eq. 4, unchanged) and
``radar`` (the laser radar equation's received power, rho cos(theta) T / r^2, normalised
at 10 m), asserted on real scans of Blender walls."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.sensors import intensity
from blensor_addon.core.sensors.returns import Returns, ReturnSettings
from conftest import add_camera, add_mesh, generic_sensor, quad


def _wall_scan(bpy, H, model, **kw):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    v, f = quad(-400, 400, -80, 80, -H)
    add_mesh(bpy, "Wall", v, f)
    cam = add_camera(bpy)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.25, max_range=100.0,
                   intensity_model=model, **kw)
    return blensor_addon.scan(cam, axes="blensor")


def _theta(r):
    k = np.round(np.mod(np.rad2deg(r.azimuth.astype(np.float64)) + 60.0, 360.0) / 0.25)
    return np.deg2rad(-60.0 + 0.25 * k)


def test_radar_intensity_falls_with_range_squared(bpy_mod, empty_scene):
    # the same wall at 10 m and 20 m: 4x less received power at normal incidence (1/r^2);
    # the lambert intensity (a calibrated reflectivity) does not change
    near = _wall_scan(bpy_mod, 10.0, "radar")
    far = _wall_scan(bpy_mod, 20.0, "radar")
    i0 = lambda r: r.intensity[np.argmin(np.abs(_theta(r)))]  # noqa: E731
    assert i0(near) == pytest.approx(0.8, rel=1e-6)  # 100 % at 10 m would be 1; the default rho is 0.8
    assert i0(near) / i0(far) == pytest.approx(4.0, rel=1e-6)
    ln = _wall_scan(bpy_mod, 10.0, "lambert")
    lf = _wall_scan(bpy_mod, 20.0, "lambert")
    np.testing.assert_array_equal(ln.intensity, lf.intensity)


def test_radar_intensity_follows_cos_over_r_squared(bpy_mod, empty_scene):
    # a wall 12 m away scanned over +-60 deg: rho cos(theta) (10 / r)^2 with r = H / cos(theta)
    r = _wall_scan(bpy_mod, 12.0, "radar")
    th = _theta(r)
    np.testing.assert_allclose(r.intensity, 0.8 * np.cos(th) * (10.0 / (12.0 / np.cos(th))) ** 2, rtol=2e-6)
    lam = _wall_scan(bpy_mod, 12.0, "lambert")
    np.testing.assert_allclose(lam.intensity, 0.8 * np.cos(_theta(lam)), atol=1e-6)  # seed 002 Eq. 4


def test_radar_intensity_carries_the_fog_transmission(bpy_mod, empty_scene):
    clear = _wall_scan(bpy_mod, 15.0, "radar")
    fog = _wall_scan(bpy_mod, 15.0, "radar", weather="fog", fog_visibility=300.0)
    alpha = -math.log(0.05) / 300.0
    assert len(fog) == len(clear)
    np.testing.assert_allclose(fog.intensity, clear.intensity * np.exp(-2 * alpha * clear.range), rtol=2e-6)


def test_radar_intensity_clips_to_the_device_units():
    # near targets saturate: at 1 m a white wall gives 100x the reference power; an Ouster's
    # 16-bit SIGNAL (100 x intensity) holds up to 655.35, the 0..1 layouts 1
    k = 3
    ret = Returns(beam=np.arange(k), row=np.arange(k), range=np.array([1.0, 10.0, 0.1]),
                  reflectivity=np.ones(k, np.float32), returned=np.ones(k), energy=np.ones(k),
                  return_number=np.ones(k, np.uint8), number_of_returns=np.ones(k, np.uint8),
                  weather=np.zeros(k, bool))
    s = ReturnSettings(intensity_model="radar")
    np.testing.assert_allclose(intensity.intensity(s, ret, ret.range, None), [1.0, 1.0, 1.0])
    ouster = SimpleNamespace(vendor="ouster")
    np.testing.assert_allclose(intensity.intensity(s, ret, ret.range, ouster), [100.0, 1.0, 655.35])
    assert intensity.intensity(ReturnSettings(intensity_model="lambert"), ret, ret.range) is ret.energy
