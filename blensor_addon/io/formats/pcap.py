"""pcap: the UDP packets a real unit would send during the run, in one capture file.

``scan.pcap`` (libpcap, Ethernet / IPv4 / UDP, one record per packet, stamped when the unit
would send it) holds the data packets of the unit the sensor models
(``result.capabilities.device``, never the settings):

- Velodyne VLP-16, VLP-32C, HDL-32E (:mod:`blensor_addon.io.packets.velodyne`): 1206-byte
  data packets from 192.168.1.201 to port 2368: strongest return (return-mode byte 0x37),
  last return (0x38) when the capabilities say ``returns = "last"``, and dual return (0x39:
  pairs of blocks, the last return and the strongest or second strongest) for a dual result
  (capabilities ``returns = "dual"``; :func:`~blensor_addon.io.packets.velodyne.is_dual`);
  beside it
  ``scan.yaml``, the unit's calibration in the ROS driver's YAML layout (the laser table in
  use), which velodyne_pointcloud and velodyne-decoder read.
- Ouster OS0/OS1/OS2 (:mod:`blensor_addon.io.packets.ouster`): lidar data packets of the
  LEGACY profile (option ``ouster_profile=RNG19_RFL8_SIG16_NIR16``: the single-return
  profile of firmware 2.2 on) to port 7502; beside it ``scan.json``, the sensor metadata
  (beam intrinsics, data format, lidar mode) that ouster-sdk and ouster-ros need to read
  them.

The packets carry what the unit measures (``range_noisy``; option ``points=clean`` writes
the ground-truth ``range``) at the packet format's resolution; the timestamps are scene time
plus the run's time base (``RunInfo.start_ns``: ``--start-time``, default
2020-01-01T00:00:00Z; :mod:`blensor_addon.core.timebase`). Packets run on across frames:
the columns of a frame that do not fill a packet wait for the next frame. Velodyne packets lie
on the unit's grid: they start
at global columns that are multiples of ``384 / lasers`` from scene time 0 (the first packet
of a run, the last, and those across a gap are completed with firings of no return at their
own columns), so their stamps are the ones velodyne_pointcloud's per-point ``time`` in
BlenSor's rosbag2 refers to; Ouster packets hold 16 measurement columns, those of a frame
the run did not scan marked invalid. Single-return packets of a result with several returns
per beam (``returns`` ``dual_ouster`` or ``all`` of a Velodyne; any of them of an Ouster in a
single-return profile) carry each beam's strongest return
(:func:`~blensor_addon.io.packets.strongest_per_beam`), said once on stderr. Option
``ouster_profile=RNG19_RFL8_SIG16_NIR16_DUAL`` writes Ouster's dual-return profile: each beam's
strongest return and its second strongest (RANGE2; 0 where it had one). The packets'
intensity fields use the scales of BlenSor's own driver-layout clouds
(:mod:`blensor_addon.io.packets`).

Refused in one line (SettingsError ``formats``): a sensor that models no real unit
(``device`` None), a model without a packet encoder, a head spinning counter-clockwise
(real Velodyne and Ouster heads turn clockwise; their receivers assume it).
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...core.capabilities import Capabilities, Device, WriterNeeds
from ...core.errors import SettingsError
from ...core.result import ScanResult
from ...core.settings import setting
from ..atomic import StagedFile, atomic_write_bytes
from ..packets import (Endpoint, FiringColumns, firing_columns, has_returns, packet_presets, pcap_header,
                       pcap_record)
from ._base import RunInfo, Writer, capabilities_of

#: the units this writer encodes, by vendor (``Device.vendor``)
SUPPORTED = {"velodyne": ("VLP-16", "VLP-32C", "HDL-32E"), "ouster": ("OS0-*", "OS1-*", "OS2-*")}


@dataclass(frozen=True)
class PcapOptions:
    """Options of the pcap writer: ``points`` (``noisy``: the measured range, ``clean``: the
    true range) and ``ouster_profile`` (the lidar data profile of Ouster packets). The
    timestamps' time base is the run's (``--start-time``); the former option
    ``pcap.start_time`` is taken as another name of it
    (:func:`blensor_addon.core.timebase.run_start_time`)."""

    points: str = setting("noisy", "Packet ranges", "Which range the packets carry: the measured (noisy) "
                          "or the true (clean) one", choices=("noisy", "clean"))
    ouster_profile: str = setting("LEGACY", "Ouster profile", "Lidar data profile of Ouster packets "
                                  "(udp_profile_lidar; _DUAL: the strongest and second strongest returns)",
                                  choices=("LEGACY", "RNG19_RFL8_SIG16_NIR16", "RNG19_RFL8_SIG16_NIR16_DUAL"))


class PacketEncoder(Protocol):
    """A unit's packet encoder (:class:`~..packets.velodyne.VelodyneEncoder`,
    :class:`~..packets.ouster.OusterEncoder`): firing columns in, ``(stamp ns, UDP payload)``
    packets out."""

    #: its packets carry two returns per beam (Velodyne's dual return mode, Ouster's
    #: RNG19_RFL8_SIG16_NIR16_DUAL profile): the firing columns are laid out in the vendor's
    #: dual layout
    dual: bool

    def add(self, cols: FiringColumns | None) -> list[tuple[int, bytes]]:
        """The packets completed by ``cols``."""

    def finish(self) -> list[tuple[int, bytes]]:
        """The packets still held (the last, partial one)."""


def encoder_for(device: Device | None, start_ns: int, ouster_profile: str = "LEGACY",
                mode: int | None = None) -> tuple[PacketEncoder, Endpoint, str, bytes]:
    """The packet encoder of ``device`` and the name and bytes of its metadata file
    (``mode``: a Velodyne's return-mode byte, :func:`~..packets.velodyne.return_mode`;
    None: strongest); ``start_ns``: UNIX ns of scene time 0 (the run's time base).

    Raises:
        SettingsError (``formats``): no device, an unsupported vendor or model (or an
        Ouster lidar mode the firmware lacks); (``rotation_direction``) a head spinning
        counter-clockwise.
    """
    out: tuple[PacketEncoder, Endpoint, str, bytes]
    if device is None:
        raise SettingsError("formats", "pcap of a sensor that models a real unit (presets "
                            + ", ".join(packet_presets()) + ")", "a sensor with no device")
    if device.vendor not in SUPPORTED:
        raise SettingsError("formats", "pcap of a " + " or ".join(SUPPORTED) + " unit (presets "
                            + ", ".join(packet_presets()) + ")", f"{device.vendor} {device.model}".strip())
    if device.vendor == "velodyne":
        from ..packets import velodyne
        mode = velodyne.RETURN_STRONGEST if mode is None else mode
        enc = velodyne.VelodyneEncoder(device, start_ns, mode)
        out = enc, velodyne.ENDPOINT, "scan.yaml", velodyne.calibration_yaml(device).encode()
    else:
        from ..packets import ouster
        oenc = ouster.OusterEncoder(device, start_ns, ouster_profile)
        out = oenc, ouster.ENDPOINT, "scan.json", oenc.metadata_json().encode()
    if device.direction != "cw":
        raise SettingsError("rotation_direction", f"cw for pcap (a {device.model} spins clockwise; its "
                            "receivers assume it)", device.direction)
    return out


def check_sensor(caps: Capabilities) -> None:
    """Refuse, when the job is planned, a sensor whose packets this writer cannot write
    (:func:`encoder_for`'s errors); ``caps``: the sensor's Capabilities."""
    encoder_for(caps.device, 0)


class PcapFormat(Writer):
    """One ``scan.pcap`` for the run and the unit's calibration or metadata beside it (see the
    module docstring). The capture is written through a temporary file and renamed when the
    run closes; a write that fails is rolled back to the packets before."""

    name = "pcap"
    description = "the raw UDP packets of the real unit (Velodyne, Ouster), one capture for the run"
    files = "scan.pcap + scan.yaml (Velodyne calibration) or scan.json (Ouster metadata)"
    outputs = (r"scan\.pcap", r"scan\.yaml", r"scan\.json")
    Options = PcapOptions
    options: PcapOptions
    multi_frame = True
    needs = WriterNeeds(grid=True, device=True, check=check_sensor)

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self.path = self.folder / "scan.pcap"
        self._file: StagedFile | None = None  # from the first packet on
        self._end = 0
        self._enc: PacketEncoder | None = None
        self._ident = 0
        self._noted = False
        self.packets = 0

    def _open(self, result: ScanResult) -> None:
        device = capabilities_of(result).device
        mode = None
        if device is not None and device.vendor == "velodyne":
            from ..packets.velodyne import return_mode
            mode = return_mode(result)
        self._enc, self._ep, self._meta_name, self._meta = encoder_for(device, self.run.start_ns,
                                                                       self.options.ouster_profile, mode)
        assert device is not None  # encoder_for refuses a sensor with none
        self._device = device
        self._file = StagedFile(self.path)
        self._put(pcap_header())

    def _put(self, data: bytes) -> None:
        """Append ``data``; a failed write (ENOSPC) is cut back to the packets before."""
        assert self._file is not None  # opened by the first packet
        try:
            self._file.put(self._end, data)
        except BaseException:
            try:
                self._file.truncate(self._end)
            except OSError:
                pass
            raise
        self._end += len(data)

    def _write_packets(self, packets: Iterable[tuple[int, bytes]]) -> None:
        recs = []
        for stamp, payload in packets:
            recs.append(pcap_record(stamp, payload, self._ep, self._ident))
            self._ident += 1
        if recs:
            self._put(b"".join(recs))
            self.packets += len(recs)

    def append(self, result: ScanResult) -> None:
        if self._enc is None:
            self._open(result)
        assert self._enc is not None  # set by _open
        dual = self._device.vendor if self._enc.dual else None  # "velodyne" or "ouster" (SUPPORTED)
        if has_returns(result) and not dual and not self._noted:
            self._noted = True  # once a run
            print(f"blensor: note: pcap: the {self._device.model}'s single-return packets carry each beam's "
                  "strongest return (npz, LAS, PLY, PCD hold every return)", file=sys.stderr)
        cols = firing_columns(result, self._device, clean=self.options.points == "clean", dual=dual)
        self._write_packets(self._enc.add(cols))

    def close(self, status: str) -> None:
        if self._file is None or self._file.closed:
            return
        assert self._enc is not None  # set with the file
        self._write_packets(self._enc.finish())
        if not self.packets:
            self.discard()
            return
        self._file.commit(before_rename=lambda: atomic_write_bytes(self.folder / self._meta_name, self._meta))

    def discard(self) -> None:
        if self._file is not None:
            self._file.discard()


WRITER = PcapFormat
