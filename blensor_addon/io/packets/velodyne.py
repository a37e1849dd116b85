"""Velodyne data packets (VLP-16, VLP-32C, HDL-32E), single and dual return, numpy only.

Layout (VLP-16 User Manual 63-9243 Rev. E section 9 "Sensor Data"; HDL-32E User's Manual
63-9113 and Application Note 63-9277 "Packet Structure & Timing Definition"; VLP-32C User
Manual 63-9325): a 1206-byte UDP payload to port 2368 holding 12 data blocks of 100 bytes,
each ``uint16 0xFFEE`` (bytes ``FF EE``), ``uint16 azimuth`` (0.01 deg, 0..35999, clockwise
from ahead) and 32 channel records ``uint16 distance, uint8 reflectivity`` (little-endian;
distance 0 = no return), then ``uint32`` timestamp (us past the top of the hour, of the first
firing of the first block) and two factory bytes: return mode (0x37 strongest) and product
id (0x21 HDL-32E, 0x22 VLP-16, 0x28 VLP-32C).

- VLP-16: a block holds two firing sequences of the 16 lasers (records 0-15 and 16-31);
  only the first sequence's azimuth is sent, the second is interpolated by the receiver.
  Sequences are 55.296 us apart, lasers 2.304 us apart; distance unit 2 mm.
- HDL-32E: one firing of the 32 lasers per block, 46.08 us per firing cycle, lasers
  1.152 us apart; distance unit 2 mm.
- VLP-32C: one firing per block, 55.296 us per cycle, laser pairs fire together 2.304 us
  apart; distance unit 4 mm (VLP-32C manual; velodyne-decoder's bundled VLP-32C calibration:
  ``distance_resolution: 0.004``).

Record k of a block is laser id k (the calibration's row, BlenSor's ``channel``). The
distance is the raw one the unit measures: the reported range less the laser's
``dist_correction`` (``table.distance_m``), which the driver adds back (velodyne_pointcloud
rawdata.cc ``distance += corrections.dist_correction``;
:func:`~blensor_addon.core.sensors.rotating.raw_distance`).

Reflectivity scale (:func:`velodyne_reflectivity_byte`, the one scale of every output of a
Velodyne unit): the byte is Velodyne's calibrated reflectivity, 0-100 for diffuse targets of
0-100 % reflectivity, 101-255 for retro-reflectors (VLP-16 manual section 6.1 "Calibrated
Reflectivity"): ``round(100 * reflectivity)`` of BlenSor's material reflectivity, clipped to
0..255; under the radiometric return model, of the reflectivity compensated for range from the
received power (``signal x r^2``, so incidence shows: :mod:`.reported`). velodyne_pointcloud
publishes that byte as the point's ``intensity``
(rawdata.cc: ``intensity = raw->blocks[i].data[k + 2]``), so the XYZIRT PointCloud2 and
the PCD of a Velodyne unit carry the same number (:mod:`..formats._layouts`).

Return modes (the factory byte; VLP-16 manual section 9.3.1.6 "Factory Bytes": 0x37
strongest, 0x38 last, 0x39 dual; :func:`return_mode`): a result whose capabilities say
``returns = "last"`` is written as last return packets, a dual result (:func:`is_dual`) as
dual return packets, every other as strongest return packets (a result with several returns
per beam but not ``dual``: each beam's strongest return). **Dual return mode** (VLP-16 manual
section 9.3 "Dual Return Mode" and figure 9-3; the VLP-32C manual's section 9.3 the same words;
the HDL-32E since firmware 2.2.20.0 the same scheme, velodyne-decoder ``unpack_16_32_beam``):
the unit sends a pair of blocks per firing, both with the same azimuth; the even block (0, 2,
..., 10) holds the last return, the odd block (1, 3, ..., 11) the strongest return, or the
second strongest when the strongest is the last; when only one return was detected, both
blocks of the pair hold it. A dual packet therefore holds half the columns: 6 firings of the
HDL-32E and VLP-32C, 12 of the VLP-16 (each VLP-16 block holds two firing sequences). Which
returns: :func:`~blensor_addon.io.packets.dual_pair` (the last = the farthest return of the
beam; the other = the strongest of the rest).

Packets on the unit's grid (:func:`columns_per_packet`): a data packet holds ``384 / L``
firing columns of an L-laser unit and the packets of a run start at global columns that
are multiples of it, counted from scene time 0 (global column g fires at ``g / (columns
rotation_speed)`` s, the rotating sensor's range-scan columns). The first packet of a run,
and the first after a gap (a sector scan), is padded before its first column with firings
of no return at their own columns' times and azimuths, so every packet's timestamp is the
time of a grid column, the one velodyne_pointcloud's time convention refers to
(:func:`~blensor_addon.io.formats._layouts.velodyne_stamp`).
"""
from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, TypeAlias, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from ...core.errors import SettingsError
from ...core.sensors.rotating import raw_distance
from . import Endpoint, FiringColumns
from .velodyne_models import MODELS, Model

