"""Pattern files: the firings of a scan pattern read from a CSV or .npy file (numpy only).

Seed 004 ("Scan Patterns", "Custom Laser Configuration": a laser distribution and firing
sequence given as data; MEMS units) asks for rays from a file. This module owns the file
layout, its reader with one-line errors, the cache of parsed files and what the sensor
(:mod:`.pattern`) derives from a pattern (directions, grid, LaserScan angles).

Layout (one row per firing; the pattern repeats every period P):

CSV (UTF-8 text, a byte-order mark allowed, as a spreadsheet saves it; lines end in LF,
CRLF or CR; ``#`` starts a comment line; blank lines are skipped)::

    # period_s: 0.1
    azimuth_deg,elevation_deg,time_s,channel[,origin_x_m,origin_y_m,origin_z_m]
    -135.0,0.0,0.0,0
    ...

- ``azimuth_deg``: deg in [-360, 360]; 0 = straight ahead, positive counter-clockwise
  seen from above (toward the sensor's left), as REP-103 and ROS ``LaserScan`` measure it.
- ``elevation_deg``: deg in [-90, 90], positive up.
- ``time_s``: s, the firing's offset within the period, in [0, P). Rows may come in any
  order; firings are sorted by time (ties keep the file's order).
- ``channel``: the laser (receiver) index, an integer in [0, 65535].
- ``origin_x_m, origin_y_m, origin_z_m`` (optional, all three or none): m, where the ray
  starts, in the REP-103 sensor frame (x ahead, y left, z up); without them every ray
  starts at the sensor origin.
- The header line names the columns (any order, each once). The period comes from the
  setting ``pattern_period`` when it is > 0, else from a comment line ``# period_s: P``
  (or ``# period_s = P``) before the header. Either must lie in [:data:`MIN_PERIOD`,
  3600] s: 1e-4 s (10 kHz repetition) is far above any real scan pattern's rate (2D
  scanners 10-100 Hz, MEMS and hybrid solid-state units 10-20 Hz) and equals the fastest
  packet of the other streamed sensors (rosette ``report_frequency`` at most 1e4 Hz); a
  shorter period would only turn a scene frame into millions of sweep packets.

.npy: the same columns as a float array of shape (N, 4) or (N, 7) in the order above, or
a structured array with those field names (any numeric dtypes). A .npy file holds no
period: ``pattern_period`` gives it.

Errors (:class:`~blensor_addon.core.errors.SettingsError` naming ``pattern_file``, one
line): the file, and for a bad cell its place: CSV ``line L, column C (name)`` (L and C
counted from 1, as an editor and a spreadsheet show them), .npy ``row I, column J
(name)`` (array indices, from 0). Firing i of repetition k fires at ``k P + time_i``
(absolute, s).

Conversion to BlenSor's sensor frame (camera-local, +X right, +Y up, looking down -Z):
the direction of azimuth a and elevation e is ``(cos e sin th, sin e, cos e cos th)`` with
``th = a + 180 deg``, the planar and rotating sensors' formula (``(-cos e sin a, sin e,
-cos e cos a)``): a = 0 looks down -Z, a = 90 deg down -X (left). A REP-103 origin
(x, y, z) is ``(-y, z, -x)`` here (:data:`~blensor_addon.core.axes.ROS_FROM_BLENSOR`).
"""
from __future__ import annotations

import math
import os
import re
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from ..errors import SettingsError
from ..ndtypes import F32, F64, I64, Integer
from .budget import ray_limit

