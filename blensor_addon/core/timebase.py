"""The run's time base: the absolute instant of scene time 0, shared by every writer that
stamps absolute times (rosbag2 headers and log times, pcap records and packet timestamps,
LAS ``gps_time``, the npz's ``start_time_ns``). Formats whose convention is relative (KITTI
``times.txt``, PCD ``time``, the trajectory) keep their relative times; docs/formats.md
has the table of every format's time reference.

The instant is held as integer nanoseconds since the UNIX epoch (UTC, no leap seconds),
so stamps built from it are exact to the nanosecond (a float64 UNIX time in 2020 resolves
only 238 ns).

Default (:data:`DEFAULT_START_TIME`): 2020-01-01T00:00:00Z, the same for every run so the
bytes are reproducible. Why that instant: it is not 0 (a zero ROS stamp means "latest" to
tf2, and rosbags 0.9.23 skips an MCAP chunk whose first message is at t = 0); it lies after
the last leap second (2017-01-01), so GPS - UTC is the constant 18 s; its adjusted standard
GPS time is positive (LAS 1.4); its seconds fit ROS 2's ``int32 sec`` and pcap's ``uint32``;
and it is on the hour, so a Velodyne packet's "microseconds past the hour" count from 0.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, TypeVar, overload

from .errors import SettingsError

if TYPE_CHECKING:
    import numpy as np

    from .ndtypes import F64

V = TypeVar("V")

#: the default time base (ISO 8601), see the module docstring
DEFAULT_START_TIME = "2020-01-01T00:00:00Z"
#: UNIX seconds of the GPS epoch, 1980-01-06T00:00:00Z
GPS_EPOCH_UNIX = 315_964_800
#: LAS 1.4 adjusted standard GPS time = standard GPS time - 1e9 s (LAS 1.4 R15, Table 4,
#: global encoding bit 0, and the point record's GPS Time)
LAS_GPS_OFFSET = 1_000_000_000
#: the latest start: ROS 2 ``builtin_interfaces/Time.sec`` is int32 (2038-01-19T03:14:07Z)
LATEST_UNIX = 2**31 - 1
#: UTC instants (UNIX s) from which GPS - UTC grew by one second, 1981-07-01 to 2017-01-01
#: (IERS Bulletin C; the IANA tz database's leap-seconds.list): GPS - UTC = 18 s since 2017
LEAP_SECONDS_UNIX = (362793600, 394329600, 425865600, 489024000, 567993600, 631152000, 662688000,
                     709948800, 741484800, 773020800, 820454400, 867715200, 915148800, 1136073600,
                     1230768000, 1341100800, 1435708800, 1483228800)

ALLOWED = ("ISO 8601 (e.g. 2020-01-01T00:00:00Z; with Z or a UTC offset; no offset: UTC) or UNIX seconds, "
           "from 1980-01-06T00:00:00Z (the GPS epoch) to 2038-01-19T03:14:07Z (ROS 2 time's int32 seconds)")

#: the longest text a time base may be (characters): an ISO 8601 date-time with nine
#: fractional digits and an offset is 35
MAX_TEXT = 64
#: the largest |UNIX seconds| looked at before the range check (beyond it a number is out of
#: range anyway; a bound before the scaling keeps 1e300 or 1e7000000 from overflowing)
MAX_ABS_SECONDS = 10**11
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
_FRACTION = re.compile(r"(T?\d{2}:?\d{2}:?\d{2})[.,](\d+)")


def parse_start_time(value: object, setting: str = "--start-time") -> int:
    """The time base ``value`` as integer nanoseconds since the UNIX epoch.

    Args:
        value: None (the default, :data:`DEFAULT_START_TIME`); an int or float (UNIX s); a
            str of UNIX seconds or an ISO 8601 date-time (``Z`` or a UTC offset; none: UTC;
            up to 9 fractional-second digits, kept exactly).
        setting: the name a refusal gives.
    Returns:
        int ns since 1970-01-01T00:00:00Z.
    Raises:
        SettingsError (``setting``): not one of those forms, not finite, or outside
        [1980-01-06T00:00:00Z, 2038-01-19T03:14:07Z] (:data:`ALLOWED`).
    """
    if value is None:
        value = DEFAULT_START_TIME
    ns: int | None = None
    if isinstance(value, bool):
        ns = None
    elif isinstance(value, int):
        ns = value * 1_000_000_000 if abs(value) <= MAX_ABS_SECONDS else None
    elif isinstance(value, float):
        ns = round(value * 1e9) if math.isfinite(value) and abs(value) <= MAX_ABS_SECONDS else None
    elif isinstance(value, str) and len(value) <= MAX_TEXT:
        ns = _parse_text(value.strip())
    if ns is None or not GPS_EPOCH_UNIX * 10**9 <= ns <= LATEST_UNIX * 10**9:
        raise SettingsError(setting, ALLOWED, value)
    return ns


def _parse_text(text: str) -> int | None:
    """ns of UNIX seconds or an ISO 8601 date-time ``text``; None if it is neither."""
    if _NUMBER.match(text):
        from decimal import Decimal
        seconds = Decimal(text)  # (a short text: MAX_TEXT characters; the exponent is bounded next)
        if seconds.adjusted() > 11 or seconds.copy_abs() > MAX_ABS_SECONDS:  # (no context: no Overflow)
            return None
        return int((seconds * 10**9).to_integral_value())
    frac = 0
    m = _FRACTION.search(text)
    if m:  # datetime keeps microseconds only: the fraction is read here, to the nanosecond
        digits = m.group(2)
        if len(digits) > 9:
            return None
        frac = int(digits.ljust(9, "0"))
        text = text[:m.start()] + m.group(1) + text[m.end():]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp()) * 10**9 + frac


#: the pcap writer's former option, still taken as another name of the time base
PCAP_ALIAS = "pcap.start_time"


def run_start_time(start_time: object, options: Mapping[str, V] | None,
                   setting: str = "--start-time") -> tuple[int, dict[str, V]]:
    """The run's time base from ``start_time`` and the format ``options`` (``{"pcd.ascii":
    ...}``), where ``pcap.start_time`` (the pcap writer's former option) is another name
    of it.

    Returns:
        (ns since the UNIX epoch, ``options`` without ``pcap.start_time``).
    Raises:
        SettingsError: (``setting``) a bad ``start_time``; (``pcap.start_time``) a bad
        value there, or one given beside ``start_time`` (one or the other).
    """
    rest = dict(options or {})
    if PCAP_ALIAS not in rest:
        return parse_start_time(start_time, setting), rest
    alias = rest.pop(PCAP_ALIAS)
    if start_time is not None:
        raise SettingsError(PCAP_ALIAS, f"not given with {setting} (one or the other: {setting} is the run's "
                            "time base for every format)", f"{PCAP_ALIAS}={alias}")
    return parse_start_time(alias, PCAP_ALIAS), rest


def iso(ns: int) -> str:
    """``ns`` (UNIX ns) as ISO 8601 UTC with ``Z``, the fraction only where there is one
    (``2020-01-01T00:00:00Z``, ``2020-01-01T00:00:00.000000500Z``)."""
    sec, frac = divmod(int(ns), 10**9)
    text = datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{frac:09d}".rstrip("0") if frac else "") + "Z"


def gps_minus_utc(unix_s: float) -> int:
    """GPS - UTC in whole seconds at the UTC instant ``unix_s`` (UNIX s, >= the GPS
    epoch): the leap seconds since 1980-01-06 (:data:`LEAP_SECONDS_UNIX`)."""
    import bisect
    return bisect.bisect_right(LEAP_SECONDS_UNIX, unix_s)


@overload
def las_gps_time(start_ns: int, t: float) -> np.float64: ...


@overload
def las_gps_time(start_ns: int, t: F64) -> F64: ...


def las_gps_time(start_ns: int, t: float | F64) -> np.float64 | F64:
    """LAS 1.4 adjusted standard GPS time (s, float64) of scene times ``t`` (s, scalar or
    float64 array) after the time base ``start_ns`` (UNIX ns): GPS seconds since
    1980-01-06T00:00:00Z (UTC plus the leap seconds at the base) minus 1e9 (LAS 1.4 R15,
    GPS Time with global encoding bit 0 set). The integer part is formed first, so float64
    keeps 60 ns at 2020's 2.6e8 s. A run that spans a leap second keeps the offset of its
    start (no real clock jumps within a capture)."""
    import numpy as np
    sec, frac = divmod(int(start_ns), 10**9)
    base = sec - GPS_EPOCH_UNIX + gps_minus_utc(sec) - LAS_GPS_OFFSET
    return np.float64(base) + (np.asarray(t, dtype=np.float64) + frac * 1e-9)


def stamp_ns(start_ns: int, t: float) -> int:
    """The absolute stamp (UNIX ns, int) of scene time ``t`` (s): ``start_ns`` plus ``t``
    rounded to the nanosecond."""
    return int(start_ns) + int(round(float(t) * 1e9))


__all__ = ["DEFAULT_START_TIME", "GPS_EPOCH_UNIX", "LAS_GPS_OFFSET", "LATEST_UNIX", "LEAP_SECONDS_UNIX",
           "ALLOWED", "PCAP_ALIAS", "parse_start_time", "run_start_time", "iso", "gps_minus_utc",
           "las_gps_time", "stamp_ns"]
