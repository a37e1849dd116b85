"""What README.md and docs/formats.md say of poses and of the panel's scan meshes is what the
code does: the quoted poses are the commands' own output."""
from __future__ import annotations

import re

import numpy as np

from conftest import CROSSING, ROOT
from test_faults import run

FORMATS_MD = ROOT / "docs" / "formats.md"
README = ROOT / "README.md"


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _quoted_poses(section: str) -> list:
    """The TUM lines quoted in backticks (t x y z qx qy qz qw), as float arrays."""
    return [np.array(m.split(), dtype=float) for m in re.findall(r"`(-?[\d.]+(?: -?[\d.]+){7})`", section)]


def test_the_docs_quote_the_poses_motion_and_scan_write(tmp_path):
    section = _section(FORMATS_MD.read_text(encoding="utf-8"), "Motion and scan poses")
    motion_doc, scan_doc = _quoted_poses(section)
    res = run("motion", CROSSING, "--frames", "1", "--formats", "tum,json", "--out", tmp_path / "m",
              "--quiet", "--quiet")
    assert res.returncode == 0, res.stderr
    scan = run("scan", CROSSING, "--frames", "1", "--out", tmp_path / "s", "--quiet", "--quiet")
    assert scan.returncode == 0, scan.stderr
    motion = np.array((tmp_path / "m" / "tum" / "Velodyne.tum").read_text().splitlines()[0].split(), float)
    first = np.array((tmp_path / "s" / "trajectory.tum").read_text().splitlines()[0].split(), float)
    assert np.allclose(motion, motion_doc, atol=1e-4) and np.allclose(first, scan_doc, atol=1e-4)
    # tracking.txt: world frame, z up: a box's bottom centre (location) is at its ground height
    rows = [ln.split() for ln in (tmp_path / "m" / "tracking.txt").read_text().splitlines()]
    assert rows and all(len(r) == 17 for r in rows)
    # the demo's four buildings (h = 15 m) stand on the ground z = 0: location is world, z up
    tall = [r for r in rows if r[2] == "building" and float(r[10]) > 5]
    assert len(tall) == 4 and all(abs(float(r[15])) < 1e-3 for r in tall), tall
    assert "world frame, z up" in section and "tracking.txt" in section


def test_the_readme_names_the_noisy_mesh_box_and_its_default():
    from blensor_addon.ui.props import OUTPUT_OPTIONS
    prop = OUTPUT_OPTIONS["add_noisy_scan_mesh"]()
    label, default = prop.keywords["name"], prop.keywords["default"]
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"only with *{label}* ticked" in text and default is False
    assert "(off by default)" in text
    assert "[poses](docs/formats.md#motion-and-scan-poses)" in text
