"""The Velodyne models whose data packets :mod:`.velodyne` encodes, and their packet facts
(:data:`MODELS`), numpy-free and importing nothing of this package: the package's
:func:`~blensor_addon.io.packets.packet_presets` reads them without importing
:mod:`.velodyne`, which imports the package (no import circle; ``tests/test_layers.py``).
Sources: the user manuals that :mod:`.velodyne`'s docstring cites (VLP-16 63-9243 Rev. E
section 9, HDL-32E 63-9113 and application note 63-9277, VLP-32C 63-9325).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    """A Velodyne model's packet facts: product id byte, lasers, firing sequences per block,
    distance unit (m), firing cycle (s) and laser spacing within it (s)."""

    product_id: int
    lasers: int
    sequences: int
    distance_unit: float
    cycle_s: float
    laser_step_s: float


#: model name (``Device.model``) -> packet facts (sources: the module docstring)
MODELS = {
    "VLP-16": Model(0x22, 16, 2, 0.002, 55.296e-6, 2.304e-6),
    "HDL-32E": Model(0x21, 32, 1, 0.002, 46.08e-6, 1.152e-6),
    "VLP-32C": Model(0x28, 32, 1, 0.004, 55.296e-6, 2.304e-6),
}