if TYPE_CHECKING:
    from ...core.capabilities import Device
    from ...core.ndtypes import I64, U8, U16, Array
    from ...core.result import ScanResult

#: one firing column waiting in :class:`VelodyneEncoder`: (time s, psi rad, range (L,) m,
#: reflectivity (L,), range2 (L,) m or None, reflectivity2 (L,) or None)
_Slot: TypeAlias = "tuple[float, float, Array, Array, Array | None, Array | None]"

PACKET_SIZE = 1206
BLOCKS = 12
RECORDS = 32
BLOCK_FLAG = b"\xff\xee"
RETURN_STRONGEST = 0x37
RETURN_LAST = 0x38
RETURN_DUAL = 0x39
UDP_PORT = 2368
#: factory default address of a Velodyne (user manuals: 192.168.1.201, destination
#: port 2368); MAC in Velodyne's OUI 60:76:88
ENDPOINT = Endpoint(src_mac=b"\x60\x76\x88\x00\x00\x01", src_ip="192.168.1.201",
                    src_port=UDP_PORT, dst_port=UDP_PORT)

RECORD_DTYPE = np.dtype([("distance", "<u2"), ("reflectivity", "u1")])
BLOCK_DTYPE = np.dtype([("flag", "S2"), ("azimuth", "<u2"), ("records", RECORD_DTYPE, (RECORDS,))])
assert BLOCK_DTYPE.itemsize == 100


#: laser records a Velodyne data packet holds (12 blocks of 32): 384 / L firing columns of L lasers
RECORDS_PER_PACKET = BLOCKS * RECORDS


def velodyne_reflectivity_byte(reflectivity: ArrayLike, full_scale: float = 100.0) -> U8:
    """(N,) uint8: Velodyne's calibrated reflectivity byte of BlenSor reflectivities
    ``reflectivity`` (N,) float >= 0 (1 = a 100 % diffuse target, above 1 a retro-reflector:
    the material's, or under the radiometric return model the range-compensated reflectivity
    of :func:`.reported.unit_reflectivity`): ``round(full_scale * reflectivity)`` clipped to
    0..255 (VLP-16 User Manual 63-9243 Rev. E section 6.1 "Calibrated Reflectivity": 0-100
    diffuse, 101-255 retro-reflectors; ``full_scale`` 110 for the VLS-128, whose manual maps
    0-100 % to 0-110: :func:`.reported.velodyne_full_scale`). The packets' reflectivity byte
    and the intensity velodyne_pointcloud publishes (XYZIRT, PCD)."""
    r = np.asarray(reflectivity, dtype=np.float64)
    byte: U8 = np.clip(np.round(r * float(full_scale)), 0, 255).astype(np.uint8)
    return byte


