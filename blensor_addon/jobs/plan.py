"""The packet plan of a range scan: which packets to scan, from the request and what
the sensor and the writers declare (pure: numpy only, no bpy; testable without Blender).

A *packet* (:class:`~blensor_addon.core.packets.Packet`) is one output of the run: what
the sensor fires during one scene frame (``frame``) or one full sweep (``sweep``, sweep
``k`` fired in ``[k P, (k + 1) P)`` s, P the sweep period; BlenSor paper, seed 000
section 3.2: a rotating head fires column after column, so a sweep spans scene frames).
Scene frame ``f`` spans ``[f, f + 1) * frame_time`` s.

Which packets a request selects:

- scene frames ``A-B`` (or a single frame ``A``): every packet that *overlaps*
  ``[A, B + 1) * frame_time``: the scene frames themselves, or every sweep that overlaps
  them, so a single frame gives the sweep that covers it;
- a time interval ``(t0, t1)`` s: every packet that *starts* within ``[t0, t1)``
  (scanned whole, so the last may end after ``t1``).

The kind of packet (setting ``packets``: ``auto``, ``frame`` or ``sweep``) comes from
the sensor's :class:`~blensor_addon.core.capabilities.Timing` and the writers'
:class:`~blensor_addon.core.capabilities.WriterNeeds`: ``auto`` gives sweeps for a swept
(or streaming) sensor in continuous time, else scene frames. A writer needing per-frame
packets (EVD, as the original wrote it) beside formats that would get sweeps is refused
in one line naming the formats and ``packets=frame``, the setting that reconciles them
(EVD never silently turns the other formats' sweeps into sectors). Writers needing a
ray grid or an image sensor are refused in one line for a sensor without one.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..core.capabilities import Capabilities, Timing, WriterNeeds
from ..core.errors import SettingsError
from ..core.packets import Packet

#: values of the ``packets`` setting
PACKET_SETTINGS = ("auto", "frame", "sweep")
#: most packets one run may plan; more is refused in one line before the packet list is built
#: (every packet is a file per format: 10**7 packets are 11.6 days of a 10 Hz head's sweeps, or
#: 1,000 s of the shortest packet any sensor allows, 1e-4 s)
MAX_PACKETS = 10**7
#: longest packet (s) one run may plan: a sweep whose period is longer is refused in one line
#: naming the setting that sets the period (the scene is evaluated over a packet's whole span:
#: a 1e-9 Hz spin, a sweep of 31 years, ran for hours before a single ray was cast). The same
#: bound as the longest pattern period (``core.sensors.pattern_file.MAX_PERIOD``); the sweep
#: rates' own bound, ``core.settings.MIN_SWEEP_RATE``, keeps swept sensors within 100 s
MAX_PACKET_TIME = 3600.0


@dataclass(frozen=True)
class Plan:
    """What a range scan scans.

    Attributes:
        kind: ``"frame"`` or ``"sweep"`` (the :class:`Packet` kind of every packet).
        packets: tuple of :class:`Packet`, in scan order (increasing index).
        packet_time: float s, the length of one packet: the frame time or the period.
        frame_time: float s per scene frame.
        requested: what the user asked, for the manifest: ``[first, last]`` of a
            contiguous frame range, the list of frames, or ``{"time": [t0, t1]}``.
    """

    kind: str
    packets: tuple[Packet, ...]
    packet_time: float
    frame_time: float
    requested: object

    @property
    def indices(self) -> list[int]:
        """The packets' indices (scene frame or sweep numbers)."""
        return [p.index for p in self.packets]

    def span(self, packet: Packet) -> tuple[float, float]:
        """``(t0, t1)`` s that ``packet`` covers."""
        return packet.index * self.packet_time, (packet.index + 1) * self.packet_time

    def scene_frames(self) -> range:
        """The scene frames whose evaluation the packets need (each packet's span, both
        ends included: a timed packet interpolates to the frame after it)."""
        t0, _ = self.span(self.packets[0])
        _, t1 = self.span(self.packets[-1])
        ft = self.frame_time
        return range(int(math.floor(t0 / ft + 1e-9)), int(math.floor(t1 / ft + 1e-9)) + 2)

    def __len__(self) -> int:
        return len(self.packets)


def _eps(t: float, period: float) -> float:
    return 1e-9 * max(1.0, abs(t) / period)


def starting_in(t0: float, t1: float, period: float) -> range:
    """Indices ``k`` of the packets ``[k P, (k + 1) P)`` (P = ``period`` s) that start
    within ``[t0, t1)`` s (may be empty)."""
    eps = _eps(t1, period)
    return range(math.ceil(t0 / period - eps), math.ceil(t1 / period - eps))


def overlapping(t0: float, t1: float, period: float) -> range:
    """Indices ``k`` of the packets ``[k P, (k + 1) P)`` that overlap ``[t0, t1)`` s
    (t0 < t1): at least one, the packet covering ``t0``."""
    eps = _eps(t1, period)
    k0 = math.floor(t0 / period + eps)
    return range(k0, max(k0 + 1, math.ceil(t1 / period - eps)))


