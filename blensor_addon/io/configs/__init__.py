"""Sensor configuration files in and out: the registry of config formats (docs/formats.md,
"Sensor config files"). No bpy: a format reads a file into :class:`SensorConfig` s and writes them
back; ``jobs/configs.py`` applies them to cameras of a scene and reads them from cameras.

A format is one module of this package that defines ``FORMAT`` (a :class:`ConfigFormat`):
``airsim`` (Project AirSim's JSON ``sensors`` array, seed 003) and ``unity`` (Unity's
SDF-like ``<sensor>`` XML, seed 004). The ``blensor config`` command, ``blensor scan
--sensor FILE`` and the help text come from :data:`CONFIG_FORMATS`.

CONTRACT: :class:`SensorConfig` and :class:`ConfigFormat` are fixed (the CLI and
``jobs/configs.py`` rely on them); a format module only reads and writes them.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.errors import SettingsError

if TYPE_CHECKING:
    from ...core.ndtypes import F64
    from ..atomic import StrPath


@dataclass
class SensorConfig:
    """One sensor of a config file, in BlenSor's terms.

    Attributes:
        name: the camera's name (AirSim ``id``, Unity ``name``).
        sensor_type: a registered sensor type (``rotating``, ``planar``, ``rosette``,
            ``cylindrical``, ``pattern``, ...).
        values: setting name -> value of that sensor type (validated by
            :func:`~blensor_addon.core.sensors.make_settings` when applied).
        parent: name of the object the sensor is mounted on (AirSim ``parent-link``), or
            None (the world).
        pose: (4, 4) float64 pose of the sensor relative to ``parent`` (or the world) in
            REP-103 axes (x ahead, y left, z up: the sensor frame a ROS driver publishes),
            or None (keep the camera's pose; a new camera: identity).
        outputs: what the file says about outputs rather than the sensor (Unity ``topic``,
            ``is_laserscan``, ``is_pointcloud_organized``; AirSim ``report-frequency`` where
            it is not a setting): kept on the camera and written back on export.
        ignored: one text per field of the file that BlenSor reads but does not use
            (``"draw-debug-points: a viewer option; ignored"``), reported once.
        unknown: names of fields the format does not define (reported once, never dropped
            silently).
    """

    name: str
    sensor_type: str
    values: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    pose: F64 | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """False where the file switches the sensor off (AirSim ``"enabled": false``,
        kept in :attr:`outputs`): ``blensor scan --sensor FILE`` skips it with one note;
        ``blensor config import`` still makes its camera so an export writes it back."""
        return self.outputs.get("enabled", True) is not False


class ConfigFormat:
    """A sensor config file format.

    Class attributes: name (``"airsim"``), label, suffixes (``(".json",)``), description.
    """

    name = ""
    label = ""
    suffixes: tuple[str, ...] = ()
    description = ""

    def read(self, path: StrPath) -> list[SensorConfig]:
        """The sensors of the file at ``path`` (every sensor this format can express).

        Raises:
            SettingsError: unreadable file, or a field out of range (one line naming the
                file, the sensor and the field)."""
        raise NotImplementedError

    def dumps(self, configs: list[SensorConfig]) -> tuple[str, list[str]]:
        """(the file's text, one line per thing the format cannot express) of ``configs``.

        Raises:
            SettingsError: a sensor type the format cannot express at all."""
        raise NotImplementedError

    def write(self, path: StrPath, configs: list[SensorConfig]) -> list[str]:
        """Write ``configs`` to ``path`` (:meth:`dumps`; temporary file + rename); returns
        one line per thing the format cannot express (named, e.g. ``"lidar1: bias_sigma:
        not in the AirSim schema; not written"``).

        Raises:
            SettingsError: a sensor type the format cannot express at all, or a path in
            a folder that is missing or not writable."""
        from ._common import write_text
        text, notes = self.dumps(configs)
        write_text(path, text, str(path))
        return notes


#: format name -> ConfigFormat
CONFIG_FORMATS: dict[str, ConfigFormat] = {}


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f".{info.name}", __name__)
        fmt = getattr(module, "FORMAT", None)
        if isinstance(fmt, ConfigFormat):
            CONFIG_FORMATS[fmt.name] = fmt


def get_format(name: str) -> ConfigFormat:
    """The config format ``name``.

    Raises:
        SettingsError (``FORMAT``, the positional argument of ``blensor config import|export
        FORMAT``): unknown."""
    if name not in CONFIG_FORMATS:
        raise SettingsError("FORMAT", "one of " + (", ".join(CONFIG_FORMATS) or "(none)"), name)
    return CONFIG_FORMATS[name]


def format_of_file(path: StrPath) -> ConfigFormat:
    """The format of a config file from its suffix (``.json``: airsim, ``.xml``: unity).

    Raises:
        SettingsError (``--sensor``): a suffix no format reads."""
    suffix = str(path).lower().rsplit(".", 1)[-1] if "." in str(path) else ""
    for fmt in CONFIG_FORMATS.values():
        if f".{suffix}" in fmt.suffixes:
            return fmt
    allowed = ", ".join(f"{s} ({f.name})" for f in CONFIG_FORMATS.values() for s in f.suffixes)
    raise SettingsError("--sensor", f"a sensor config file: {allowed or '(no formats)'}", str(path))


_discover()

__all__ = ["SensorConfig", "ConfigFormat", "CONFIG_FORMATS", "get_format", "format_of_file"]