def columns_per_packet(lasers: int, dual: bool = False) -> int:
    """Firing columns in one data packet of an ``lasers``-laser Velodyne: ``384 / lasers``
    (12 blocks of 32 records; VLP-16: 24, two firing sequences a block; HDL-32E, VLP-32C:
    12; HDL-64E: 6; VLS-128: 3), at least 1; half of it in dual return mode (a pair of
    blocks per firing: VLP-16 12, HDL-32E and VLP-32C 6)."""
    per = max(1, RECORDS_PER_PACKET // int(lasers)) if lasers else 1
    return max(1, per // 2) if dual else per


@overload
def packet_first_column(column: int, lasers: int, dual: bool = False) -> int: ...


@overload
def packet_first_column(column: I64, lasers: int, dual: bool = False) -> I64: ...


def packet_first_column(column: int | I64, lasers: int, dual: bool = False) -> int | I64:
    """The global column (int or int array) that starts the data packet holding global
    column ``column``: packets start at multiples of :func:`columns_per_packet` (see the
    module docstring)."""
    per = columns_per_packet(lasers, dual)
    return (column // per) * per


def is_dual(result: ScanResult) -> bool:
    """The result is a dual return scan: it carries ``return_number`` /
    ``number_of_returns`` and its capabilities say ``returns = "dual"`` with the
    ``echoes`` divergence algorithm (the Velodyne dual return mode; a result without
    capabilities: the defaults, ``blensor_addon/io/packets/__init__.py: _capabilities``)."""
    from . import _capabilities, has_returns
    caps = _capabilities(result)
    return has_returns(result) and caps.returns == "dual" and caps.divergence_algorithm == "echoes"


def return_mode(result: ScanResult) -> int:
    """The factory return-mode byte of ``result``'s packets: :data:`RETURN_DUAL` for a dual
    result (:func:`is_dual`), :data:`RETURN_LAST` for capabilities ``returns = "last"``
    (echoes), else :data:`RETURN_STRONGEST` (the default, and every other mode: its
    strongest returns)."""
    if is_dual(result):
        return RETURN_DUAL
    from . import _capabilities
    caps = _capabilities(result)
    if caps.returns == "last" and caps.divergence_algorithm == "echoes":
        return RETURN_LAST
    return RETURN_STRONGEST


def model_of(device: Device) -> Model:
    """The :class:`Model` of ``device``.

    Raises:
        SettingsError (``formats``): not a Velodyne model with a packet encoder (an imported
        calibration: import it over a VLP-16, HDL-32E or VLP-32C preset, which keeps the
        preset's model), or a laser table whose laser count is not the model's.
    """
    m = MODELS.get(device.model)
    if m is None:
        from . import packet_presets
        raise SettingsError("formats", "pcap of a Velodyne " + ", ".join(MODELS) + " or an Ouster OS0, OS1, "
                            "OS2 (presets " + ", ".join(packet_presets()) + "; for an imported calibration: "
                            "import it over a " + "/".join(MODELS) + " preset)", device.model)
    if device.table.lasers != m.lasers:
        raise SettingsError("formats", f"pcap of a {device.model} table with {m.lasers} lasers",
                            device.table.lasers)
    return m


def distance_unit(device: Device, model: Model) -> float:
    """The distance unit (m) of the packets: the table's ``extra["distance_resolution"]``
    (a calibration file's ``distance_resolution``) or the model's."""
    return float(device.table.extra.get("distance_resolution", model.distance_unit))


def azimuth_units(psi: ArrayLike) -> U16:
    """Velodyne azimuth (uint16, 0.01 deg, clockwise from ahead, 0..35999) of BlenSor
    azimuths ``psi`` (rad, counter-clockwise)."""
    deg = np.mod(-np.rad2deg(np.asarray(psi, dtype=np.float64)), 360.0)
    units: U16 = (np.round(deg * 100.0).astype(np.int64) % 36000).astype(np.uint16)
    return units


class VelodyneEncoder:
    """Packs firing columns into data packets of one model, across frames, on the unit's
    packet grid (module docstring): global column ``g = round(time * rotation_speed *
    columns)`` goes to slot ``g mod P`` of packet ``g // P`` (P = :func:`columns_per_packet`);
    a packet's columns that no frame fired (before the run's first column, after its last,
    across a gap) are firings of no return (distance 0) at their own times and azimuths.
    Columns of a packet not filled by one frame wait for the next (:meth:`add`);
    :meth:`finish` sends the last packet.

    Args:
        device: the :class:`~blensor_addon.core.capabilities.Device` (a model of
            :data:`MODELS`).
        start_ns: UNIX time (ns, int) of scene time 0, the run's time base
            (:mod:`blensor_addon.core.timebase`): the packets' timestamps and the pcap's.
        mode: the return-mode byte (:func:`return_mode`); :data:`RETURN_DUAL` writes pairs
            of blocks (the columns' ``range2``, the last return, in the even block, ``range`` in the odd).
    Raises:
        SettingsError: see :func:`model_of`.
    """

    def __init__(self, device: Device, start_ns: int = 0, mode: int = RETURN_STRONGEST) -> None:
        self.device = device
        self.model = model_of(device)
        self.unit = distance_unit(device, self.model)
        self.start_ns = int(start_ns)
        self.mode = int(mode)
        self.dual = self.mode == RETURN_DUAL
        self.per_packet = BLOCKS * self.model.sequences // (2 if self.dual else 1)
        assert self.per_packet == columns_per_packet(self.model.lasers, self.dual)
        self._packet_index: int | None = None  # the packet being filled (its global index)
        self._slots: dict[int, _Slot] = {}  # slot -> (time, psi, ranges (L,), refl (L,), ...)
        self._period = (1.0 / (device.rotation_speed * device.columns) if device.columns
                        else self.model.cycle_s)
        self._turn = 2.0 * math.pi * device.rotation_speed * (1 if device.direction == "ccw" else -1)

    def global_columns(self, cols: FiringColumns) -> I64:
        """(C,) int64: the global column of each firing column, ``round(time / period)``
        (period = ``1 / (rotation_speed * columns)`` s; column g fires at ``g * period``)."""
        g: I64 = np.round(np.asarray(cols.time, dtype=np.float64) / self._period).astype(np.int64)
        return g

    def add(self, cols: FiringColumns | None) -> list[tuple[int, bytes]]:
        """Queue ``cols`` and return the packets they complete: (pcap time, UNIX ns, payload).

        Raises:
            SettingsError (``formats``): two columns on one column of the unit's grid (a
            scan finer than the device's ``columns`` a turn).
        """
        out: list[tuple[int, bytes]] = []
        if cols is None:
            return out
        g = self.global_columns(cols)
        for c in range(len(cols)):
            p, slot = divmod(int(g[c]), self.per_packet)
            if self._packet_index is not None and p != self._packet_index:
                out += self.finish()  # the packet is done (the next column is in a later one)
            self._packet_index = p
            if slot in self._slots:
                raise SettingsError("formats", f"pcap of {self.device.model} columns on the unit's "
                                    f"firing grid (one every {self._period * 1e6:.3f} us)",
                                    f"two columns at {float(cols.time[c]):.9f} s")
            last = ((None, None) if cols.range2 is None or cols.reflectivity2 is None  # (set together)
                    else (cols.range2[:, c], cols.reflectivity2[:, c]))
            self._slots[slot] = (float(cols.time[c]), float(cols.psi[c]), cols.range[:, c],
                                 cols.reflectivity[:, c], *last)
            if slot == self.per_packet - 1:
                out += self.finish()
        return out

    def finish(self) -> list[tuple[int, bytes]]:
        """The packet being filled, its empty slots firings of no return at their own
        columns (none if empty)."""
        if not self._slots:
            self._packet_index = None
            return []
        k0 = min(self._slots)
        t0, psi0 = self._slots[k0][0], self._slots[k0][1]
        L = self.model.lasers
        cols: list[_Slot] = []
        for k in range(self.per_packet):
            if k in self._slots:
                cols.append(self._slots[k])
            else:
                dt = (k - k0) * self._period
                empty = (np.zeros(L), np.zeros(L, dtype=np.float32))
                cols.append((t0 + dt, psi0 + self._turn * dt, *empty, *empty))
        self._slots = {}
        self._packet_index = None
        return [self._packet(cols)]

    def _records(self, cols: list[_Slot], k: int) -> tuple[U16, U8]:
        """(distance units, reflectivity bytes) of the columns' returns ``k`` (2: ``range``,
        4: ``range2``, the last), each (blocks, sequences x L)."""
        m = self.model
        L = m.lasers
        # (k 2: range, 4: range2, which every slot has in dual mode, the only one that reads it)
        rng = np.stack(cast("list[Array]", [c[k] for c in cols]))  # (columns, L); 0 = no return
        laser = np.broadcast_to(np.arange(L), rng.shape)
        rng = np.where(rng > 0, raw_distance(self.device.table, laser, rng), 0.0)
        refl = np.stack(cast("list[Array]", [c[k + 1] for c in cols]))
        units = np.round(rng / self.unit)
        units = np.where((units > 0) & (units <= 0xFFFF), units, 0).astype(np.uint16)
        byte = np.where(units > 0, velodyne_reflectivity_byte(refl), 0).astype(np.uint8)
        n = len(cols) // m.sequences
        return units.reshape(n, m.sequences * L), byte.reshape(n, m.sequences * L)

    def _packet(self, cols: list[_Slot]) -> tuple[int, bytes]:
        m = self.model
        blocks = np.zeros(BLOCKS, dtype=BLOCK_DTYPE)
        blocks["flag"] = BLOCK_FLAG
        psi = np.array([c[1] for c in cols[::m.sequences]])
        rec = blocks["records"]  # (BLOCKS, 32)
        if self.dual:  # block pairs: the last return in the even block, the strongest in the odd
            blocks["azimuth"] = np.repeat(azimuth_units(psi), 2)
            rec["distance"][0::2], rec["reflectivity"][0::2] = self._records(cols, 4)
            rec["distance"][1::2], rec["reflectivity"][1::2] = self._records(cols, 2)
        else:
            blocks["azimuth"] = azimuth_units(psi)
            rec["distance"], rec["reflectivity"] = self._records(cols, 2)
        blocks["records"] = rec
        t0 = self.start_ns + int(round(cols[0][0] * 1e9))  # UNIX ns, exact (a float64 holds 238 ns)
        stamp_us = (t0 + 500) // 1000 % 3_600_000_000
        payload = blocks.tobytes() + struct.pack("<IBB", stamp_us, self.mode, m.product_id)
        assert len(payload) == PACKET_SIZE
        # the unit sends the packet once its last firing is done
        return self.start_ns + int(round((cols[-1][0] + m.cycle_s) * 1e9)), payload


def calibration_yaml(device: Device) -> str:
    """The unit's calibration in the ROS velodyne driver's YAML layout (``distance_resolution``
    and per laser ``laser_id``, ``rot_correction``, ``vert_correction`` (rad),
    ``dist_correction``, ``vert_offset_correction``, ``horiz_offset_correction`` (m)), which
    velodyne_pointcloud and velodyne-decoder read. ``rot_correction = -azimuth_deg`` in rad:
    the table's ``a_k`` is counter-clockwise (:mod:`~blensor_addon.core.sensors.calibration`)
    and Velodyne's azimuth clockwise.

    Raises:
        SettingsError: see :func:`model_of`.
    """
    model = model_of(device)
    t = device.table
    el = np.deg2rad(t.per_laser("elevation_deg"))
    rot = -np.deg2rad(t.per_laser("azimuth_deg"))
    dist = t.per_laser("distance_m")
    vo, ho = t.per_laser("vert_offset_m"), t.per_laser("horiz_offset_m")
    lines = [f"# {t.model or device.model}: written by BlenSor from its laser table "
             f"({t.source or 'no source'})",
             f"distance_resolution: {distance_unit(device, model)!r}", "lasers:"]
    for k in range(t.lasers):
        lines += [f"  - laser_id: {k}", f"    rot_correction: {float(rot[k])!r}",
                  f"    vert_correction: {float(el[k])!r}", f"    dist_correction: {float(dist[k])!r}",
                  f"    vert_offset_correction: {float(vo[k])!r}",
                  f"    horiz_offset_correction: {float(ho[k])!r}"]
    lines.append(f"num_lasers: {t.lasers}")
    return "\n".join(lines) + "\n"


__all__ = ["MODELS", "Model", "PACKET_SIZE", "UDP_PORT", "ENDPOINT", "VelodyneEncoder", "model_of",
           "RETURN_STRONGEST", "RETURN_LAST", "RETURN_DUAL", "is_dual", "return_mode",
           "azimuth_units", "calibration_yaml", "BLOCK_DTYPE", "velodyne_reflectivity_byte",
           "columns_per_packet", "packet_first_column", "RECORDS_PER_PACKET"]