SETTING = "pattern_file"
#: the columns every pattern has, and the optional origin columns (all or none)
COLUMNS = ("azimuth_deg", "elevation_deg", "time_s", "channel")
ORIGIN_COLUMNS = ("origin_x_m", "origin_y_m", "origin_z_m")
#: the CSV header line of a pattern without and with origins
HEADER = ",".join(COLUMNS)
HEADER_ORIGINS = ",".join(COLUMNS + ORIGIN_COLUMNS)
#: largest channel index (RayPattern.channel is uint16)
MAX_CHANNEL = 65535
#: largest |origin coordinate| (m)
MAX_ORIGIN = 1000.0
#: shortest pattern period (s), the file's ``# period_s`` line and the setting
#: ``pattern_period`` alike (module docstring): 10 kHz repetition
MIN_PERIOD = 1e-4
#: longest pattern period (s)
MAX_PERIOD = 3600.0
#: most firings a second (rays/s) a pattern may fire: a policy bound, not a datasheet
#: figure, several times the point rate of any pattern shipped here (the AT128-like example
#: of examples/patterns fires 1.536e6 rays/s); a faster one (10,000 firings every 1e-4 s is
#: 1e8 rays/s) would turn two seconds of a scene into 20,000 packets and minutes of casting
MAX_FIRING_RATE = 1e7
#: parsed files kept (by resolved path, size, mtime_ns)
CACHE_SIZE = 8
_PERIOD_LINE = re.compile(r"^#\s*period_s\s*[:=]\s*(\S+)\s*$", re.IGNORECASE)
_CACHE: "OrderedDict[tuple[str, int, int], PatternFile]" = OrderedDict()
_T = TypeVar("_T")


def _refuse(path: str, allowed: str, value: object, where: str = "") -> SettingsError:
    """The SettingsError of a bad pattern file: ``pattern_file must be <allowed> (<path>[,
    <where>]), got <value>``."""
    place = f"{path}, {where}" if where else path
    return SettingsError(SETTING, f"{allowed} ({place})", value)


