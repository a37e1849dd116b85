"""Registry of sensor types: the modules of this package that define ``SENSOR``, the
sensors of installed plug-ins (entry-point group ``blensor.sensors``) and those given to
:func:`register_sensor`.

A new sensor is one new module here, or one module anywhere that registers it (see
``examples/custom_sensor/``): its settings dataclass with metadata
(:mod:`blensor_addon.core.settings`), its presets and its physics on the
:class:`~.sensor.Sensor` interface. The Blender properties and panel, the ``blensor``
command's ``--set`` options and ``blensor sensors`` are generated from the registry.

The building blocks live in :mod:`.sensor` (the interface), :mod:`.raypattern` (ray
patterns, the sweep column count), :mod:`.physics` (noise, reflectivity limit, result
assembly) and :mod:`.budget` (the ray budget).

Stored values: Blender stores ``sensor_type`` as a number, :attr:`Sensor.number
<.sensor.Sensor.number>`: the built-in types keep 0..5 (the values saved files hold); a
plug-in declares one or gets a stable number derived from its name
(:func:`plugin_number`).
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import zlib
from collections.abc import Mapping
from typing import Any

from ..errors import SettingsError, did_you_mean
from ..settings import COMMON, Meta, Preset, SensorSettings, meta_of
from ..plugins import LazyRegistry, check_new_name, load_plugins
from .sensor import Sensor

#: the v0.1 sensor; scenes without a stored sensor type scan with it
DEFAULT_TYPE = "rotating"
#: entry-point group of pip-installed sensor plug-ins
ENTRY_POINT_GROUP = "blensor.sensors"
#: stored numbers a plug-in without its own ``number`` gets: PLUGIN_BASE + crc32(name) % PLUGIN_SPAN
PLUGIN_BASE = 1 << 16
PLUGIN_SPAN = (1 << 31) - 1 - PLUGIN_BASE
#: stored numbers below this are the built-in types' (0..5 today); a plug-in declares one above
BUILTIN_LIMIT = 1024
#: the camera's own BlenSor properties besides the sensor settings (``ui/props.py``:
#: ``sensor_type`` and its output options; a test keeps the two lists equal): no
#: sensor's storage group may take one of these names
CAMERA_PROPERTIES = frozenset({"sensor_type", "settings_version", "add_scan_mesh", "add_noisy_scan_mesh",
                               "frame_of_reference", "axes", "output_dir", "formats", "overwrite",
                               "motion_formats", "depth_formats", "start_time"})

#: type name -> :class:`~.sensor.Sensor`, ordered by stored number (built-ins), then plug-ins
SENSORS: LazyRegistry[Sensor[Any]] = LazyRegistry()


def plugin_number(name: str) -> int:
    """The stored ``sensor_type`` number of a plug-in sensor named ``name`` that declares
    none: stable across runs and machines (CRC-32 of the name), at least
    :data:`PLUGIN_BASE` (never a built-in's)."""
    return PLUGIN_BASE + zlib.crc32(name.encode()) % PLUGIN_SPAN


def _check_settings_class(name: str, cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, SensorSettings) and dataclasses.is_dataclass(cls)):
        raise SettingsError("sensor", f"Settings of sensor '{name}' to be a frozen dataclass subclassing "
                            "blensor_addon.core.settings.SensorSettings", cls)
    for f in dataclasses.fields(cls):
        if not isinstance(f.metadata.get("blensor"), Meta):
            raise SettingsError("sensor", f"every setting of sensor '{name}' declared with "
                                "blensor_addon.core.settings.setting()", f.name)


