"""Raw sensor packets: what a real unit sends over UDP, encoded from scan results (numpy only).

This package owns the vendors' packet layouts (:mod:`.velodyne`, :mod:`.ouster`), the pcap
container they are written in (:func:`pcap_header`, :func:`pcap_record`: classic libpcap,
Ethernet / IPv4 / UDP) and :func:`firing_columns`, which turns a :class:`ScanResult` of a
rotating LiDAR back into the unit's firing columns (one column = one firing of every laser:
its time, its encoder azimuth, and per laser the measured range and reflectivity).

Value scales: one function per vendor and field (:func:`.velodyne.velodyne_reflectivity_byte`;
:func:`.ouster.ouster_reflectivity`, :func:`.ouster.ouster_signal`; their modules' docstrings
cite the vendors' definitions), used by the packet encoders and by the driver point layouts
(:mod:`..formats._layouts`: rosbag2 PointCloud2 and PCD), so the vendor's decoder reading
the pcap gives the intensities BlenSor's own driver-layout clouds hold. Under the radiometric
return model (a result with ``extra["signal"]``) the values come from the received power
(:mod:`.reported`: range-compensated reflectivity, Ouster's signal photons, Hesai's byte).

Everything about the unit comes from ``result.capabilities.device``
(:class:`~blensor_addon.core.capabilities.Device`), and the return mode and intensity model
from the capabilities' ``returns``, ``divergence_algorithm`` and ``intensity_model``
(:func:`_capabilities`), never from the sensor's settings.

Angles: BlenSor's azimuth psi (``ScanResult.azimuth``) is counter-clockwise seen from above,
0 straight ahead; Velodyne's packet azimuth is clockwise from ahead (velodyne_pointcloud puts
a point at ``x = r cos(a), y = -r sin(a)`` in REP-103 axes), Ouster's encoder angle is
counter-clockwise in the lidar frame, whose +x points backwards (Ouster's "Sensor Data"
documentation, lidar_to_sensor_transform turns it by 180 deg).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...core.capabilities import Capabilities, Device, Timing
from ...core.errors import SettingsError
from ...core.sensors.intensity import received_power
from .reported import NEAR_IR, SIGNAL, unit_reflectivity

if TYPE_CHECKING:
    from ...core.ndtypes import F32, F64, I64, Array
    from ...core.result import ScanResult

#: libpcap's classic file header: magic (microsecond stamps), version 2.4, no zone
#: correction, no accuracy, snapshot length, link type 1 (Ethernet)
PCAP_MAGIC = 0xA1B2C3D4
PCAP_SNAPLEN = 65535
LINKTYPE_ETHERNET = 1
ETHERTYPE_IPV4 = 0x0800
#: sent to the broadcast addresses, as a Velodyne does by default (user manuals: destination
#: 255.255.255.255); an Ouster sends to the host that configured it: the same here
BROADCAST_MAC = b"\xff" * 6
BROADCAST_IP = "255.255.255.255"


def pcap_header() -> bytes:
    """The 24-byte libpcap global header (little-endian, microsecond timestamps, Ethernet)."""
    return struct.pack("<IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, PCAP_SNAPLEN, LINKTYPE_ETHERNET)


def _ip(text: str) -> bytes:
    return bytes(int(v) for v in text.split("."))


def _checksum(header: bytes) -> int:
    """RFC 791 header checksum: one's complement of the one's complement sum of 16-bit words."""
    s: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


@dataclass(frozen=True)
class Endpoint:
    """Where a unit's packets come from and go to: source MAC and IPv4, UDP ports."""

    src_mac: bytes
    src_ip: str
    src_port: int
    dst_port: int
    dst_ip: str = BROADCAST_IP
    dst_mac: bytes = BROADCAST_MAC


