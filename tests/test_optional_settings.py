"""Optional settings read through the schema (core/settings.py: setting_value and
OPTIONAL_SETTINGS): a sensor's declared value, else the one table's default; a name no
schema declares is an error, never a silent default; the table cannot drift from the
sensors that declare its settings; core reads no setting with getattr and a default."""
from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from blensor_addon.core.sensors import SENSORS
from blensor_addon.core.sensors.physics import min_range_setting
from blensor_addon.core.sensors.returns import ReturnSettings
from blensor_addon.core.settings import OPTIONAL_SETTINGS, setting_value

CORE = pathlib.Path(__file__).resolve().parents[1] / "blensor_addon" / "core"
#: declared defaults that are a datasheet's value, not the "off" value of the table: the line
#: scanner's defaults are the Ibeo LUX's (core/sensors/line.py, its preset ibeo_lux)
DATASHEET_DEFAULTS = {("line", "min_range"): 0.3, ("line", "range_resolution"): 0.04}


def _fields(sensor):
    return {f.name: f for f in dataclasses.fields(sensor.Settings)}


@pytest.mark.parametrize("name", ["max_retruns", "weathr", "min_rang", "sensor_type", ""])
def test_a_name_no_schema_declares_is_an_error_naming_it(name):
    for sensor in SENSORS.values():
        with pytest.raises(AttributeError, match=re.escape(repr(name))) as err:
            setting_value(sensor.settings(), name)
        assert err.value.name == name


def test_the_declared_value_wins_and_a_sensor_without_the_setting_reads_the_table():
    lidar = SENSORS["rotating"].settings({"returns": "dual", "min_range": 2.5, "weather": "fog"})
    assert setting_value(lidar, "returns") == "dual"
    assert setting_value(lidar, "min_range") == 2.5
    assert setting_value(lidar, "weather") == "fog"
    assert setting_value(lidar, "max_range") == lidar.max_range
    kinect = SENSORS["kinect"].settings({"min_range": 1.5})
    assert setting_value(kinect, "min_range") == 1.5
    for name in ("returns", "weather", "beam_divergence", "samples_per_beam", "return_model",
                 "range_resolution", "intensity_model", "echo_separation", "max_returns"):
        assert name not in _fields(SENSORS["kinect"])
        assert setting_value(kinect, name) == OPTIONAL_SETTINGS[name].default
    with pytest.raises(AttributeError, match="'max_range'"):  # declared elsewhere, no optional default
        setting_value(kinect, "max_range")


@pytest.mark.parametrize("name", sorted(OPTIONAL_SETTINGS))
def test_each_optional_default_is_the_default_and_unit_of_every_sensor_that_declares_it(name):
    opt = OPTIONAL_SETTINGS[name]
    declaring = [s for s in SENSORS.values() if name in _fields(s)]
    assert declaring, f"{name}: no sensor declares it"
    for sensor in declaring:
        f = _fields(sensor)[name]
        meta = f.metadata["blensor"]
        assert meta.unit == opt.unit, (sensor.name, name)
        assert meta.check(name, opt.default) == opt.default, (sensor.name, name)  # an allowed value
        assert type(f.default) is type(opt.default), (sensor.name, name)
        assert f.default == DATASHEET_DEFAULTS.get((sensor.name, name), opt.default), (sensor.name, name)
    shared = {f.name: f.default for f in dataclasses.fields(ReturnSettings)}
    shared["min_range"] = min_range_setting().default
    if name in shared:  # the shared declaration (ReturnSettings, physics.min_range_setting)
        assert shared[name] == opt.default


def test_core_reads_no_setting_through_getattr_with_a_default():
    pattern = re.compile(r"getattr\((s|settings)\b[^,]*, *\"[a-z_]+\", ")
    found = [f"{p.relative_to(CORE)}:{i}" for p in sorted(CORE.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