@dataclass(frozen=True)
class PatternFile:
    """A parsed pattern, its firings sorted by time (see the module docstring).

    Attributes:
        path: the resolved file path; period: s, from the file (``# period_s``) or None.
        azimuth_deg, elevation_deg, time_s (N,) float64; channel (N,) int64.
        origin (N, 3) float64 m in the REP-103 sensor frame, or None.
        row (N,) int64: where each firing is in the file (CSV line from 1, .npy row from 0).
        place: ``"line"`` (CSV) or ``"row"`` (.npy), the word for ``row`` in messages;
        time_column: the time column as messages name it (``column 3 (time_s)``).
    Derived (computed once): directions (N, 3) float64 unit vectors in BlenSor's sensor
    frame; azimuth, elevation (N,) float64 rad as :func:`~.raypattern.angles_of` reports
    them; origins (N, 3) float32 in BlenSor's sensor frame or None; channels (the
    number of channel rows, max channel + 1); counts (L,) firings per channel;
    position (N,) int64 rank of each firing within its channel.
    """

    path: str
    period: float | None
    azimuth_deg: F64
    elevation_deg: F64
    time_s: F64
    channel: I64
    origin: F64 | None
    row: I64
    place: str = "line"
    time_column: str = "column 3 (time_s)"
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.time_s.shape[0])

    def _get(self, key: str, make: Callable[[], _T]) -> _T:
        """The derived value ``key``, made by ``make`` on first use (the dataclass is frozen,
        its arrays never change)."""
        if key not in self._derived:
            self._derived[key] = make()
        value: _T = self._derived[key]
        return value

    @property
    def directions(self) -> F64:
        """(N, 3) float64 unit directions in BlenSor's sensor frame."""
        def make() -> F64:
            p = np.deg2rad(self.elevation_deg)
            th = np.deg2rad(self.azimuth_deg + 180.0)
            d = np.empty((len(self), 3))
            d[:, 0] = np.cos(p) * np.sin(th)
            d[:, 1] = np.sin(p)
            d[:, 2] = np.cos(p) * np.cos(th)
            return d
        return self._get("directions", make)

    @property
    def angles(self) -> tuple[F64, F64]:
        """(azimuth, elevation) (N,) float64 rad of :attr:`directions` as BlenSor reports
        them (:func:`~.raypattern.angles_of`: azimuth in [0, 2 pi))."""
        from .raypattern import angles_of
        return self._get("angles", lambda: angles_of(self.directions))

    @property
    def origins(self) -> F32 | None:
        """(N, 3) float32 ray origins in BlenSor's sensor frame (m), or None."""
        if self.origin is None:
            return None
        o = self.origin

        def make() -> F32:
            out: F32 = np.stack([-o[:, 1], o[:, 2], -o[:, 0]], axis=1).astype(np.float32)
            return out
        return self._get("origins", make)

    @property
    def channels(self) -> int:
        """Number of channel rows: the largest channel index + 1."""
        return int(self.channel.max()) + 1

    @property
    def counts(self) -> I64:
        """(L,) int64 firings of each channel per period."""
        return self._get("counts", lambda: np.bincount(self.channel, minlength=self.channels))

    @property
    def position(self) -> I64:
        """(N,) int64 rank of each firing among its channel's, in firing order."""
        return self._get("position", lambda: channel_positions(self.channel))

    @property
    def grid(self) -> tuple[int, int] | None:
        """(channels, firings per channel) when every channel 0..L-1 fires equally often
        in a period (then ``ray_index = channel * cols + k``), else None."""
        c = self.counts
        return (self.channels, int(c[0])) if bool((c == c[0]).all()) and c[0] > 0 else None

    def channel_elevations(self) -> F64:
        """(L,) float64 mean elevation (deg) of each channel's firings (0 for a channel
        that never fires): the elevation rank (``ring``) is taken from it."""
        def make() -> F64:
            s = np.bincount(self.channel, weights=self.elevation_deg, minlength=self.channels)
            return np.divide(s, self.counts, out=np.zeros_like(s), where=self.counts > 0)
        return self._get("elevations", make)

    def column_angles(self, period: float) -> tuple[float, float] | None:
        """(first, step) rad when the pattern is one scan plane as ROS ``LaserScan``
        describes it: one channel, every elevation 0, azimuths evenly spaced in firing
        order (step != 0) and firings evenly spaced in time (``time_i = t0 + i dt``, dt >
        0, to 1e-6 of dt; :meth:`column_time`); None otherwise. Angles: BlenSor's azimuth
        psi (ROS's, counter-clockwise from ahead), not wrapped."""
        n = len(self)
        if n < 2 or self.channels != 1 or bool(np.any(self.elevation_deg != 0.0)):
            return None
        a = np.deg2rad(self.azimuth_deg)
        step = (a[-1] - a[0]) / (n - 1)
        if step == 0.0 or not np.allclose(np.diff(a), step, rtol=0.0, atol=1e-6 * abs(step)):
            return None
        if self._even_times() is None:
            return None
        return float(a[0]), float(step)

    def _even_times(self) -> tuple[float, float] | None:
        """(t0, dt) s when ``time_i = t0 + i dt`` (dt > 0, to 1e-6 of dt), else None."""
        n = len(self)
        if n < 2:
            return None
        t0 = float(self.time_s[0])
        dt = float((self.time_s[-1] - t0) / (n - 1))
        if not dt > 0.0 or not np.allclose(self.time_s, t0 + np.arange(n) * dt, rtol=0.0, atol=1e-6 * dt):
            return None
        return t0, dt

    def column_time(self, period: float) -> tuple[float, float] | None:
        """``Capabilities.column_time`` of a one-plane pattern (:meth:`column_angles` not
        None): (t0, dt) s, the first firing's offset in the period and the step between
        firings, when they are not ``time_i = i P / N`` (a 2D scanner's real timing: 270
        deg fired in 3/4 of the period); None when they are (to 1e-6 of a step: the
        planar scanner's model, whose LaserScans keep their bytes) or the pattern is not
        one plane."""
        if self.column_angles(period) is None:
            return None
        even = self._even_times()
        assert even is not None  # column_angles checked it
        t0, dt = even
        n = len(self)
        if np.allclose(self.time_s, np.arange(n) * (period / n), rtol=0.0, atol=1e-6 * period / n):
            return None
        return t0, dt


def channel_positions(channel: Integer) -> I64:
    """(N,) int64: for each entry of ``channel`` (N,) int, how many entries before it
    have the same channel (its rank among its channel's firings, in order)."""
    ch = np.asarray(channel, dtype=np.int64)
    order = np.argsort(ch, kind="stable")
    sorted_ch = ch[order]
    start = np.flatnonzero(np.r_[True, sorted_ch[1:] != sorted_ch[:-1]])
    first = np.repeat(start, np.diff(np.r_[start, ch.shape[0]]))
    pos = np.empty(ch.shape[0], np.int64)
    pos[order] = np.arange(ch.shape[0], dtype=np.int64) - first
    return pos


# ---------------------------------------------------------------------------------------
# reading