def pcap_record(stamp: int, payload: bytes, ep: Endpoint, ident: int) -> bytes:
    """One pcap record: a 16-byte record header (``stamp`` ns since the UNIX epoch, an int,
    rounded to us and split in s and us) and an Ethernet II frame holding an IPv4 (no
    options, don't-fragment, TTL 64,
    identification ``ident``) / UDP (checksum 0 = none, RFC 768) datagram with ``payload``.
    Payloads above the Ethernet MTU (an Ouster packet of 128 beams, 24.9 kB) are written
    as one unfragmented frame, as a capture with reassembly shows them."""
    udp_len = 8 + len(payload)
    ip_hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ident & 0xFFFF, 0x4000, 64, 17, 0,
                         _ip(ep.src_ip), _ip(ep.dst_ip))
    ip_hdr = ip_hdr[:10] + struct.pack("!H", _checksum(ip_hdr)) + ip_hdr[12:]
    frame = (ep.dst_mac + ep.src_mac + struct.pack("!H", ETHERTYPE_IPV4) + ip_hdr
             + struct.pack("!HHHH", ep.src_port, ep.dst_port, udp_len, 0) + payload)
    us = (int(stamp) + 500) // 1000
    return struct.pack("<IIII", us // 1_000_000, us % 1_000_000, len(frame), len(frame)) + frame


@dataclass
class FiringColumns:
    """A result's firings, one column per firing of every laser, in time order.

    Attributes:
        time: (C,) float64 s, when the column's first laser fired (scene time).
        psi: (C,) float64 rad, BlenSor azimuth of the head (encoder) at that time,
            unwrapped (consecutive columns differ by less than pi).
        range: (L, C) float64 m, the range each laser measured, 0 where it had no return
            (single return: each beam's strongest; dual: the strongest, or the second
            strongest when the strongest is the last return).
        reflectivity: (L, C) float32 >= 0 (above 1: retro-reflectors), what the unit's
            calibrated mode reports (:func:`.reported.unit_reflectivity`: range-compensated
            under the radiometric model, else the material's); intensity: (L, C) float32 (0
            where no return).
        range2, reflectivity2, intensity2: (L, C) the second return of a dual return mode
            (else None): Velodyne's dual mode the last return of each beam (the same as
            ``range`` where the beam gave one return); Ouster's dual profile the second
            strongest (0 where the beam gave one return).
        signal, signal2: (L, C) float32 received power of the returns (relative,
            :mod:`.reported`) when the result has ``extra["signal"]``, else None.
        near_ir: (L, C) float32 ambient photons when the result has ``extra["near_ir"]``
            (the ambient light model's hook), else None.
    """

    time: F64
    psi: F64
    range: F64
    reflectivity: F32
    intensity: F32
    range2: F64 | None = None
    reflectivity2: F32 | None = None
    intensity2: F32 | None = None
    signal: F32 | None = None
    signal2: F32 | None = None
    near_ir: F32 | None = None

    def __len__(self) -> int:
        return int(self.time.shape[0])


#: what the encoders assume of a result assembled without a sensor (no ``capabilities``):
#: the defaults, one strongest return a ray under the Lambertian intensity model
_BARE = Capabilities(Timing("exposure"))


def _capabilities(result: ScanResult) -> Capabilities:
    """``result.capabilities``, or for a result assembled without a sensor (by hand, in a
    plug-in's tests) the :class:`~blensor_addon.core.capabilities.Capabilities` defaults,
    which the encoders read only for ``returns`` (``strongest``), ``divergence_algorithm``
    (``echoes``) and ``intensity_model`` (``lambert``)."""
    return result.capabilities if result.capabilities is not None else _BARE


def has_returns(result: ScanResult) -> bool:
    """The result carries ``return_number`` / ``number_of_returns`` (settings with several
    returns per beam: ``returns`` dual, dual_ouster or all)."""
    return "return_number" in result.extra or "number_of_returns" in result.extra


def return_power(result: ScanResult) -> F64:
    """(N,) float64 received power of each return of ``result`` (relative): what ranks a
    beam's returns as the sensor ranked them (:func:`~blensor_addon.core.sensors.intensity.
    received_power` of its ``intensity``, ``range`` and the capabilities' ``intensity_model``,
    :func:`_capabilities`)."""
    return received_power(result.intensity, result.range, _capabilities(result).intensity_model)


def _rays(result: ScanResult) -> Array:
    """``result.ray_index`` of a result with a ray grid (every result these encoders take:
    :class:`~blensor_addon.core.result.ScanResult` checks that a grid comes with it)."""
    ray_index = result.ray_index
    assert ray_index is not None
    return ray_index


def _strongest_of(beam: I64, power: F64, return_number: Array) -> I64:
    """(M,) int64 positions of each beam's strongest row (largest ``power``, the smaller
    ``return_number`` on a tie) among rows of beams ``beam`` (K,), one per beam, beams
    ascending."""
    order: I64 = np.lexsort((return_number, -power, beam))
    first = np.ones(order.shape[0], bool)
    first[1:] = beam[order][1:] != beam[order][:-1]
    rows: I64 = order[first]
    return rows


def strongest_per_beam(result: ScanResult) -> I64:
    """(M,) int64 rows of ``result``: each beam's strongest return (largest received
    power, :func:`return_power`; the nearer one on a tie), beams told apart by
    ``ray_index``, in the result's order;
    every row for a result with one return per beam (:func:`has_returns` false). What a
    single-return consumer of a multi-return result keeps (the single-return packets, the
    organized ouster-ros cloud: one point a cell, as the driver's first-return cloud)."""
    n = len(result)
    if not has_returns(result) or not n:
        return np.arange(n, dtype=np.int64)
    beam = _rays(result).astype(np.int64)
    return np.sort(_strongest_of(beam, return_power(result), result.return_number))


def second_strongest(result: ScanResult, strongest: I64 | None = None) -> I64:
    """(K,) int64 rows of ``result``: the second strongest return of each beam that has
    more than one (the strongest of its rows other than :func:`strongest_per_beam`'s,
    ``strongest``), in the result's order; none for a result with one return per beam.
    Ouster's dual profile's second return (RANGE2)."""
    if strongest is None:
        strongest = strongest_per_beam(result)
    rest = np.ones(len(result), bool)
    rest[strongest] = False
    idx = np.flatnonzero(rest)
    if not idx.size:
        return idx.astype(np.int64)
    beam = _rays(result).astype(np.int64)[idx]
    return np.sort(idx[_strongest_of(beam, return_power(result)[idx], result.return_number[idx])])


def dual_pair(result: ScanResult) -> tuple[I64, I64]:
    """``(strong, last)``: (M,) int64 rows of ``result``, one pair per beam that returned,
    in the order of :func:`strongest_per_beam`: Velodyne's dual return pair (VLP-16 User
    Manual 63-9243 Rev. E section 9.3 "Dual Return Mode"; the VLP-32C manual's the same):
    ``last`` the beam's last return (largest ``return_number``), ``strong`` its strongest
    return, or the second strongest when the strongest is the last (the strongest of its
    other returns); a beam with one return gives it twice (the manual: "the data will be
    identical in the even|odd block pairs")."""
    n = len(result)
    beam = _rays(result).astype(np.int64)
    rn = result.return_number.astype(np.int64)
    order = np.lexsort((rn, beam))  # per beam nearest first
    b = beam[order]
    end = np.ones(n, bool)
    end[:-1] = b[1:] != b[:-1]
    last_rows = order[end]  # one per beam, beams ascending
    single = np.zeros(n, bool)
    start = np.ones(n, bool)
    start[1:] = b[1:] != b[:-1]
    single[order[start & end]] = True
    # the others: every row but the beam's last; a beam with one return keeps its row
    cand = np.ones(n, bool)
    cand[last_rows] = False
    cand |= single
    idx = np.flatnonzero(cand)
    strong_rows = idx[_strongest_of(beam[idx], return_power(result)[idx], rn[idx])]  # beams ascending
    o = np.argsort(strong_rows, kind="stable")
    return strong_rows[o], last_rows[o]


def direction_sign(device: Device) -> int:
    """+1 for a head spinning counter-clockwise seen from above (psi grows with time), -1
    for clockwise (Velodyne, Ouster)."""
    return 1 if device.direction == "ccw" else -1


def firing_columns(result: ScanResult, device: Device, clean: bool = False,
                   dual: bool | str | None = None) -> FiringColumns | None:
    """The firing columns of ``result`` (a rotating LiDAR's scan with a ray grid of
    ``L x C`` = lasers x columns, ``ray_index = channel * C + column``), for ``device``.

    Each column's time and encoder azimuth come from the returns of the lasers that fire
    first in the cycle (``table.firing_s`` smallest; psi_col = azimuth + a_k,
    ``a_k = table.azimuth_deg``), fitted as a straight line over the columns (the head turns
    ``2 pi device.rotation_speed`` rad/s, so columns without any return still get their
    time and azimuth). When no such laser returned, every return is used, its azimuth
    corrected for the head's turn during its firing offset. A result with several
    returns per beam gives each beam's strongest return (:func:`strongest_per_beam`), or
    with ``dual`` Velodyne's dual return pair (:func:`dual_pair`: ``range`` the strongest or
    second strongest, ``range2`` the last), or with ``dual="ouster"`` Ouster's dual
    profile (``range`` the strongest, ``range2`` the second strongest: :func:`second_strongest`).

    Args:
        clean: encode ``range`` (the ground truth) instead of ``range_noisy`` (what the unit
            measures).
        dual: ``"velodyne"`` (or True) or ``"ouster"``: fill ``range2``,
            ``reflectivity2``, ``intensity2`` (the dual return modes), else None.
    Returns:
        :class:`FiringColumns`, or None when the result has no return (no column time to
        place).
    Raises:
        SettingsError (``formats``): the result has no grid, or its rows are not the
            table's lasers.
    """
    table = device.table
    if not result.has_grid:
        raise SettingsError("formats", "pcap of a sensor with a ray grid (lasers x columns)",
                            result.grid_shape)
    rows, cols = result.grid_shape
    L = table.lasers
    if rows != L:
        raise SettingsError("formats", f"pcap of a {device.model} scan with {L} lasers (grid rows)", rows)
    if not len(result):
        return None
    last = None
    if dual == "ouster":
        first = strongest_per_beam(result)
        last = second_strongest(result, first)
    elif dual:
        first, last = dual_pair(result)
    else:
        first = strongest_per_beam(result)
    ch = result.channel.astype(np.int64)[first]
    col = (_rays(result).astype(np.int64) % cols)[first]
    t = result.timestamp[first]
    az = result.azimuth.astype(np.float64)[first]
    a_k = np.deg2rad(table.per_laser("azimuth_deg"))
    fire = table.per_laser("firing_s")
    sign = direction_sign(device)
    spin = 2.0 * math.pi * device.rotation_speed  # rad/s
    early = np.isclose(fire[ch], fire.min(), rtol=0.0, atol=1e-12)
    if early.any():
        t_a, psi_a, col_a = t[early] - fire[ch[early]], az[early] + a_k[ch[early]], col[early]
    else:  # no return from the first lasers of a cycle: undo each laser's firing delay
        t_a = t - fire[ch]
        psi_a = az + a_k[ch] - sign * spin * fire[ch]
        col_a = col
    # column time: a straight line over the column index (least squares, exact for a grid
    # of evenly spaced columns); one column: the period of the device's columns
    if np.unique(col_a).size >= 2:
        slope, icept = np.polyfit(col_a.astype(np.float64), t_a, 1)
    else:
        slope = 1.0 / (device.rotation_speed * device.columns) if device.columns else 0.0
        icept = float(np.median(t_a - slope * col_a))
    times = icept + slope * np.arange(cols, dtype=np.float64)
    # encoder azimuth at those times: psi(t) = psi0 + sign * spin * t, psi0 by a circular mean
    resid = psi_a - sign * spin * times[col_a]
    psi0 = math.atan2(float(np.mean(np.sin(resid))), float(np.mean(np.cos(resid))))
    psi = psi0 + sign * spin * times
    shape = (L, cols)
    rng = np.zeros(shape)
    refl = np.zeros(shape, dtype=np.float32)
    inten = np.zeros(shape, dtype=np.float32)
    rvals = (result.range if clean else result.range_noisy)[first].astype(np.float64)
    rng[ch, col] = np.maximum(rvals, 0.0)
    unit_refl = unit_reflectivity(result)
    refl[ch, col] = unit_refl[first]
    inten[ch, col] = result.intensity[first]
    out = FiringColumns(times, psi, rng, refl, inten)
    signal, near_ir = result.extra.get(SIGNAL), result.extra.get(NEAR_IR)
    if signal is not None:
        out.signal = np.zeros(shape, dtype=np.float32)
        out.signal[ch, col] = signal[first]
    if near_ir is not None:
        out.near_ir = np.zeros(shape, dtype=np.float32)
        out.near_ir[ch, col] = near_ir[first]
    if last is not None:  # the second returns (the pair's other row, or a beam's second strongest)
        out.range2, out.reflectivity2 = np.zeros(shape), np.zeros(shape, dtype=np.float32)
        out.intensity2 = np.zeros(shape, dtype=np.float32)
        ch2 = result.channel.astype(np.int64)[last]
        col2 = (_rays(result).astype(np.int64) % cols)[last]
        out.range2[ch2, col2] = np.maximum((result.range if clean else result.range_noisy)[last], 0.0)
        out.reflectivity2[ch2, col2] = unit_refl[last]
        out.intensity2[ch2, col2] = result.intensity[last]
        if signal is not None:
            out.signal2 = np.zeros(shape, dtype=np.float32)
            out.signal2[ch2, col2] = signal[last]
    return out


def packet_presets() -> tuple[str, ...]:
    """The rotating LiDAR's presets whose packets a vendor module here encodes: every
    Velodyne preset whose model :data:`.velodyne_models.MODELS` has and every Ouster preset, in
    :data:`~...core.sensors.rotating_presets.PRESETS` order (named in the pcap writer's
    refusals, so a user sees every choice)."""
    from ...core.sensors.rotating_presets import PRESETS, preset_table
    from .velodyne_models import MODELS
    out = []
    for name in PRESETS:
        if name == "generic":  # (its table is built from typed elevations: no unit)
            continue
        table = preset_table(name)
        if table.vendor == "ouster" or (table.vendor == "velodyne" and table.model in MODELS):
            out.append(name)
    return tuple(out)


__all__ = ["Endpoint", "FiringColumns", "pcap_header", "pcap_record", "firing_columns", "direction_sign",
           "has_returns", "strongest_per_beam", "second_strongest", "dual_pair", "packet_presets"]