def register_sensor(sensor: object, *, builtin: bool = False) -> Sensor[Any]:
    """Add a sensor type to :data:`SENSORS`.

    Args:
        sensor: a :class:`~.sensor.Sensor` instance (or a subclass, instantiated with no
            arguments) with a ``name`` (lower case letters, digits, ``_``; not already
            registered), a ``Settings`` dataclass whose every field carries
            :func:`~blensor_addon.core.settings.setting` metadata, its presets and
            physics. ``storage`` defaults to the name (the nested property group on
            ``Camera.blensor``); ``number`` (the stored ``sensor_type`` value) to
            :func:`plugin_number`.
        builtin: a module of this package (its number may be below :data:`PLUGIN_BASE`).
    Returns:
        the registered sensor.
    Raises:
        SettingsError (``sensor``): not a Sensor, a bad or duplicate name, number or
        storage, settings without metadata, or default or preset values that do not
        validate.
    """
    if isinstance(sensor, type) and issubclass(sensor, Sensor):
        sensor = sensor()
    if not isinstance(sensor, Sensor):
        raise SettingsError("sensor", "a blensor_addon.core.sensors.Sensor instance", repr(sensor))
    name = sensor.name
    check_new_name("sensor", "Sensor", name, SENSORS)
    _check_settings_class(name, sensor.Settings)
    if sensor.storage is None:
        sensor.storage = name
    taken = {s.storage for s in SENSORS.values()} | set(COMMON) | CAMERA_PROPERTIES | {
        f.name for s in SENSORS.values() if s.storage == "" for f in dataclasses.fields(s.Settings)}
    if sensor.storage != "" and not builtin and sensor.storage != name:
        raise SettingsError("sensor", f"storage equal to the sensor's name ('{name}')", sensor.storage)
    if sensor.storage in taken or (sensor.storage == "" and not builtin):
        raise SettingsError("sensor", "a storage group no other sensor uses", sensor.storage)
    number = sensor.number if sensor.number is not None else plugin_number(name)
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= 2**31 - 1 \
            or (not builtin and sensor.number is not None and number < BUILTIN_LIMIT):
        raise SettingsError("sensor", f"number of sensor '{name}' an integer in [{BUILTIN_LIMIT}, "
                            f"{2**31 - 1}] (the stored sensor_type value)", number)
    clash = [k for k, s in SENSORS.items() if s.number == number]
    if clash:
        raise SettingsError("sensor", f"number of sensor '{name}' not used by sensor '{clash[0]}' (declare "
                            "another number on the Sensor)", number)
    try:
        sensor.settings()
        for preset in sensor.presets:
            if not isinstance(sensor.presets[preset], Preset):
                raise SettingsError("preset", "a blensor_addon.core.settings.Preset", preset)
            sensor.settings(sensor.preset_values(preset))
    except SettingsError as exc:
        raise SettingsError("sensor", f"settings of sensor '{name}' whose defaults and presets validate "
                            f"({exc})", name) from None
    sensor.number = number
    if not sensor.label:
        sensor.label = name
    SENSORS[name] = sensor
    return sensor


def _discover() -> None:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f".{info.name}", __name__)
        sensor = getattr(module, "SENSOR", None)
        if isinstance(sensor, Sensor):
            found.append(sensor)
    for sensor in sorted(found, key=lambda s: (s.number is None, s.number, s.name)):
        register_sensor(sensor, builtin=True)


def _add_plugin(obj: object) -> None:
    items = obj
    if not isinstance(obj, (Sensor, type)):
        items = getattr(obj, "SENSORS", None) or getattr(obj, "SENSOR", obj)
    for sensor in (items if isinstance(items, (list, tuple)) else (items,)):
        register_sensor(sensor)


_discover()
SENSORS.arm(lambda: load_plugins(ENTRY_POINT_GROUP, _add_plugin))


def get_sensor(name: str) -> Sensor[Any]:
    """The sensor type ``name``.

    Raises:
        SettingsError (``sensor_type``): unknown type.
    """
    try:
        return SENSORS[name]
    except (KeyError, TypeError):
        raise SettingsError("sensor_type", "one of " + ", ".join(SENSORS), name,
                            did_you_mean(name, SENSORS) if isinstance(name, str) else "") from None


def make_settings(sensor_type: str, stored: Mapping[str, Any] | None = None,
                  overrides: Mapping[str, Any] | None = None) -> tuple[Sensor[Any], SensorSettings]:
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


__all__ = ["SENSORS", "DEFAULT_TYPE", "get_sensor", "make_settings", "register_sensor", "plugin_number",
           "Sensor", "SensorSettings", "Meta", "Preset", "COMMON", "meta_of"]