def resolve(path: str) -> str:
    """The absolute path of a pattern file setting: ``~`` expanded; a relative path is
    relative to the current directory. A ``//`` path (relative to the .blend) must have
    been resolved by the scene layer.

    Raises:
        SettingsError (``pattern_file``): empty, or still ``//``-relative.
    """
    p = str(path or "").strip()
    if not p:
        raise SettingsError(SETTING, "the path of a .csv or .npy pattern file (none given)", p)
    if p.startswith("//"):
        raise SettingsError(SETTING, "a path BlenSor can resolve: '//' (relative to the .blend) only when "
                            "a saved .blend is scanned", p)
    return os.path.abspath(os.path.expanduser(p))


def load(path: str) -> PatternFile:
    """The pattern of the file at ``path`` (see :func:`resolve`), parsed and checked, from
    the cache when the file's (resolved path, size, mtime_ns) has been read before.

    Raises:
        SettingsError (``pattern_file``): one line naming the file and, for a bad cell,
        its row and column: missing or unreadable file, not .csv/.npy, bad header, a
        non-numeric, NaN/inf or out-of-range cell, a bad channel, no firings, or more
        firings than the ray budget (:func:`~.budget.ray_limit`).
    """
    p = resolve(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise _refuse(p, "an existing .csv or .npy pattern file", path, e.strerror or "not found") from None
    if not os.path.isfile(p):
        raise _refuse(p, "a .csv or .npy pattern file", path, "not a regular file")
    key = (p, st.st_size, st.st_mtime_ns)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    ext = os.path.splitext(p)[1].lower()
    if ext == ".csv":
        pf = _read_csv(p)
    elif ext == ".npy":
        pf = _read_npy(p)
    else:
        raise _refuse(p, "a pattern file ending in .csv or .npy", path)
    _CACHE[key] = pf
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return pf


def clear_cache() -> None:
    """Forget every parsed pattern file."""
    _CACHE.clear()


def _header_columns(p: str, cells: list[str], where: str) -> list[str]:
    names = [c.strip().lower() for c in cells]
    want = f"the header '{HEADER}' or '{HEADER_ORIGINS}' (any column order)"
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise _refuse(p, want, dup, f"{where}: column '{dup}' twice")
    for n in names:
        if n not in COLUMNS + ORIGIN_COLUMNS:
            raise _refuse(p, want, n, f"{where}: unknown column")
    for n in COLUMNS:
        if n not in names:
            raise _refuse(p, want, ",".join(cells), f"{where}: no column '{n}'")
    some = [n for n in ORIGIN_COLUMNS if n in names]
    if some and len(some) != 3:
        missing = next(n for n in ORIGIN_COLUMNS if n not in names)
        raise _refuse(p, want, ",".join(cells), f"{where}: origin columns need all three, no '{missing}'")
    return names


def _read_csv(p: str) -> PatternFile:
    """Parse a CSV pattern (module docstring)."""
    limit = ray_limit()
    period = None
    names = None
    cells_out, lines = array("d"), array("q")  # flat, 8 bytes a number: a large file stays compact
    try:
        f = open(p, "r", encoding="utf-8-sig", newline="")  # (a spreadsheet's BOM is no column name)
    except OSError as e:
        raise _refuse(p, "a readable pattern file", p, f"cannot open: {e.strerror}") from None
    with f:
        try:
            for lineno, raw in enumerate(f, 1):
                line = raw.strip()
                if not line:
                    continue
                if line.startswith("#"):
                    m = _PERIOD_LINE.match(line)
                    if m and names is None:
                        try:
                            period = float(m.group(1))
                        except ValueError:
                            period = float("nan")
                        if not (math.isfinite(period) and MIN_PERIOD <= period <= MAX_PERIOD):
                            raise _refuse(p, f"a pattern file whose period_s is in [{MIN_PERIOD:g}, "
                                          f"{MAX_PERIOD:g}] s", m.group(1), f"line {lineno}")
                    continue
                cells = line.split(",")
                if names is None:
                    names = _header_columns(p, cells, f"line {lineno}")
                    continue
                if len(cells) != len(names):
                    raise _refuse(p, f"a pattern file with {len(names)} cells a row, as its header", line,
                                  f"line {lineno}: {len(cells)} cells")
                if len(lines) >= limit:
                    raise _refuse(p, f"a pattern of at most {limit:,} firings a period (the ray budget)",
                                  f"more than {limit:,} rows", f"line {lineno}")
                for j, c in enumerate(cells):
                    try:
                        cells_out.append(float(c))
                    except ValueError:
                        raise _refuse(p, f"a pattern file whose {names[j]} cells are numbers", c.strip(),
                                      f"line {lineno}, column {j + 1} ({names[j]})") from None
                lines.append(lineno)
        except UnicodeDecodeError as e:
            raise _refuse(p, "a UTF-8 text (CSV) pattern file", p, f"undecodable byte at offset {e.start}") \
                from None
        except OSError as e:
            raise _refuse(p, "a readable pattern file", p, f"read error: {e.strerror}") from None
    if names is None:
        raise _refuse(p, f"a pattern file with the header '{HEADER}' and one row per firing", "", "empty")
    if not lines:
        raise _refuse(p, "a pattern file with at least one firing", "", "no rows after the header")
    data = np.frombuffer(cells_out, dtype=np.float64).reshape(len(lines), len(names))
    order = [names.index(n) for n in COLUMNS + (ORIGIN_COLUMNS if ORIGIN_COLUMNS[0] in names else ())]
    return _build(p, data[:, order], np.frombuffer(lines, dtype=np.int64).copy(), period, "line",
                  [o + 1 for o in order])


def _read_npy(p: str) -> PatternFile:
    """Parse a .npy pattern (module docstring)."""
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _refuse(p, "a readable .npy pattern file", p, f"not a .npy array: {str(e).splitlines()[0]}") \
            from None
    limit = ray_limit()
    want = f"a .npy array (N, 4) or (N, 7) of {HEADER_ORIGINS}, or a structured array with those field names"
    if arr.dtype.names is not None:
        names = [n.lower() for n in arr.dtype.names]
        _header_columns(p, list(arr.dtype.names), "fields")
        if arr.ndim != 1:
            raise _refuse(p, want, f"shape {arr.shape}", "fields")
        cols = COLUMNS + (ORIGIN_COLUMNS if ORIGIN_COLUMNS[0] in names else ())
        n = arr.shape[0]
        if n > limit:
            raise _refuse(p, f"a pattern of at most {limit:,} firings a period (the ray budget)",
                          f"{n:,} rows")
        try:
            fields = [np.asarray(arr[arr.dtype.names[names.index(c)]], dtype=np.float64) for c in cols]
            data = np.stack(fields, axis=1) if n else np.zeros((0, len(cols)))
        except (TypeError, ValueError):
            raise _refuse(p, want + " (numeric fields)", str(arr.dtype)) from None
        src = [arr.dtype.names[names.index(c)] for c in cols]
    else:
        if arr.ndim != 2 or arr.shape[1] not in (4, 7):
            raise _refuse(p, want, f"shape {arr.shape}")
        if arr.dtype.kind not in "iuf":
            raise _refuse(p, want + " (a numeric dtype)", str(arr.dtype))
        if arr.shape[0] > limit:
            raise _refuse(p, f"a pattern of at most {limit:,} firings a period (the ray budget)",
                          f"{arr.shape[0]:,} rows")
        data = np.asarray(arr, dtype=np.float64)
        src = None
    if data.shape[0] == 0:
        raise _refuse(p, "a pattern file with at least one firing", "", "no rows")
    return _build(p, data, np.arange(data.shape[0], dtype=np.int64), None, "row", list(range(data.shape[1])),
                  src)


def _build(p: str, data: F64, where: I64, period: float | None, place: str, colno: list[int],
           colnames: list[str] | None = None) -> PatternFile:
    """Check the cells of ``data`` (N, 4 or 7) float64 in :data:`COLUMNS` (+ origins)
    order and sort by time. ``where`` (N,): each row's line/row; ``colno``: each column's
    number in the file; ``colnames``: the file's names of the columns (default ours)."""
    names = list(COLUMNS + ORIGIN_COLUMNS)[:data.shape[1]]
    shown = colnames or names

    def bad(i: int, j: int, allowed: str) -> SettingsError:
        v = data[i, j]
        return _refuse(p, f"a pattern file whose {names[j]} cells are {allowed}", float(v),
                       f"{place} {int(where[i])}, column {colno[j]} ({shown[j]})")

    finite = np.isfinite(data)
    if not finite.all():
        i, j = np.argwhere(~finite)[0]
        raise bad(i, j, "finite numbers")
    checks = [(0, -360.0, 360.0, "in [-360, 360] deg"), (1, -90.0, 90.0, "in [-90, 90] deg"),
              (2, 0.0, math.inf, "at least 0 s (offsets within the period)"),
              (3, 0.0, MAX_CHANNEL, f"integers in [0, {MAX_CHANNEL}]")]
    checks += [(j, -MAX_ORIGIN, MAX_ORIGIN, f"in [-{MAX_ORIGIN:g}, {MAX_ORIGIN:g}] m")
               for j in range(4, data.shape[1])]
    for j, lo, hi, allowed in checks:
        out = (data[:, j] < lo) | (data[:, j] > hi)
        if j == 3:
            out |= data[:, j] != np.round(data[:, j])
        if out.any():
            raise bad(int(np.argmax(out)), j, allowed)
    order = np.argsort(data[:, 2], kind="stable")
    d = data[order]
    return PatternFile(path=p, period=period, azimuth_deg=np.ascontiguousarray(d[:, 0]),
                       elevation_deg=np.ascontiguousarray(d[:, 1]), time_s=np.ascontiguousarray(d[:, 2]),
                       channel=d[:, 3].astype(np.int64),
                       origin=np.ascontiguousarray(d[:, 4:7]) if d.shape[1] == 7 else None, row=where[order],
                       place=place, time_column=f"column {colno[2]} ({shown[2]})")


def check_period(pf: PatternFile, period: float) -> None:
    """Refuse (SettingsError ``pattern_file``, naming the row and column) a firing time
    at or beyond ``period`` (s): offsets lie in [0, period); and a pattern firing more than
    :data:`MAX_FIRING_RATE` rays a second (its N firings every ``period`` s)."""
    rate = len(pf.time_s) / period
    if rate > MAX_FIRING_RATE:
        raise _refuse(pf.path, f"a pattern firing at most {MAX_FIRING_RATE:g} rays a second (its firings "
                      "a period / the period)", f"{len(pf.time_s):,} firings every {period:g} s = {rate:.4g} "
                      "rays/s")
    late = pf.time_s >= period
    if late.any():
        i = int(np.argmax(late))
        raise _refuse(pf.path, f"a pattern file whose time_s cells are below the period {period:g} s",
                      float(pf.time_s[i]), f"{pf.place} {int(pf.row[i])}, {pf.time_column}")


def write_csv(path: str | os.PathLike[str], azimuth_deg: ArrayLike, elevation_deg: ArrayLike,
              time_s: ArrayLike, channel: ArrayLike, origin: ArrayLike | None = None,
              period: float | None = None, comments: tuple[str, ...] = ()) -> None:
    """Write a CSV pattern (module docstring) with exact float round trips (``repr``):
    ``# comments`` lines, ``# period_s: P`` when given, the header, one row per firing.
    Arrays (N,) (origin (N, 3) m REP-103 or None).

    Raises:
        SettingsError (``path``): something other than a regular file is at ``path`` (a
            FIFO would block, a device would take the rows); it is left as it was."""
    import stat
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):
        raise SettingsError("path", "a new file or a regular file to replace (never a FIFO, device, socket, "
                            "folder or link)", str(path))
    cols = [np.asarray(azimuth_deg, np.float64), np.asarray(elevation_deg, np.float64),
            np.asarray(time_s, np.float64), np.asarray(channel, np.int64)]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for c in comments:
            f.write(f"# {c}\n")
        if period is not None:
            f.write(f"# period_s: {float(period)!r}\n")
        f.write((HEADER_ORIGINS if origin is not None else HEADER) + "\n")
        o = None if origin is None else np.asarray(origin, np.float64)
        for i in range(cols[0].shape[0]):
            cells = [repr(float(cols[k][i])) for k in range(3)] + [str(int(cols[3][i]))]
            if o is not None:
                cells += [repr(float(v)) for v in o[i]]
            f.write(",".join(cells) + "\n")


__all__ = ["PatternFile", "MIN_PERIOD", "MAX_PERIOD", "COLUMNS", "ORIGIN_COLUMNS", "HEADER", "HEADER_ORIGINS",
           "load", "resolve",
           "check_period", "clear_cache", "channel_positions", "write_csv"]
