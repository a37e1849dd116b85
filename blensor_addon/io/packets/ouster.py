"""Ouster lidar data packets (OS0, OS1, OS2) of the LEGACY, RNG19_RFL8_SIG16_NIR16 and
RNG19_RFL8_SIG16_NIR16_DUAL profiles, and the sensor metadata JSON that reads them (numpy only).

LEGACY (Ouster "Sensor Data" / "Lidar Data Format", firmware 2.x, ``udp_profile_lidar:
LEGACY``; the same in the OS1 software user guides of firmware 1.13): a UDP payload to port
7502 of 16 measurement blocks (columns), each

- header: ``uint64`` timestamp (ns), ``uint16`` measurement id (column 0..W-1),
  ``uint16`` frame id, ``uint32`` encoder count (0..90111, ``90112 m / W``);
- one 12-byte channel data block per beam: ``uint32`` range (mm, low 20 bits),
  ``uint16`` reflectivity, ``uint16`` signal photons, ``uint16`` near-infrared photons,
  ``uint16`` unused;
- ``uint32`` block status, 0xFFFFFFFF for a valid column, 0 otherwise;

RNG19_RFL8_SIG16_NIR16 (firmware 2.2 on, "single return" profile): a 32-byte packet header
(``uint16`` packet type 1, ``uint16`` frame id, 24-bit initialization id, 40-bit serial
number, alert flags, shutdown and shot-limiting countdowns and status), 16 columns of a
12-byte header (``uint64`` timestamp, ``uint16`` measurement id, ``uint16`` status, bit 0 =
valid) and 12 bytes per beam (range: low 19 bits of a ``uint32``, mm; ``uint8``
reflectivity; one reserved byte; ``uint16`` signal; ``uint16`` near-infrared; a reserved
byte; ``uint8`` window), and a 32-byte packet footer, zero (firmware 2.x; 3.x puts a CRC-64
in its last 8 bytes, which receivers do not check).

RNG19_RFL8_SIG16_NIR16_DUAL (firmware 2.2 on, "dual return" profile): the same packet header,
column headers and footer; 16 bytes per beam: ``uint32`` range (low 19 bits, mm; flags in bits
19-23) with the ``uint8`` reflectivity in its high byte, the second return's ``uint32`` range2 and
reflectivity2 alike, ``uint16`` signal, ``uint16`` signal2, ``uint16`` near-infrared, a reserved
byte, ``uint8`` window (offsets as ouster-sdk 1.0.1's ``PacketFormat.set_field`` places RANGE,
REFLECTIVITY, RANGE2, REFLECTIVITY2, SIGNAL, SIGNAL2, NEAR_IR, WINDOW: bytes 0-2, 3, 4-6, 7, 8,
10, 12, 15). The first return is each beam's strongest, the second its second strongest (0 where
it had one): the ``dual_ouster`` return mode; a result with one return per beam
gives range2 = 0 everywhere. The layouts are those ouster-sdk
decodes (ouster_core/src/parsing.cpp, ``LEGACY_FIELD_INFO``, ``SINGLE_FIELD_INFO`` and the
header fields of ``PacketFormat::Impl``).

All little-endian. Column m of a frame fires at encoder angle ``theta = 2 pi (1 - m / W)``
in the lidar frame; Ouster's range-to-XYZ formula places a return at
``xyz = n (cos theta, sin theta, 0) + (r - n) dir(theta - beam_azimuth, beam_altitude)``
with ``n = lidar_origin_to_beam_origin_mm``: the range r is the path from the beam origin
plus n, which is what BlenSor's ``range`` of an Ouster table holds (core/sensors/rotating.py,
"beam_origin_m"): the packets carry it as it is, in mm.

Scales (one per field, the packets' and ouster-ros's alike, :func:`ouster_reflectivity`,
:func:`ouster_signal`): ``reflectivity`` is Ouster's calibrated reflectivity, 0-100 for
Lambertian targets of 0-100 % reflectivity, 101-255 for retro-reflectors (Ouster "Sensor
Data" documentation, "Calibrated Reflectivity"): ``round(100 * reflectivity)`` of BlenSor's
material reflectivity, clipped to 0..255; ``signal`` (photons) is ``round(100 * intensity)``
of BlenSor's intensity (reflectivity x |cos incidence|), clipped to 0..65535; near-infrared:
0. Under the radiometric return model (a result with ``extra["signal"]``, :mod:`.reported`)
reflectivity is range-compensated (``signal x r^2``: incidence shows, range does not), signal
the signal photons falling as 1 / r^2 (:func:`.reported.ouster_signal_photons`, a derived
per-unit scale) and near-infrared the ambient photons of ``extra["near_ir"]`` where a result
has them, else 0. ouster-ros publishes the signal as the point's
``intensity`` and the reflectivity as its ``reflectivity`` (``point_cloud_compose.h``), so
BlenSor's ouster-ros clouds (:mod:`..formats._layouts`) carry these same numbers.

Pixel shifts (:func:`pixel_shift_by_row`): the table's ``pixel_shift_by_row`` when it was
measured for the grid's columns, else ``round(W a_k / 360)`` less its smallest value (a real
unit's are all >= 0: ouster-sdk's sample ``2_1_2_os1-991913000010-64_legacy.json`` has
``19, 13, 6, 0, ...`` for azimuths ``3.07, 0.90, -1.26, -3.38, ...`` deg at W = 1024): the
metadata's ``data_format.pixel_shift_by_row`` and the destaggered ouster-ros cloud use the same.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ...core.errors import SettingsError
from ...core.sensors.rotating_presets import OUSTER_LIDAR_MODES
from . import Endpoint, FiringColumns
from .reported import ouster_near_ir, ouster_signal_photons

if TYPE_CHECKING:
    from ...core.capabilities import Device
    from ...core.ndtypes import I64, U8, U16, U32, Integer
    from ...core.sensors.calibration import LaserTable

UDP_PORT = 7502
COLUMNS_PER_PACKET = 16
ENCODER_TICKS = 90112
VALID = 0xFFFFFFFF
#: lidar modes the firmware offers (columns x Hz)
#: the firmware's lidar modes, "WxHz" (:data:`~..core.sensors.rotating_presets.OUSTER_LIDAR_MODES`)
LIDAR_MODES = tuple(f"{w}x{hz}" for w, hz in OUSTER_LIDAR_MODES)
#: the lidar data profiles written (``udp_profile_lidar``)
PROFILES = ("LEGACY", "RNG19_RFL8_SIG16_NIR16", "RNG19_RFL8_SIG16_NIR16_DUAL")
DUAL = "RNG19_RFL8_SIG16_NIR16_DUAL"
#: the initialization id of the packets and the metadata (any 24-bit value the two share)
INIT_ID = 0x5B1E50
#: Ouster's documented factory address range is link-local / DHCP; 169.254.x as a unit
#: without DHCP takes; MAC in Ouster's OUI bc:0f:a7
ENDPOINT = Endpoint(src_mac=b"\xbc\x0f\xa7\x00\x00\x01", src_ip="169.254.0.1",
                    src_port=UDP_PORT, dst_port=UDP_PORT)
#: the lidar frame turned by 180 deg about z into the sensor frame, the lidar origin 36.18 mm
#: above the sensor frame's (Ouster metadata of OS1 units, e.g. ouster-sdk's test file
#: ``tests/metadata/2_1_2_os1-991913000010-64_legacy.json``); used when the table has none
DEFAULT_LIDAR_TO_SENSOR = (-1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 36.18, 0.0, 0.0, 0.0, 1.0)


def pixel_dtype() -> np.dtype[np.void]:
    """One beam's 12-byte channel data block."""
    return np.dtype([("range", "<u4"), ("reflectivity", "<u2"), ("signal", "<u2"), ("near_ir", "<u2"),
                     ("unused", "<u2")])


