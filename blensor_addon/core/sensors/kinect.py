"""Structured-light depth camera (Microsoft Kinect v1).

Reference section 6.5 (the original's model). The IR camera sits at the sensor origin and
defines the image: its ``width`` x ``height`` pinhole grid (focal length ``f = width / 2 /
tan(fov_h / 2)`` px, square pixels) is the depth image, the ``intrinsics`` and the ROS
CameraInfo, so back-projecting pixel (u, v) with depth Z gives ``X = (u - cx) Z / f``,
the point the camera saw there. A projector at ``+baseline`` on the sensor's X axis throws
the dot pattern. Per frame, two casts (the sensor gets the ray caster, not one result):

1. The camera's pixel rays from the origin: the surface point P each pixel sees, depth
   ``Z = -P_z`` (m); pixels with ``min_depth <= Z <= max_depth`` go on.
2. From the projector towards each such P: the pixel is lit only if the projector reaches
   P itself (not something in front of it). The unlit band beside an object is the
   device's shadow: ``f b (1 / Z_near - 1 / Z_far)`` px wide.

Disparity ``d = f b / Z`` (px). Windowed validity and smoothing as the original (reference
6.5 step 4, simplified): a 9 x 9 window around each lit pixel must hold more lit dots than
1/1.5 of its dots; the pixel's disparity is the mean of the lit dots' disparities in the
window (so the valid region shrinks by about 2 px at its edges: with a dot on every
pixel, 7 of the 9 window columns must be lit). The dot pattern is BlenSor's own: each
pixel is a dot with probability ``dot_density``, drawn from the seed (the original shipped
a fixed 495 x 633 mask); a random pattern seen shifted by the disparity is again such a
pattern, so it is drawn on the camera's grid. Then, per output pixel, ``N(0,
noise_sigma)`` px of disparity noise and, last, the quantization to ``1 / subpixel`` px
(1/8 on the Kinect), as on the device: every depth is ``Z = f b subpixel / k`` for an
integer k, and the depth steps grow as ``Z^2 / (subpixel f b)``.

Noise: the default 0.06 px gives, with the 1/8 px quantization (sigma 0.036 px), a random
error of ``Z^2 / (f b) * sqrt(0.06^2 + 0.036^2)`` = 4.0 cm at 5 m (f = 577 px, b =
0.075 m): the "about 4 cm at the maximum range" measured by Khoshelham and Oude Elberink
(Sensors 12(2):1437-1454, 2012), a few millimetres at 1 m (1.6 mm; Nguyen, Izadi and
Lovell 2012 fit 1.9 mm). The original's default was 0 px (reference 6.5).

Output: one value per camera pixel (row 0 at the top) that passed; ``range``/``xyz`` the
true point P, ``range_noisy``/``xyz_noisy`` on the same pixel ray at the measured depth
(the depth image is ``-xyz_noisy[:, 2]``); ``min_range`` (m) drops measured ranges below
it. Kinect v1 constants (reference 6.5): 640 x 480, ~58 x 45 deg (fov_h
58 deg, square pixels give 45.1 deg vertically), baseline 0.075 m, depth 0.7..6.0 m, 1/8
px disparity steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ndtypes import F64, Bool
from ..settings import Preset, SensorSettings, check_less, setting
from .budget import MAX_PIXELS_SIDE, refuse_rays
from .raypattern import CameraFrame, RayPattern, angles_of, pinhole_grid, pinhole_intrinsics
from .physics import check_min_range, frame_rng, min_range_setting
from .protocols import ScanContext
from .sensor import Sensor, Traced

PRESETS = {
    "kinect_v1": Preset("Microsoft Kinect v1", {"width": 640, "height": 480, "fov_h": 58.0, "baseline": 0.075,
                                                "min_depth": 0.7, "max_depth": 6.0, "noise_sigma": 0.06,
                                                "subpixel": 8, "dot_density": 0.25},
                        "reference 6.5; noise: Khoshelham and Oude Elberink 2012"),
}
WINDOW = 9


@dataclass(frozen=True)
class KinectSettings(SensorSettings):
    """Settings of the structured-light camera. Attributes (units): preset; width,
    height (px, 1..16384); fov_h (deg, (0, 180)); baseline (m, > 0); min_depth,
    max_depth (m, depth Z limits); min_range (m, nearest measured range along the pixel
    ray, 0 = none, less than max_depth); noise_sigma (px, disparity noise); subpixel
    (disparity steps per pixel, 1..64); dot_density (fraction of pixels that are dots,
    (0, 1])."""

    preset: str = setting("kinect_v1", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    width: int = setting(640, "Width", "Pixels per row", "px", lo=1, hi=MAX_PIXELS_SIDE)
    height: int = setting(480, "Height", "Pixel rows", "px", lo=1, hi=MAX_PIXELS_SIDE)
    fov_h: float = setting(58.0, "Horizontal FOV", "Horizontal field of view", "deg", lo=0.0, hi=180.0,
                           lo_open=True, hi_open=True)
    baseline: float = setting(0.075, "Baseline", "Projector offset along +X from the camera", "m", lo=0.0,
                              hi=10.0, lo_open=True, precision=4)
    min_depth: float = setting(0.7, "Min depth", "Nearest valid depth", "m", lo=0.0, hi=1e4)
    max_depth: float = setting(6.0, "Max depth", "Farthest valid depth", "m", lo=0.0, hi=1e4, lo_open=True)
    min_range: float = min_range_setting()
    noise_sigma: float = setting(0.06, "Noise sigma", "Disparity noise per pixel, before the quantization",
                                 "px", lo=0.0, hi=100.0, precision=4)
    subpixel: int = setting(8, "Subpixel steps", "Disparity steps per pixel (quantization)", lo=1, hi=64)
    dot_density: float = setting(0.25, "Dot density", "Fraction of pixels lit by a projector dot", lo=0.0,
                                 hi=1.0, lo_open=True)

    def check(self) -> None:
        check_less("min_depth", self.min_depth, "max_depth", self.max_depth, "m")
        check_min_range(self, "max_depth")

    @property
    def focal_px(self) -> float:
        """Focal length in pixels, ``width / 2 / tan(fov_h / 2)``."""
        return float(self.width / 2.0 / np.tan(np.deg2rad(self.fov_h) / 2.0))


def dot_pattern(seed: int, height: int, width: int, density: float) -> Bool:
    """(height, width) bool projector dots, deterministic in ``seed``."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0xD075])))
    return rng.random((height, width)) < density


