"""What one scan covers and what the scanner reports about it (numpy only).

A *packet* is one output of a scan: a single scan at a scene frame, what the sensor
fires during one scene frame of a range scan, or one full sweep of a swept sensor
(BlenSor paper, ``seed 000`` section 3.2: a rotating head fires column after column, so
a sweep spans scene frames). The range-scan plan (:mod:`blensor_addon.jobs.plan`)
turns scene frames into packets; :meth:`blensor_addon.scene.scanner.Scanner.scan`
scans one and returns the :class:`~blensor_addon.core.result.ScanResult` with a
:class:`PacketRecord`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ndtypes import F64

#: packet kinds: ``single`` a whole scan at scene frame ``index``; ``frame`` what the
#: sensor fires during scene frame ``index`` of a range scan (a rotating head's sector,
#: one image of an image sensor); ``sweep`` full sweep ``index``, fired in
#: ``[index * P, (index + 1) * P)`` s with P the sweep period
PACKET_KINDS = ("single", "frame", "sweep")


@dataclass(frozen=True)
class Packet:
    """One output of a scan.

    Attributes:
        kind: one of :data:`PACKET_KINDS`.
        index: int, the scene frame number (``single``, ``frame``) or the sweep number
            (``sweep``; sweep i starts at ``i * period`` s).
    Raises:
        ValueError: an unknown kind.
    """

    kind: str
    index: int

    def __post_init__(self) -> None:
        if self.kind not in PACKET_KINDS:
            raise ValueError(f"packet kind must be one of {', '.join(PACKET_KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "index", int(self.index))


@dataclass(frozen=True)
class PacketRecord:
    """What the scanner reports about a scanned packet (what the range job keeps in
    ``manifest.json`` for ``--resume``).

    Attributes:
        packet: the :class:`Packet` scanned.
        time: float s, the packet's start (scene frame ``f`` starts at ``f * frame_time``).
        pose: (4, 4) float64, the sensor's world pose at the packet's start (scale removed,
            in the run's axes).
        pose_end: (4, 4) float64 pose at the packet's end in continuous time, else None.
        geometry_hash: sha256 hex of the geometry the packet was cast in (every time step
            of a timed packet), or None when the scanner was made without packet hashes.
    """

    packet: Packet
    time: float
    pose: F64
    pose_end: F64 | None = None
    geometry_hash: str | None = None


__all__ = ["PACKET_KINDS", "Packet", "PacketRecord"]