def column_dtype(beams: int, profile: str = "LEGACY") -> np.dtype[np.void]:
    """One measurement block of ``beams`` beams: LEGACY 16 + 12 beams + 4 bytes,
    RNG19_RFL8_SIG16_NIR16 12 + 12 beams bytes, its DUAL 12 + 16 beams bytes (the
    reflectivities are the range words' high bytes)."""
    if profile == "LEGACY":
        return np.dtype([("timestamp", "<u8"), ("measurement_id", "<u2"), ("frame_id", "<u2"),
                         ("encoder_count", "<u4"), ("px", pixel_dtype(), (beams,)), ("status", "<u4")])
    if profile == DUAL:
        px = np.dtype([("range", "<u4"), ("range2", "<u4"), ("signal", "<u2"), ("signal2", "<u2"),
                       ("near_ir", "<u2"), ("reserved", "u1"), ("window", "u1")])
        return np.dtype([("timestamp", "<u8"), ("measurement_id", "<u2"), ("status", "<u2"),
                         ("px", px, (beams,))])
    px = np.dtype([("range", "<u4"), ("reflectivity", "u1"), ("reserved", "u1"), ("signal", "<u2"),
                   ("near_ir", "<u2"), ("reserved2", "u1"), ("window", "u1")])
    return np.dtype([("timestamp", "<u8"), ("measurement_id", "<u2"), ("status", "<u2"),
                     ("px", px, (beams,))])