def box_sum(a: Bool | F64, k: int = WINDOW) -> F64:
    """Sum of ``a`` (H, W) over the k x k window centred on each pixel (zeros outside)."""
    r = k // 2
    p = np.pad(a.astype(np.float64), ((r + 1, r), (r + 1, r)))
    c = p.cumsum(0).cumsum(1)
    out: F64 = c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]
    return out


class Kinect(Sensor[KinectSettings]):
    """The structured-light camera (see the module docstring)."""

    name = "kinect"
    label = "Kinect"
    description = "Structured-light depth camera with projector shadows and disparity steps (Kinect v1)"
    Settings = KinectSettings
    presets = PRESETS
    storage = "kinect"
    number = 4  # stored value of sensor_type (saved files keep it)
    organized = True

    def grid_shape(self, s: KinectSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return (s.height, s.width)

    def check_budget(self, s: KinectSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        refuse_rays(2 * s.width * s.height, "width", s.width, grows=True, unit="px")
        return 2 * s.width * s.height

    def max_range(self, s: KinectSettings) -> float:
        return float(s.max_depth) * 4.0  # depth along the axis; rays at the image corners are longer

    def reported_range(self, s: KinectSettings) -> float:
        """``max_depth`` (m): the farthest depth the device reports."""
        return float(s.max_depth)

    @staticmethod
    def view(s: KinectSettings) -> tuple[float, float, float, float, float]:
        """(x_min, x_max, y_min, y_max, z) of the IR camera's pinhole grid at z = -1
        (square pixels of focal length :attr:`KinectSettings.focal_px`)."""
        tx, ty = (s.width / 2.0) / s.focal_px, (s.height / 2.0) / s.focal_px
        return (-tx, tx, -ty, ty, -1.0)

    def intrinsics(self, s: KinectSettings, camera: CameraFrame | None) -> tuple[float, ...]:
        return pinhole_intrinsics(s.width, s.height, *self.view(s))

    def cast_returns(self, s: KinectSettings, ctx: ScanContext, *, frame: int, frame_time: float,
                     mode: str) -> Traced:
        """Two casts (camera, then projector; see the module docstring): the pixels whose
        windowed, noisy, quantized disparity gives a depth, with that depth's range along
        the pixel ray as their measured range."""
        W, H = s.width, s.height
        f = s.focal_px
        fb = f * s.baseline
        u, idx = pinhole_grid(W, H, *self.view(s))
        cam = ctx.cast(None, u, self.max_range(s), s.max_bounces)
        P = u * np.where(cam.hit, cam.range, 0.0)[:, None]
        Z = -P[:, 2]
        cand = np.flatnonzero(cam.hit & (Z >= s.min_depth) & (Z <= s.max_depth) & (Z > 0))
        lit = np.zeros(W * H, bool)
        if cand.size:
            b = np.array([s.baseline, 0.0, 0.0])
            v = P[cand] - b
            dist = np.linalg.norm(v, axis=1)
            proj = ctx.cast(np.broadcast_to(b, v.shape), v / dist[:, None], float(dist.max()) * 1.001 + 1e-3,
                            s.max_bounces)
            lit[cand] = proj.hit & (np.abs(proj.range - dist) <= 1e-4 + 1e-5 * dist)
        disp = np.zeros(W * H)
        disp[lit] = fb / Z[lit]
        # windowed validity and smoothing over the dot pattern (true disparities)
        dots = dot_pattern(s.seed, H, W, s.dot_density)
        vd = dots & lit.reshape(H, W)
        n_dots, n_valid = box_sum(dots), box_sum(vd)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = box_sum(np.where(vd, disp.reshape(H, W), 0.0)) / n_valid
        ok = (lit.reshape(H, W) & (n_valid * 1.5 > n_dots) & (n_valid > 0)).ravel()
        keep = np.flatnonzero(ok)
        out = mean.ravel()[keep]
        if s.noise_sigma > 0:  # per output pixel, before the quantization
            out = out + frame_rng(s.seed, frame).normal(0.0, s.noise_sigma, keep.size)
        q = float(s.subpixel)
        k = np.round(out * q)  # the device's disparity code: k / subpixel px
        pos = k > 0
        keep, k = keep[pos], k[pos]
        z_meas = fb * q / k
        az, el = angles_of(u[keep])
        pattern = RayPattern(directions=u[keep].astype(np.float32), azimuth=az, elevation=el,
                             channel=np.zeros(keep.size, np.uint16), ray_index=idx[keep],
                             timestamp=np.full(keep.size, frame * frame_time))
        return Traced(pattern, cam.take(keep), num_rays=W * H + cand.size, grid=(H, W),
                      measured=z_meas / -u[keep, 2])


SENSOR = Kinect()
