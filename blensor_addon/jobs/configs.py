"""Sensor config files applied to a scene and read from it (issue 23, section 2): the bpy
side of :mod:`blensor_addon.io.configs`.

CONTRACT STUB (issue 23): the signatures are fixed (the CLI calls them); the bodies are
filled by the configs part.
"""
from __future__ import annotations


def apply_configs(configs, scene) -> tuple[list, list[str]]:
    """Create or update one camera per :class:`~blensor_addon.io.configs.SensorConfig`
    in ``scene``: the camera named ``config.name`` (created, linked to the scene's
    collection, if missing), its sensor type and settings (validated first: a bad value
    changes nothing), its pose (``config.pose`` relative to the ``parent`` object if the
    scene has it, else the world; REP-103 axes turned into the camera's), its outputs
    kept on the camera.

    Returns:
        (cameras, notes): the camera objects in the file's order; one line per note
        (``"lidar1: created"``, ``"lidar1: parent-link 'X' not in the scene; placed in
        the world"``, every ``ignored`` and ``unknown`` field once).
    Raises:
        SettingsError: a value out of range (nothing changed)."""
    raise NotImplementedError


def configs_of(cameras) -> list:
    """The :class:`~blensor_addon.io.configs.SensorConfig` of each camera object (its
    sensor type, settings, pose relative to its parent in REP-103 axes, kept outputs).

    Raises:
        SettingsError: a camera's stored settings are invalid."""
    raise NotImplementedError