def check_frames(frames: Iterable[int] | None, lo: int, hi: int) -> list[int]:
    """Scene frame numbers as a list of int, checked against the scene's range.

    Raises:
        SettingsError (``frames``): empty, not integers, a frame twice, or outside
            ``lo..hi``.
    """
    allowed = f"integers within the scene's frame range {lo}-{hi}"
    if frames is None:
        raise SettingsError("frames", allowed, frames)
    if isinstance(frames, range) and frames:  # the ends first (O(1), any size) before building a list
        a, b = sorted((frames[0], frames[-1]))
        if a < lo or b > hi:
            raise SettingsError("frames", allowed, f"{a}-{b}")
    try:
        frames = list(frames)
    except TypeError:
        raise SettingsError("frames", allowed, frames) from None
    if not frames or not all(_is_int(f) for f in frames):
        raise SettingsError("frames", allowed, frames)
    if min(frames) < lo or max(frames) > hi:
        raise SettingsError("frames", allowed, f"{min(frames)}-{max(frames)}")
    frames = [int(f) for f in frames]
    if len(set(frames)) != len(frames):  # a frame twice would give two manifest entries for one file
        seen: set[int] = set()
        for twice in frames:  # the first frame met a second time
            if twice in seen:
                break
            seen.add(twice)
        raise SettingsError("frames", "distinct " + allowed, f"frame {twice} more than once")
    return frames


def _is_int(v: object) -> bool:
    import numpy as np
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_time_interval(interval: Iterable[float], lo: float, hi: float) -> tuple[float, float]:
    """A time interval ``(t0, t1)`` s, checked against the scene's span ``[lo, hi]`` s.

    Raises:
        SettingsError (``time``): not two finite numbers t0 < t1 within the span.
    """
    allowed = f"an interval t0-t1 (s) with t0 < t1 within the scene's frames, {lo:.6g}-{hi:.6g} s"
    try:
        t0, t1 = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise SettingsError("time", allowed, interval) from None
    if not (math.isfinite(t0) and math.isfinite(t1) and t0 < t1) or t0 < lo - 1e-9 or t1 > hi + 1e-9:
        raise SettingsError("time", allowed, f"{t0:g}-{t1:g}")
    return t0, t1


def packet_kind(timing: Timing, setting: str, continuous: bool, sensor: str,
                needs: Mapping[str, WriterNeeds | None]) -> str:
    """The packet kind of a run: ``"frame"`` or ``"sweep"``.

    Args:
        timing: the sensor's :class:`Timing`; setting: ``packets`` (auto, frame, sweep);
        continuous: the time model is continuous; sensor: its type name (for messages);
        needs: format name -> :class:`WriterNeeds` of the formats written.
    Raises:
        SettingsError (``packets``): an unknown value, ``sweep`` for an image sensor, a
            format whose packet need the setting contradicts, or formats that disagree
            (named, with the setting that reconciles them).
    """
    if setting not in PACKET_SETTINGS:
        raise SettingsError("packets", "one of " + ", ".join(PACKET_SETTINGS), setting)
    if timing.kind == "exposure":
        if setting == "sweep":
            raise SettingsError("packets", f"frame or auto for sensor type '{sensor}' (an image sensor takes "
                                "one image per scene frame)", setting)
        default = "frame"
    else:
        # a stream without a packet period (seed 003 report-frequency < 0.5) is reported per frame
        default = "sweep" if continuous and timing.period else "frame"
    wants = {f: n.packets for f, n in needs.items() if n is not None and n.packets is not None}
    kinds = set(wants.values())
    if len(kinds) > 1:
        a, b = sorted(kinds)
        raise SettingsError("formats", "formats that agree on packets (write them in separate runs)",
                            f"{_names(wants, a)} need per-{a} packets, {_names(wants, b)} per-{b}")
    if setting != "auto":
        clash = {f: k for f, k in wants.items() if k != setting}
        if clash:
            k = next(iter(clash.values()))
            raise SettingsError("packets", f"{k} or auto with {_names(clash, k)} (it writes one output per "
                                f"{'scene frame' if k == 'frame' else 'sweep'})", setting)
        return setting
    if not kinds or kinds == {default}:
        return default
    need = kinds.pop()
    others = [f for f in needs if f not in wants]
    if not others:  # only formats with that need: they get what they need
        return need
    unit = "scene frame" if need == "frame" else "sweep"
    raise SettingsError("packets", f"{need} to write {_names(wants, need)} beside {', '.join(others)} "
                        f"({_names(wants, need)} needs one output per {unit}; with packets=auto the others "
                        f"would get {default}s; or write them in separate runs)", "auto")


def _names(wants: Mapping[str, str], kind: str) -> str:
    return ",".join(f for f, k in wants.items() if k == kind)


