"""Registry of sensor types: every module of this package that defines ``SENSOR``.

A new sensor is one new module here (its settings dataclass with metadata, its presets,
its physics; see :mod:`._base`). The Blender properties and panel, the ``blensor``
command's ``--set`` options and ``blensor sensors`` are generated from the registry.
"""
from __future__ import annotations

import importlib
import pkgutil

from ..errors import SettingsError
from ._base import COMMON, Meta, Preset, Sensor, SensorSettings, meta_of  # noqa: F401

#: the v0.1 sensor; scenes without a stored sensor type scan with it
DEFAULT_TYPE = "rotating"
#: order of the types in the UI and in the stored enum (append only)
_ORDER = ("rotating", "line", "planar", "tof", "kinect", "depth")


def _discover() -> dict[str, Sensor]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f".{info.name}", __name__)
        sensor = getattr(module, "SENSOR", None)
        if isinstance(sensor, Sensor):
            found[sensor.name] = sensor
    ordered = {k: found[k] for k in _ORDER if k in found}
    ordered.update({k: v for k, v in sorted(found.items()) if k not in ordered})
    return ordered


#: type name -> :class:`~._base.Sensor`
SENSORS: dict[str, Sensor] = _discover()


def get_sensor(name: str) -> Sensor:
    """The sensor type ``name``.

    Raises:
        SettingsError (``sensor_type``): unknown type.
    """
    try:
        return SENSORS[name]
    except (KeyError, TypeError):
        raise SettingsError("sensor_type", "one of " + ", ".join(SENSORS), name) from None


def make_settings(sensor_type: str, stored: dict | None = None, overrides: dict | None = None):
    """Validated settings of ``sensor_type``: the ``stored`` values, then the preset
    named in ``overrides`` (its values), then the other ``overrides``.

    Returns:
        (Sensor, settings dataclass instance).
    Raises:
        SettingsError: unknown type, setting name or preset, or a value out of range.
    """
    sensor = get_sensor(sensor_type)
    values = dict(stored or {})
    overrides = dict(overrides or {})
    if "preset" in overrides:
        values.update(sensor.preset_values(overrides.pop("preset")))
    values.update(overrides)
    return sensor, sensor.settings(values)


__all__ = ["SENSORS", "DEFAULT_TYPE", "get_sensor", "make_settings", "Sensor", "SensorSettings", "Meta",
           "Preset", "COMMON", "meta_of"]
