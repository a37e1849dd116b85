"""Write the example pattern files of this folder (numpy only; no Blender needed).

Usage: ``python examples/patterns/make_patterns.py [OUT_DIR]`` (default: this folder).
Writes the same bytes every time. Layout: ``blensor_addon/core/sensors/pattern_file.py``
(CSV header ``azimuth_deg,elevation_deg,time_s,channel[,origin_x_m,origin_y_m,origin_z_m]``;
azimuth 0 ahead, positive counter-clockwise seen from above; elevation positive up;
time in [0, period) s; origins in the REP-103 sensor frame, x ahead, y left, z up).

Files:

- ``planar_2d.csv``: the degenerate case, a 2D scanner: one channel at elevation 0 swept
  -135..+135 deg (exclusive) in 0.25 deg steps, 1080 firings spread evenly over a
  period of 1/40 s: exactly the rays of BlenSor's planar ``generic`` preset (the
  original's generic LIDAR, Hokuyo UTM-30LX-like: 270 deg, 0.25 deg, 40 Hz). Scanned,
  it writes ROS ``LaserScan``.
- ``mems_lissajous.csv``: a 2-axis resonant MEMS mirror scanning a Lissajous figure
  (the scan of MEMS units in the manner of Hwang, Seo and Jeong, "Frequency selection
  rule for high definition and high frame rate Lissajous scanning", Sci. Rep. 7, 14075
  (2017)): azimuth ``30 sin(2 pi fx t)`` deg, elevation ``10 sin(2 pi fy t + pi / 4)``
  deg, fx = 101 / P = 2020 Hz, fy = 60 / P = 1200 Hz (coprime multiples of the frame
  rate, so the figure closes once per period P = 0.05 s, 20 Hz), one laser fired at
  100 kHz: 5000 firings a period over a 60 x 20 deg field. A generic unit, not a
  particular product.
- ``at128_hybrid.npy``: a hybrid solid-state unit like Hesai's AT128: a fixed vertical
  fan of 128 channels (elevations -12.5 .. +12.9 deg in 0.2 deg steps, a 25.4 deg
  field) swept horizontally by a mirror over 120 deg (+60 .. -60 deg, left to right, in
  0.1 deg steps: 1200 columns) once per frame at 10 Hz: 153,600 firings a frame,
  1,536,000 points/s, the datasheet's single-return rate (Hesai AT128 product page and
  datasheet: 128 channels, 120 x 25.4 deg FOV, 0.1 x 0.2 deg resolution, 10 Hz frame
  rate, 1,536,000 points/s single return). Every channel of a column fires at the
  column's time (c * 0.1 / 1200 s); the unit's real per-channel firing offsets, mirror
  facets and its uneven (ROI) vertical spacing are not modelled. float32 (N, 4) array,
  2.4 MB; a .npy file holds no period: scan it with ``pattern_period=0.1``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HEADER = "azimuth_deg,elevation_deg,time_s,channel"


def write_csv(path: Path, az, el, t, ch, period: float, comments: list[str]) -> None:
    """A CSV pattern with exact float round trips (``repr``)."""
    lines = [f"# {c}" for c in comments] + [f"# period_s: {period!r}", HEADER]
    lines += [f"{float(a)!r},{float(e)!r},{float(s)!r},{int(c)}" for a, e, s, c in zip(az, el, t, ch)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def planar_2d(out: Path) -> None:
    count, rate = 1080, 40.0  # int((135 - -135) / 0.25) columns, as the planar sensor counts them
    c = np.arange(count)
    write_csv(out / "planar_2d.csv", -135.0 + c * 0.25, np.zeros(count), c / (count * rate), np.zeros(count),
              1.0 / rate, ["BlenSor pattern file: a 2D scanner (the planar sensor's generic preset rays)",
                           "270 deg in 0.25 deg steps, 40 Hz; one channel at elevation 0"])


def mems_lissajous(out: Path) -> None:
    period, rate = 0.05, 100_000.0
    n = int(round(period * rate))
    t = np.arange(n) / rate
    fx, fy = 101 / period, 60 / period
    az = np.round(30.0 * np.sin(2 * np.pi * fx * t), 6)
    el = np.round(10.0 * np.sin(2 * np.pi * fy * t + np.pi / 4), 6)
    write_csv(out / "mems_lissajous.csv", az, el, t, np.zeros(n), period,
              ["BlenSor pattern file: a 2-axis resonant MEMS mirror, Lissajous scan",
               f"azimuth 30 sin(2 pi {fx:g} t) deg, elevation 10 sin(2 pi {fy:g} t + pi/4) deg, "
               "100 kHz, 20 Hz"])


def at128_hybrid(out: Path) -> None:
    channels, columns, period = 128, 1200, 0.1
    el = -12.5 + 0.2 * np.arange(channels)  # -12.5 .. +12.9 deg
    az = 60.0 - 0.1 * np.arange(columns)  # +60 (left) .. -59.9 deg (right)
    t = np.arange(columns) * (period / columns)
    cols = np.repeat(np.arange(columns), channels)
    chans = np.tile(np.arange(channels), columns)
    data = np.stack([az[cols], el[chans], t[cols], chans], axis=1).astype(np.float32)
    np.save(out / "at128_hybrid.npy", data)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    planar_2d(out)
    mems_lissajous(out)
    at128_hybrid(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
