"""The layers below the scene type-check: ``mypy --strict`` over core/, raycast/, io/, jobs/
and process/ (configuration: pyproject.toml, ``[tool.mypy]``; docs/architecture.md, "Types").

mypy rather than pyright: it is a PyPI wheel that runs in the test venv with no Node.js,
and numpy 1.26 ships the stubs it reads (``numpy.typing.NDArray``). A change that adds an
untyped function, an ``Any`` leaking out of a typed one or a wrong argument type fails here.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_strict_is_clean_on_the_layers_below_the_scene(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert "No module named mypy" not in out, "mypy is a test dependency (pyproject.toml, [test])"
    assert proc.returncode == 0, out[-6000:]
    assert "Success: no issues found" in out


#: core's own modules and the small sensor modules beside the sensors (settings, results,
#: materials, axes, time base, plug-in registries; the return, weather and intensity
#: stages, calibration tables, ray patterns, the scene protocols, the registry)
CORE_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "blensor_addon" / "core").glob("*.py")) + [
    f"blensor_addon/core/sensors/{name}.py" for name in (
        "__init__", "calibration", "returns", "weather", "intensity", "raypattern", "protocols",
        "rotating_presets")]


def test_mypy_strict_is_clean_on_core_modules(tmp_path):
    """The modules every layer imports (ScanResult, the settings schema, the registries)
    type-check on their own: their errors are reported, not those of the modules they
    import (``--follow-imports=silent``), so a change to one of them fails here by name."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports=silent", *CORE_MODULES],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert len(CORE_MODULES) >= 20 and "blensor_addon/core/result.py" in CORE_MODULES
    assert proc.returncode == 0, out[-6000:]
    assert f"Success: no issues found in {len(CORE_MODULES)} source files" in out


#: the ray casting layer (the native library's ctypes seam, the BVHTree fallback, motion,
#: the mirror and glass tracer) and the sensors that make their rays from a scan pattern
RAYCAST_AND_PATTERN_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "blensor_addon" / "raycast")
                                     .glob("*.py")) + [
    f"blensor_addon/core/sensors/{name}.py" for name in (
        "pattern_file", "pattern", "rotating", "rosette", "cylindrical", "line", "planar")]


def test_mypy_strict_is_clean_on_raycast_and_the_scan_pattern_sensors(tmp_path):
    """raycast/ (whose native.py types every call into the C library) and the scan-pattern
    sensors type-check on their own, as :func:`test_mypy_strict_is_clean_on_core_modules`
    checks core's modules: their errors by name, not those of what they import."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports=silent", *RAYCAST_AND_PATTERN_MODULES],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert len(RAYCAST_AND_PATTERN_MODULES) == 13
    assert "blensor_addon/raycast/native.py" in RAYCAST_AND_PATTERN_MODULES
    assert proc.returncode == 0, out[-6000:]
    assert f"Success: no issues found in {len(RAYCAST_AND_PATTERN_MODULES)} source files" in out


#: the sensor core: the interface and its one detect-and-assemble path, the shared physics,
#: beam divergence and echoes, and the image sensors (Kinect, depth camera, ToF)
SENSOR_CORE_MODULES = [f"blensor_addon/core/sensors/{name}.py" for name in (
    "sensor", "physics", "beam", "kinect", "depth", "tof")]


def test_mypy_strict_is_clean_on_the_sensor_core(tmp_path):
    """The sensor interface (generic in its settings class), physics.py, beam.py and the
    image sensors type-check on their own, their errors by name (as
    :func:`test_mypy_strict_is_clean_on_core_modules`)."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports=silent", *SENSOR_CORE_MODULES],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"Success: no issues found in {len(SENSOR_CORE_MODULES)} source files" in out