def check_writers(caps: Capabilities, needs: Mapping[str, WriterNeeds | None], sensor: str) -> None:
    """Refuse formats the sensor cannot serve, in one line.

    Raises:
        SettingsError (``formats``): a format needing an image sensor for a sensor that
            is not one, a ray grid for a sensor without one (a pattern that never
            repeats), or a real unit (raw packets) for a sensor that models none; what
            a format's own ``check`` raises.
    """
    for f, n in needs.items():
        if n is None:
            continue
        if n.image and not caps.organized:
            raise SettingsError("formats", f"formats for image sensors ({f} needs an image sensor: one with "
                                "an organized pixel grid)", f"{f} with sensor type {sensor}")
        if n.grid and caps.grid is None:
            raise SettingsError("formats", f"formats without a ray grid ({f} needs one; sensor type {sensor} "
                                "has a pattern with no grid)", f"{f} with sensor type {sensor}")
        if n.device and caps.device is None:
            from ..io.packets import packet_presets
            raise SettingsError("formats", f"formats of real units' data ({f} needs a preset that models a "
                                "real unit: " + ", ".join(packet_presets()) + ")",
                                f"{f} with sensor type {sensor}")
        if n.check is not None:
            n.check(caps)


def plan_range(*, frame_start: int, frame_end: int, frame_time: float, caps: Capabilities,
               packets: str = "auto", continuous: bool = True,
               needs: Mapping[str, WriterNeeds | None] | None = None, frames: Iterable[int] | None = None,
               time: Iterable[float] | None = None, sensor: str = "sensor") -> Plan:
    """The packets of a range scan.

    Args:
        frame_start, frame_end: the scene's frame range; frame_time: s per scene frame.
        caps: the sensor's :class:`Capabilities` (its timing: sweep period, s).
        packets: the ``packets`` setting; continuous: the ``continuous`` time model.
        needs: format name -> :class:`WriterNeeds`.
        frames: scene frame numbers (an iterable or range; contiguous for sweeps), or
        time: ``(t0, t1)`` s instead of frames.
        sensor: the sensor type's name, for messages.
    Returns:
        :class:`Plan`.
    Raises:
        SettingsError: bad frames (``frames``) or interval (``time``), a non-contiguous
            frame list with sweeps, no packet starting in the interval, more than
            :data:`MAX_PACKETS` packets (naming ``caps.timing.setting``, the setting that
            sets the sweep period, or ``frames``), a sweep period longer than
            :data:`MAX_PACKET_TIME` (naming that setting), or formats the
            sensor or each other cannot serve (see :func:`packet_kind`,
            :func:`check_writers`).
    """
    needs = dict(needs or {})
    check_writers(caps, needs, sensor)
    kind = packet_kind(caps.timing, packets, continuous, sensor, needs)
    ft = float(frame_time)
    period = caps.timing.period if kind == "sweep" else ft
    if period is None or (kind == "sweep" and not (period > 0 and math.isfinite(period))):
        raise SettingsError("packets", f"frame for sensor type '{sensor}' (it has no sweep period)", "sweep")
    if kind == "sweep" and period > MAX_PACKET_TIME:  # before any span is evaluated
        raise SettingsError(caps.timing.setting or "packets", f"a value whose sweep period is at most "
                            f"{MAX_PACKET_TIME:g} s", f"a period of {period:.6g} s")
    idx: Sequence[int]
    if time is not None:
        t0, t1 = check_time_interval(time, frame_start * ft, (frame_end + 1) * ft)
        requested: object = {"time": [t0, t1]}
        idx = starting_in(t0, t1, period)
        if not idx:
            unit = "sweep" if kind == "sweep" else "frame"
            raise SettingsError("time", f"an interval in which a {unit} starts (one every {period:.6g} s)",
                                f"{t0:.6g}-{t1:.6g} s")
    else:
        frames = check_frames(frames, frame_start, frame_end)
        contiguous = frames == list(range(frames[0], frames[-1] + 1))
        requested = [frames[0], frames[-1]] if contiguous else list(frames)
        if kind == "frame":
            idx = frames
        else:
            if not contiguous:
                raise SettingsError("frames", "a contiguous range A-B with packets=sweep", requested)
            idx = overlapping(frames[0] * ft, (frames[-1] + 1) * ft, period)
    if len(idx) > MAX_PACKETS:  # before the packet list is built
        if kind == "frame":
            raise SettingsError("frames", f"at most {MAX_PACKETS:,} scene frames a run",
                                f"{len(idx):,} frames")
        raise SettingsError(caps.timing.setting or "packets", f"a value whose sweep period ({period:.6g} s "
                            f"now) gives at most {MAX_PACKETS:,} packets in the requested span (or fewer "
                            "frames)", f"{len(idx):,} sweep packets")
    return Plan(kind, tuple(Packet(kind, k) for k in idx), float(period), ft, requested)


__all__ = ["PACKET_SETTINGS", "MAX_PACKETS", "MAX_PACKET_TIME", "Plan", "plan_range", "packet_kind",
           "check_writers", "check_frames", "check_time_interval", "starting_in", "overlapping"]