#: the 32-byte packet header of the non-LEGACY profiles
HEADER_DTYPE = np.dtype([("packet_type", "<u2"), ("frame_id", "<u2"), ("init_sn", "<u8"),
                         ("alert_flags", "u1"), ("reserved", "V3"), ("countdown_thermal", "u1"),
                         ("countdown_shot", "u1"), ("thermal_shutdown", "u1"), ("shot_limiting", "u1"),
                         ("reserved2", "V12")])
assert HEADER_DTYPE.itemsize == 32


def ouster_reflectivity(reflectivity: ArrayLike) -> U8:
    """(N,) uint8: Ouster's calibrated reflectivity of BlenSor reflectivities ``reflectivity``
    (N,) float >= 0 (1 = a 100 % Lambertian target, above 1 a retro-reflector): ``round(100 * reflectivity)`` clipped
    to 0..255 (module docstring). The packets' ``reflectivity`` and ouster-ros's."""
    r = np.asarray(reflectivity, dtype=np.float64)
    byte: U8 = np.clip(np.round(r * 100.0), 0, 255).astype(np.uint8)
    return byte


def ouster_range_mm(range_m: ArrayLike) -> U32:
    """(N,) uint32: Ouster's ``range`` field (mm) of ranges ``range_m`` (N,) float m
    (Ouster's convention, module docstring): ``round(1000 range)`` of the float64 value, 0
    where there is no return (range <= 0). The packets' ``range`` and ouster-ros's."""
    r = np.asarray(range_m, dtype=np.float64)
    mm: U32 = np.where(r > 0, np.round(r * 1000.0), 0).astype(np.uint32)
    return mm


def ouster_signal(intensity: ArrayLike) -> U16:
    """(N,) uint16: the ``signal`` field (photons) of BlenSor intensities ``intensity`` (N,)
    float (reflectivity x |cos incidence|, 0..1): ``round(100 * intensity)`` clipped to
    0..65535 (module docstring). The packets' ``signal`` and ouster-ros's ``intensity``."""
    v = np.asarray(intensity, dtype=np.float64)
    signal: U16 = np.clip(np.round(v * 100.0), 0, 0xFFFF).astype(np.uint16)
    return signal


def pixel_shift_by_row(table: LaserTable, columns: int, direction: str = "cw") -> I64:
    """(L,) int64 ``pixel_shift_by_row`` of an Ouster ``table`` on a grid of ``columns``
    columns a turn: the table's (``extra["pixel_shift_by_row"]``, one per beam) when it has
    no ``columns_per_frame`` or that is ``columns``; else the whole columns each beam's
    azimuth offset ``a_k`` amounts to, ``s_k = round(columns a_k / 360)`` (negated for a head
    spinning counter-clockwise, whose encoder angle grows with the column), less the
    smallest ``s_k`` (module docstring). Destaggering puts measurement column
    ``(v - shift_k) mod columns`` of beam k in column v (ouster-sdk ``destagger``)."""
    L = table.lasers
    extra = table.extra
    given = extra.get("pixel_shift_by_row")
    measured_for = extra.get("columns_per_frame")
    if given is not None and len(given) == L and (measured_for is None or int(measured_for) == int(columns)):
        return np.asarray(given, dtype=np.int64)
    sign = -1.0 if direction == "ccw" else 1.0
    s: I64 = np.round(sign * table.per_laser("azimuth_deg") * int(columns) / 360.0).astype(np.int64)
    return s - s.min() if s.size else s


