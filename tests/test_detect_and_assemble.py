"""One detection and assembly path for every way a sensor casts (core/sensors/sensor.py:
Sensor.cast_returns gives a Traced, Sensor.detect_and_assemble turns it into the result):
the one-ray sensors (ToF), the return physics' beams (rotating LiDAR) and the Kinect's two
casts all end in the one method, on a numpy-only wall (no Blender)."""
from __future__ import annotations

import numpy as np
import pytest
from fake_context import FakeContext, one_object_hits

from blensor_addon.core.sensors import SENSORS
from blensor_addon.core.sensors.sensor import Sensor, Traced

WALL_Z = -5.0  # the wall: the plane z = -5 m of the sensor frame, facing the sensor


class WallContext(FakeContext):
    """A ScanContext of one wall, sensor frame = world frame."""

    def cast(self, origins, directions, max_range, max_bounces, times=None, split=False, rng=None,
             wavelength=None, bundle=1, acceptance=None, lobes=False):
        d = np.asarray(directions, dtype=np.float64)
        n = d.shape[0]
        o = np.zeros((n, 3)) if origins is None else np.asarray(origins, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (WALL_Z - o[:, 2]) / d[:, 2]
        hit = (d[:, 2] < 0) & (t <= max_range)
        return one_object_hits(np.where(hit, t, np.inf), hit, 0.8, np.abs(d[:, 2]),
                               np.tile(np.float32([0, 0, 1]), (n, 1)), d.astype(np.float32))


VARIANTS = {  # sensor type -> (settings, the cast method its type takes)
    "tof": ({}, "cast_rays"),
    "rotating": ({"preset": "vlp16", "angle_resolution": 2.0, "rotation_speed": 10.0}, "cast_beams"),
    "kinect": ({"width": 64, "height": 48}, "cast_returns"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_cast_variant_ends_in_the_one_detect_and_assemble(name, monkeypatch):
    sensor = SENSORS[name]
    values, variant = VARIANTS[name]
    s = sensor.settings({**sensor.preset_values(values.get("preset", next(iter(sensor.presets)))), **values})
    calls = []
    one_path = Sensor.detect_and_assemble

    def spy(self, s_, ctx, traced, **kw):
        assert isinstance(traced, Traced)
        calls.append(traced)
        return one_path(self, s_, ctx, traced, **kw)
    monkeypatch.setattr(Sensor, "detect_and_assemble", spy)
    result = sensor.scan(s, WallContext(), frame=1, frame_time=0.1, mode="single")
    assert len(calls) == 1
    traced = calls[0]
    # only the Kinect casts its own way; the others take the base class's cast_rays or cast_beams
    assert (type(sensor).cast_returns is not Sensor.cast_returns) == (variant == "cast_returns")
    assert (traced.returns is not None) == (variant == "cast_beams")
    assert (traced.measured is not None) == (name == "kinect")
    assert len(result) > 100 and result.num_rays == traced.num_rays
    assert result.grid_shape == tuple(traced.grid)
    # every point lies on the wall (the noisy ones near it)
    np.testing.assert_allclose(result.xyz[:, 2], WALL_Z, atol=1e-4)
    if name != "rotating":  # (the VLP-16's beams leave from origins off the axis)
        np.testing.assert_allclose(np.linalg.norm(result.xyz, axis=1), result.range, rtol=1e-6)
    if name == "kinect":  # the measured depths are the device's: Z = f b subpixel / k, k an integer
        code = s.focal_px * s.baseline * s.subpixel / -result.xyz_noisy[:, 2].astype(np.float64)
        np.testing.assert_allclose(code, np.round(code), atol=1e-3)
    else:
        assert np.abs(result.xyz_noisy[:, 2] - WALL_Z).max() < 0.2
    assert result.ring.dtype == np.uint16


def test_the_cast_s_rows_are_freed_before_the_result_is_assembled(monkeypatch):
    """One copy of a scan's returns at a time: the receiver's detected rows (the presets'
    radiometric model) replace the cast's, which nothing holds once assembly begins (the
    cast's pattern and returns freed; benchmarks/startup.py measures the peak per 10^6 rays)."""
    import gc
    import weakref

    from blensor_addon.core.sensors import sensor as sensor_module
    sensor = SENSORS["rotating"]
    s = sensor.settings({**sensor.preset_values("hdl64e_s2"), "angle_resolution": 2.0})
    assert s.return_model == "radiometric"
    cast_rows: list = []
    alive_at_assembly: list = []
    cast_returns, assemble = Sensor.cast_returns, sensor_module.assemble

    def spy_cast(self, *args, **kw):
        traced = cast_returns(self, *args, **kw)
        cast_rows.extend([weakref.ref(traced.pattern), weakref.ref(traced.returns)])
        return traced

    def spy_assemble(*args, **kw):
        gc.collect()
        alive_at_assembly.extend(ref() is not None for ref in cast_rows)
        return assemble(*args, **kw)
    monkeypatch.setattr(Sensor, "cast_returns", spy_cast)
    monkeypatch.setattr(sensor_module, "assemble", spy_assemble)
    result = sensor.scan(s, WallContext(), frame=1, frame_time=0.1, mode="single")
    assert len(result) > 1000
    assert alive_at_assembly == [False, False]  # (the cast's pattern and returns)
