"""The examples run as written: ``examples/custom_sensor/run.py`` registers a sensor and a
writer from outside the package and scans the demo scene with them."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from conftest import ROOT


def test_custom_sensor_example_writes_its_format(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_sensor" / "run.py"), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "complete: 3 frames" in res.stdout
    names = sorted(p.name for p in (out / "xyz").iterdir())
    assert names == ["scan00001.xyz", "scan00002.xyz", "scan00003.xyz"]
    elevations = np.deg2rad([-8.0, -4.0, 0.0, 4.0])
    total = 0
    for frame in (1, 2, 3):
        rows = np.loadtxt(out / "xyz" / f"scan{frame:05d}.xyz", ndmin=2)
        z = np.load(out / f"scan{frame:05d}.npz")
        # the same scan: the writer's values are the npz fields, to its 6 decimals
        assert rows.shape == (len(z["range"]), 4) and rows.shape[0] > 50
        np.testing.assert_allclose(rows[:, :3], z["xyz"], atol=5e-7)
        np.testing.assert_allclose(rows[:, 3], z["range"], atol=5e-7)
        assert str(z["sensor_type"]) == "fan" and tuple(z["grid_shape"]) == (4, 121)
        # the fan's geometry in REP-103 axes (x ahead, y left, z up): rays from the sensor
        # origin, on the four planes, within 60 deg of ahead
        np.testing.assert_allclose(np.linalg.norm(rows[:, :3], axis=1), rows[:, 3], rtol=1e-5, atol=1e-5)
        el = np.arcsin(np.clip(z["xyz"][:, 2] / z["range"], -1, 1))
        assert np.abs(el[:, None] - elevations[None, :]).min(axis=1).max() < 1e-4
        assert np.all(np.abs(np.arctan2(z["xyz"][:, 1], z["xyz"][:, 0])) <= np.deg2rad(60.0) + 1e-5)
        assert np.all(z["range"] <= 60.0)
        total += rows.shape[0]
    assert f"{total} points" in res.stdout
