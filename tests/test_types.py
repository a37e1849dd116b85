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
