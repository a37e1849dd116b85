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

PACKAGE = ROOT / "blensor_addon"
CHECKED = ("core", "raycast", "io", "jobs", "process")
#: ``# type: ignore[code]`` comments the checked layers may hold, each with its reason beside it
#: (io/atomic.py: numpy 1.26 declares ndarray's buffer protocol for Python 3.12+ only;
#: io/formats/las.py: a subclass of laspy's untyped LazrsPointWriter)
MAX_IGNORES = 2


def test_mypy_strict_is_clean_on_the_layers_below_the_scene(tmp_path):
    """One ``mypy --strict`` run over every module of the checked layers: no error, and
    every module of those folders counted (a folder dropped from the configuration, or a
    module mypy cannot find, changes the count)."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert "No module named mypy" not in out, "mypy is a test dependency (pyproject.toml, [test])"
    assert proc.returncode == 0, out[-6000:]
    modules = [p for d in CHECKED for p in (PACKAGE / d).rglob("*.py")]
    assert f"Success: no issues found in {len(modules)} source files" in out, out[-2000:]


def test_the_checked_layers_silence_the_checker_only_where_a_reason_is_given():
    """The configuration is strict and ignores no checked module's errors, and the few
    ``# type: ignore`` comments name their error code."""
    import tomllib
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["strict"] is True
    assert sorted(conf["files"]) == sorted(f"blensor_addon/{d}" for d in CHECKED)
    for over in conf.get("overrides", []):
        if over.get("ignore_errors"):
            assert not any(m.startswith(f"blensor_addon.{d}") for m in over["module"] for d in CHECKED)
    ignores = [(p.name, line) for d in CHECKED for p in (PACKAGE / d).rglob("*.py")
               for line in p.read_text().splitlines() if "type: ignore" in line]
    assert all("type: ignore[" in line for _, line in ignores), ignores
    assert len(ignores) <= MAX_IGNORES, ignores