def prod_line(model: str) -> str:
    """Ouster's product line name of a model: ``OS1-64`` -> ``OS-1-64``."""
    return model.replace("OS", "OS-", 1) if model.startswith("OS") and not model.startswith("OS-") else model


class OusterEncoder:
    """Packs firing columns into lidar packets of 16 columns, across frames (columns
    of a packet not filled by one frame wait for the next; :meth:`finish` sends the last
    one with the missing columns marked invalid).

    Args:
        device: :class:`~blensor_addon.core.capabilities.Device` of an Ouster unit: its
            table's elevations and azimuth offsets are the beam intrinsics, ``beam_origin_m``
            Ouster's n; ``table.extra`` may hold ``columns_per_frame``,
            ``pixel_shift_by_row``, ``lidar_to_sensor_transform``, ``imu_to_sensor_transform``,
            ``prod_sn``, ``build_rev``.
        start_ns: UNIX time (ns, int) of scene time 0, the run's time base
            (:mod:`blensor_addon.core.timebase`).
        profile: one of :data:`PROFILES`.
    Raises:
        SettingsError (``formats``): not an Ouster OS0/OS1/OS2, or columns x rotation speed
        not one of the firmware's lidar modes (:data:`LIDAR_MODES`); (``pcap.ouster_profile``)
        an unknown profile.
    """

    def __init__(self, device: Device, start_ns: int = 0, profile: str = "LEGACY") -> None:
        if device.vendor != "ouster" or device.model[:3] not in ("OS0", "OS1", "OS2"):
            raise SettingsError("formats", "pcap of an Ouster OS0, OS1 or OS2", device.model)
        if profile not in PROFILES:
            raise SettingsError("pcap.ouster_profile", "one of " + ", ".join(PROFILES), profile)
        t = device.table
        self.device = device
        self.profile = profile
        self.dual = profile == DUAL  # two returns per pixel (pcap.PacketEncoder.dual)
        self.start_ns = int(start_ns)
        try:
            self.serial = int(str(t.extra.get("prod_sn", "0")))
        except ValueError:
            self.serial = 0
        self.beams = t.lasers
        # the grid actually cast (Device.columns); a table's own columns when the device has none
        self.width = int(round(device.columns) or t.extra.get("columns_per_frame") or 0)
        self.mode = f"{self.width}x{int(round(device.rotation_speed))}"
        whole = math.isclose(device.rotation_speed, round(device.rotation_speed))
        if self.mode not in LIDAR_MODES or not whole:
            raise SettingsError("formats", "pcap of an Ouster lidar mode " + ", ".join(LIDAR_MODES)
                                + " (columns x rotation speed)",
                                f"{device.columns:g}x{device.rotation_speed:g}")
        l2s = np.asarray(t.extra.get("lidar_to_sensor_transform", DEFAULT_LIDAR_TO_SENSOR), dtype=np.float64)
        self.lidar_to_sensor = l2s.reshape(4, 4)
        #: yaw of the lidar frame in the sensor frame (pi for every Ouster unit)
        self.l2s_yaw = math.atan2(self.lidar_to_sensor[1, 0], self.lidar_to_sensor[0, 0])
        self.dtype = column_dtype(self.beams, profile)
        self.range_max = 2 ** (20 if profile == "LEGACY" else 19)
        self._packet: int | None = None  # index of the packet being filled
        self._cols = np.zeros(COLUMNS_PER_PACKET, dtype=self.dtype)
        self._last_time = 0.0

    def measurement_ids(self, cols: FiringColumns) -> I64:
        """(C,) int64 unwrapped measurement ids ``frame * W + m`` of the columns: m from the
        column's encoder angle (``theta = psi - yaw(lidar_to_sensor)``, ``m = W (1 - theta / 2
        pi)``), the frame from the column's time: ``u = round(t * rotation_speed * W)`` columns
        since scene time 0, ``frame * W + m = u + ((m - u) mod W)`` (the frame id counts the
        turns, and grows where m wraps to 0).

        Raises:
            SettingsError (``formats``): column azimuths off the unit's W-column grid by more
            than 0.05 column (the packets could only place them on it).
        """
        W = self.width
        theta = cols.psi - self.l2s_yaw
        exact = W * (1.0 - theta / (2.0 * math.pi))
        off = float(np.max(np.abs(exact - np.round(exact)))) if len(cols) else 0.0
        if off > 0.05:
            raise SettingsError("formats", f"pcap of {self.device.model} columns on the unit's encoder grid "
                                f"(azimuths multiples of 360/{W} deg: a sector whose ends are)",
                                f"columns {off:.2f} of a column off it")
        m = np.mod(np.round(exact).astype(np.int64), W)
        u: I64 = np.round(cols.time * self.device.rotation_speed * W).astype(np.int64)
        ids: I64 = u + np.mod(m - u, W)  # m - u is the head's phase, the same for every column
        return ids

    def add(self, cols: FiringColumns | None) -> list[tuple[int, bytes]]:
        """Queue ``cols``; returns the packets completed: (pcap time, UNIX ns, payload)."""
        out: list[tuple[int, bytes]] = []
        if cols is None:
            return out
        ids = self.measurement_ids(cols)
        rng_mm: Integer  # uint32 (the reflectivity ORed into its high byte in the dual profile)
        rng2: Integer
        rng_mm, refl, sig = self._fields(cols.range, cols.reflectivity, cols.intensity, cols.signal)
        nir = np.zeros(rng_mm.shape, np.uint16)  # NEAR_IR: 0 without an ambient light model
        if cols.near_ir is not None:
            ambient = ouster_near_ir(cols.near_ir.ravel(), rng_mm.size).reshape(rng_mm.shape)
            nir = np.where(rng_mm > 0, ambient, 0).astype(np.uint16)
        if self.profile == DUAL:  # the reflectivity in the range word's high byte; the second return
            rng_mm = rng_mm | (refl.astype(np.uint32) << 24)
            if cols.range2 is None or cols.reflectivity2 is None or cols.intensity2 is None:  # (set together)
                rng2, sig2 = np.zeros_like(rng_mm), np.zeros_like(sig)
            else:
                rng2, refl2, sig2 = self._fields(cols.range2, cols.reflectivity2, cols.intensity2,
                                                 cols.signal2)
                rng2 = rng2 | (refl2.astype(np.uint32) << 24)
        # integer ns: a float64 UNIX time holds 238 ns, not the packets' 1 ns
        stamps = np.uint64(self.start_ns) + np.round(cols.time * 1e9).astype(np.uint64)
        for c in range(len(cols)):
            p, slot = divmod(int(ids[c]), COLUMNS_PER_PACKET)
            if self._packet is not None and p != self._packet:
                out.append(self._emit())
            if self._packet is None:
                self._start(p)
            rec = self._cols[slot]
            rec["timestamp"] = stamps[c]
            rec["status"] = VALID if self.profile == "LEGACY" else 1
            px = rec["px"]
            if self.profile == DUAL:
                px["range"], px["signal"] = rng_mm[:, c], sig[:, c]
                px["range2"], px["signal2"] = rng2[:, c], sig2[:, c]
            else:
                px["range"], px["reflectivity"], px["signal"] = rng_mm[:, c], refl[:, c], sig[:, c]
            px["near_ir"] = nir[:, c]
            rec["px"] = px
            self._cols[slot] = rec
            self._last_time = float(cols.time[c])
        return out

    def _fields(self, rng: ArrayLike, refl: ArrayLike, inten: ArrayLike,
                signal: ArrayLike | None = None) -> tuple[U32, Integer, U16]:
        """(range mm uint32, reflectivity, signal uint16) of (L, C) ranges (m; 0: no return),
        reflectivities (the unit's, :func:`.reported.unit_reflectivity`) and intensities: 0
        where there is no return or the range exceeds the profile's bits. SIGNAL: the signal
        photons of the received powers ``signal`` (L, C) when given
        (:func:`.reported.ouster_signal_photons`), else :func:`ouster_signal` of the
        intensities."""
        rng_mm = ouster_range_mm(rng)
        rng_mm = np.where(rng_mm < self.range_max, rng_mm, 0).astype(np.uint32)
        r = np.where(rng_mm > 0, ouster_reflectivity(refl), 0)
        photons = (ouster_signal(inten) if signal is None
                   else ouster_signal_photons(signal, self.device.model))
        sig = np.where(rng_mm > 0, photons, 0).astype(np.uint16)
        return rng_mm, r.astype(np.uint16 if self.profile == "LEGACY" else np.uint8), sig

    def _start(self, p: int) -> None:
        W = self.width
        self._packet = p
        self._cols = np.zeros(COLUMNS_PER_PACKET, dtype=self.dtype)
        ids = p * COLUMNS_PER_PACKET + np.arange(COLUMNS_PER_PACKET)
        self._cols["measurement_id"] = ids % W
        if self.profile == "LEGACY":
            self._cols["frame_id"] = (ids // W) & 0xFFFF
            self._cols["encoder_count"] = (ids % W) * (ENCODER_TICKS // W)

    def _emit(self) -> tuple[int, bytes]:
        packet = self._packet
        assert packet is not None  # called while a packet is being filled
        payload = self._cols.tobytes()
        if self.profile != "LEGACY":
            head = np.zeros(1, dtype=HEADER_DTYPE)
            head["packet_type"] = 1
            head["frame_id"] = (packet * COLUMNS_PER_PACKET // self.width) & 0xFFFF
            head["init_sn"] = INIT_ID | ((self.serial & (2 ** 40 - 1)) << 24)
            payload = head.tobytes() + payload + bytes(32)
        self._packet = None
        return self.start_ns + int(round(self._last_time * 1e9)), payload

    def finish(self) -> list[tuple[int, bytes]]:
        """The packet being filled, its missing columns invalid (none if empty)."""
        return [self._emit()] if self._packet is not None else []

    def metadata(self) -> dict[str, Any]:
        """The sensor metadata (Ouster's flat JSON layout of firmware 2.x, the one
        ``ouster-sdk`` and ``ouster-ros`` read for LEGACY packets)."""
        t = self.device.table
        W = self.width
        a = t.per_laser("azimuth_deg")
        shift = pixel_shift_by_row(t, W, self.device.direction)
        return {
            "beam_altitude_angles": [float(v) for v in t.elevation_deg],
            "beam_azimuth_angles": [float(v) for v in a],
            "build_rev": str(t.extra.get("build_rev", "v2.1.2")),
            "data_format": {"column_window": [0, W - 1], "columns_per_frame": W,
                            "columns_per_packet": COLUMNS_PER_PACKET,
                            "pixel_shift_by_row": [int(v) for v in shift],
                            "pixels_per_column": self.beams, "udp_profile_lidar": self.profile,
                            "udp_profile_imu": "LEGACY"},
            "initialization_id": INIT_ID,
            "imu_to_sensor_transform": [float(v) for v in t.extra.get(
                "imu_to_sensor_transform", (1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1))],
            "json_calibration_version": 3,
            "lidar_mode": self.mode,
            "lidar_origin_to_beam_origin_mm": float(t.beam_origin_m * 1000.0),
            "lidar_to_sensor_transform": [float(v) for v in self.lidar_to_sensor.ravel()],
            "prod_line": prod_line(self.device.model),
            "prod_sn": str(t.extra.get("prod_sn", "0")),
            "status": "RUNNING",
            "udp_port_lidar": UDP_PORT,
            "udp_port_imu": UDP_PORT + 1,
            "blensor_source": t.source,
        }

    def metadata_json(self) -> str:
        """:meth:`metadata` as indented JSON text."""
        return json.dumps(self.metadata(), indent=2) + "\n"


__all__ = ["OusterEncoder", "UDP_PORT", "ENDPOINT", "LIDAR_MODES", "PROFILES", "DUAL", "column_dtype",
           "prod_line",
           "ouster_range_mm", "ouster_reflectivity", "ouster_signal", "pixel_shift_by_row"]
