"""FOV coverage of the rosette presets against integration time (numpy only, no bpy).

Coverage, as Livox defines it ("the fraction of FOV illuminated by laser beams", Livox HAP
user manual, section 1.2): the share of the field of view's solid angle that lies within
half a beam divergence of at least one beam fired in ``[0, T)``. Computed on a grid of
cells of ``--cell`` deg (default 0.28 deg, the Livox Mid-70 and Avia beam divergence's
larger side) in the pattern's own angular coordinates: each beam marks the cell its
direction falls in; a cell counts once, whatever the number of beams in it; coverage =
(solid angle of the marked cells) / (solid angle of the FOV's cells).

For a cone looking ahead (Mid-70, Avia) the cells are of the cone's polar projection
(x = off-axis angle cos(azimuth about the axis), y = ... sin(...): the azimuthal
equidistant projection), square cells of ``--cell`` deg weighted by their solid angle
(sin r / r, r the off-axis angle), those whose centre lies within the cone counted; for the Mid-360's band,
cells of (horizontal angle, elevation), weighted by cos(elevation).

    .venv/bin/python benchmarks/coverage.py [--cell 0.28] [--times 0.1,0.5,1.0]

Prints one row per preset and integration time: points fired, coverage (%).
"""
from __future__ import annotations

import argparse

import numpy as np

from blensor_addon.core.sensors import make_settings
from blensor_addon.core.sensors.rosette import firings

PRESETS = ("livox_mid70", "livox_avia", "livox_mid360")


def cone_coverage(d: np.ndarray, half_angle_deg: float, cell_deg: float) -> float:
    """Coverage of a cone of ``half_angle_deg`` around -Z by unit directions ``d`` (N, 3)
    (BlenSor sensor frame), on the polar projection's square cells of ``cell_deg``."""
    off = np.rad2deg(np.arccos(np.clip(-d[:, 2], -1.0, 1.0)))
    phi = np.arctan2(d[:, 1], d[:, 0])
    x, y = off * np.cos(phi), off * np.sin(phi)
    n = int(np.ceil(half_angle_deg / cell_deg))
    ix = np.clip(np.floor(x / cell_deg).astype(np.int64) + n, 0, 2 * n - 1)
    iy = np.clip(np.floor(y / cell_deg).astype(np.int64) + n, 0, 2 * n - 1)
    hit = np.zeros((2 * n, 2 * n), bool)
    hit[ix, iy] = True
    c = (np.arange(2 * n) - n + 0.5) * cell_deg
    r = np.hypot(c[:, None], c[None, :])
    inside = r <= half_angle_deg
    w = np.sinc(r / 180.0)  # sin(r) / r: a cell's solid angle in this (azimuthal equidistant) projection
    return float((w * (hit & inside)).sum() / (w * inside).sum())


def band_coverage(az: np.ndarray, el: np.ndarray, lo_deg: float, hi_deg: float, cell_deg: float) -> float:
    """Coverage of the band ``lo..hi`` deg elevation over 360 deg by beams at azimuth
    ``az`` and elevation ``el`` (rad), cells of ``cell_deg`` weighted by cos(elevation)."""
    na = int(round(360.0 / cell_deg))
    ne = int(np.ceil((hi_deg - lo_deg) / cell_deg))
    ia = np.mod(np.floor(np.rad2deg(az) / cell_deg).astype(np.int64), na)
    ie = np.clip(np.floor((np.rad2deg(el) - lo_deg) / cell_deg).astype(np.int64), 0, ne - 1)
    hit = np.zeros((na, ne), bool)
    hit[ia, ie] = True
    w = np.cos(np.deg2rad(lo_deg + (np.arange(ne) + 0.5) * cell_deg))
    return float((hit * w[None, :]).sum() / (na * w.sum()))


def coverage(preset: str, seconds: float, cell_deg: float) -> tuple[int, float]:
    """(points fired in ``[0, seconds)``, coverage in [0, 1]) of a rosette preset."""
    _, s = make_settings("rosette", {}, {"preset": preset})
    n = np.arange(int(round(seconds * s.points_per_second)), dtype=np.int64)
    f = firings(s, n)
    d = f["directions"][f["inside"]]
    if s.scan_orientation == (0.0, 90.0, 0.0):  # a cone looking ahead
        return len(d), cone_coverage(d, s.vertical_fov_upper - s.vertical_fov_lower, cell_deg)  # axis at -90
    az = np.arctan2(-d[:, 0], -d[:, 2])
    el = np.arcsin(np.clip(d[:, 1], -1, 1))
    return len(d), band_coverage(az, el, s.vertical_fov_lower, s.vertical_fov_upper, cell_deg)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=float, default=0.28, help="cell size, deg (default 0.28)")
    ap.add_argument("--times", default="0.1,0.5,1.0", help="integration times, s")
    args = ap.parse_args(argv)
    times = [float(t) for t in args.times.split(",")]
    print(f"coverage of the FOV, cells of {args.cell:g} deg")
    print(f"{'preset':<14} {'time s':>7} {'points':>9} {'coverage %':>11}")
    for p in PRESETS:
        for t in times:
            n, c = coverage(p, t, args.cell)
            print(f"{p:<14} {t:>7.2f} {n:>9,} {100 * c:>11.1f}")


if __name__ == "__main__":
    main()
