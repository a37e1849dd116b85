"""``blensor sensors`` as a reader sees it: sources named by their authors or files, no
internal names or sentinels."""
from __future__ import annotations

import json
import re

from test_faults import run

from blensor_addon.core.text import cite


def test_sources_are_named_and_nothing_internal_shows():
    text, doc = run("sensors"), run("sensors", "--json")
    assert text.returncode == 0 and doc.returncode == 0 and text.stderr == ""
    for out in (text.stdout, doc.stdout):
        assert not re.search(r"seed \d{3}|reference \d|RETURN_MODES_OF|\\x00|\\u0000|\x00", out)
    lines = text.stdout.splitlines()
    vlp16 = next(ln for ln in lines if ln.startswith("  preset vlp16 "))
    assert "noise: Gschwandtner et al. 2011; return modes: strongest, last, dual" in vlp16
    assert any("(Jansen et al. Eq. 4)" in ln for ln in lines)
    calibration = next(ln for ln in lines if ln.startswith("  calibration = "))
    assert calibration.endswith("empty: the preset's table; text"), calibration
    rotating = next(e for e in json.loads(doc.stdout) if e["type"] == "rotating")
    assert {s["name"]: s["used_if"] for s in rotating["settings"]}["calibration"] == ""
    assert "Gschwandtner et al. 2011" in rotating["presets"]["hdl64e_s2"]["source"]


def test_cite_names_every_source_and_keeps_other_text():
    assert cite("seed 000 Eq. 1; seed 001 Table 1; seed 002 Eq. 5; seed 003's table; seed 004") == (
        "Gschwandtner et al. 2011 Eq. 1; Raj & Hashim Table 1; Jansen et al. Eq. 5; "
        "the Project AirSim lidar docs' table; the Unity lidar docs")
    assert cite("bias table: reference 6.1") == "bias table: BlenSor 1.0.18's blendodyne.py"
    assert cite("seed 2 and reference 99") == "seed 2 and reference 99"
