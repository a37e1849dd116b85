"""The per-unit calibration table ``core/tables/radiometry.json``: every real preset of the
rotating LiDAR has an entry of published figures (range at a reflectivity, detection
probability, range precision, wavelength, sunlight), each with its source, and every gap
filled from the nearest unit is marked ``derived from ...`` and named in the entry's
``derived`` list. docs/physics.md ("Calibration per unit") lists the same units. No bpy."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from blensor_addon.core.sensors.rotating_presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "blensor_addon" / "core" / "tables" / "radiometry.json"
PHYSICS = ROOT / "docs" / "physics.md"
REAL = sorted(k for k in PRESETS if k != "generic")
ENTRY_KEYS = {"wavelength_nm", "ranges", "precision", "ambient_klx", "derived", "notes"}
RANGE_KEYS = {"reflectivity", "range_m", "probability", "condition", "source"}
PRECISION_KEYS = {"sigma_m", "kind", "range_m", "snr", "reflectivity", "source"}
#: a figure taken from another unit: "derived from `preset`" or "derived from <unit name> ("
DERIVED = re.compile(r"^derived from (?:`(?P<key>[a-z0-9_]+)`|(?P<name>[^(]+?) \()")
ISSUE = re.compile(r"\b[Ii]ssues? [0-9]+")


def _table() -> dict:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def _units() -> dict:
    return _table()["units"]


def _own(entry: dict, field: str) -> list[dict]:
    """The figures of ``field`` ("ranges" or "precision") the unit's own sources give."""
    return [f for f in entry[field] if not f["source"].startswith("derived")]


def test_the_table_has_schema_1_and_an_entry_for_every_real_preset_only():
    table = _table()
    assert table["schema"] == 1
    assert set(table) == {"schema", "units"}
    assert sorted(table["units"]) == REAL
    assert len(REAL) == 11


@pytest.mark.parametrize("unit", REAL)
def test_every_entry_has_the_fixed_fields_and_at_least_one_range_figure(unit):
    entry = _units()[unit]
    assert set(entry) == ENTRY_KEYS
    assert entry["ranges"], unit
    assert isinstance(entry["derived"], list) and all(isinstance(d, str) and d for d in entry["derived"])
    assert isinstance(entry["notes"], str)
    wl = entry["wavelength_nm"]
    assert wl is None or 800.0 <= wl <= 1600.0
    if wl is None:  # an absent figure is named in the derived list
        assert any(d.startswith("wavelength_nm:") for d in entry["derived"]), unit
    ambient = entry["ambient_klx"]
    assert ambient is None or 0.0 <= ambient <= 200.0
    if ambient is None:
        assert any(d.startswith("ambient_klx:") for d in entry["derived"]), unit


@pytest.mark.parametrize("unit", REAL)
def test_range_figures_are_physical_and_sourced(unit):
    for fig in _units()[unit]["ranges"]:
        assert set(fig) == RANGE_KEYS
        assert 0.0 < fig["reflectivity"] <= 1.5
        assert fig["range_m"] > 0.0
        p = fig["probability"]
        assert p is None or 0.0 < p <= 1.0
        assert isinstance(fig["condition"], str) and fig["condition"].strip()
        assert isinstance(fig["source"], str) and fig["source"].strip()
    if any(f["probability"] is None for f in _units()[unit]["ranges"]):
        assert any(d.startswith("probability:") for d in _units()[unit]["derived"]), unit


@pytest.mark.parametrize("unit", REAL)
def test_precision_figures_are_physical_and_sourced(unit):
    entry = _units()[unit]
    assert entry["precision"], unit
    for fig in entry["precision"]:
        assert set(fig) == PRECISION_KEYS
        assert 0.0 < fig["sigma_m"] < 1.0
        assert fig["kind"].startswith(("1-sigma precision", "accuracy"))
        assert fig["range_m"] is None or fig["range_m"] > 0.0
        assert fig["snr"] is None or fig["snr"] > 0.0
        assert fig["reflectivity"] is None or 0.0 < fig["reflectivity"] <= 1.5
        assert isinstance(fig["source"], str) and fig["source"].strip()


@pytest.mark.parametrize("unit", REAL)
def test_every_derived_figure_names_its_unit_and_is_listed(unit):
    """A figure taken from another unit says so in its source, the unit it names has a figure
    of its own of that kind (a preset key) or is named in the derived list (another unit),
    and the entry's derived list has a line for that field."""
    units = _units()
    entry = units[unit]
    for field in ("ranges", "precision"):
        for fig in entry[field]:
            if not fig["source"].startswith("derived"):
                continue
            m = DERIVED.match(fig["source"])
            assert m, fig["source"]
            notes = [d for d in entry["derived"] if d.startswith(field + ":")]
            assert notes, (unit, field)
            if m["key"]:
                assert m["key"] in units and m["key"] != unit
                assert _own(units[m["key"]], field), (unit, m["key"])
                assert any(f"`{m['key']}`" in d for d in notes)
            else:
                assert any(m["name"] in d for d in notes), (unit, m["name"])


def test_every_unit_has_a_range_figure_of_its_own_or_one_derived_from_a_named_unit():
    units = _units()
    for unit in REAL:
        own = _own(units[unit], "ranges")
        derived = [f for f in units[unit]["ranges"] if f["source"].startswith("derived from")]
        assert own or derived, unit


def test_the_hdl64e_s2_marks_and_the_first_os1_datasheet_figures():
    """The HDL-64E S2's datasheet marks (seed 000 section 3.2) and the OS1's, 40 m at 10 % and
    120 m at 80 % at 100 klx in the revision the OS1-64 preset's unit belongs to."""
    units = _units()
    hdl = {(f["reflectivity"], f["range_m"]) for f in units["hdl64e_s2"]["ranges"]}
    assert hdl == {(0.1, 50.0), (0.8, 120.0)}
    os1 = {(f["reflectivity"], f["range_m"]) for f in _own(units["os1_64"], "ranges")}
    assert os1 == {(0.1, 40.0), (0.8, 120.0)}
    assert units["os1_64"]["ambient_klx"] == 100.0
    snr = {f["snr"]: f["sigma_m"] for f in units["os1_64"]["precision"]}
    assert snr == {250.0: 0.015, 100.0: 0.03, 12.0: 0.10}


def test_no_range_figure_lies_beyond_the_preset_maximum_range_unless_its_notes_say_so():
    """A datasheet figure beyond the preset's ``max_range`` (the VLS-128's 300 m at 10 %) is
    kept and said; a derived one beyond it is left out."""
    units = _units()
    for unit in REAL:
        max_range = float(PRESETS[unit].values["max_range"])
        for fig in units[unit]["ranges"]:
            if fig["range_m"] > max_range:
                assert not fig["source"].startswith("derived"), (unit, fig["range_m"])
                assert "max_range" in units[unit]["notes"], unit


def test_the_table_cites_no_issue_numbers():
    assert not ISSUE.search(TABLE.read_text(encoding="utf-8"))


def test_physics_doc_lists_every_unit_in_its_calibration_table():
    text = PHYSICS.read_text(encoding="utf-8")
    assert "### Calibration per unit" in text
    section = text.split("### Calibration per unit", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert sorted({re.match(r"\| `([a-z0-9_]+)`", ln)[1] for ln in rows}) == REAL
    assert "core/tables/radiometry.json" in section
