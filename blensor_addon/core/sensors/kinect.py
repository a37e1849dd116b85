"""Structured-light depth camera (Microsoft Kinect v1).

Seed 000 section 3.6; reference section 6.5. A projector at ``+baseline`` on the sensor's
X axis throws a dot pattern; the IR camera at the sensor origin sees it; depth comes
from the disparity between the two. Per frame, two casts (the sensor gets the ray
caster, not one result):

1. Projector rays through the centres of a ``width`` x ``height`` pinhole grid (focal
   length ``f = width / 2 / tan(fov_h / 2)`` px, square pixels), from the projector.
2. From the camera towards each projected point P: the pixel is valid only if the
   camera sees P itself (not something in front of it: the shadow beside objects) and
   ``min_depth <= Z <= max_depth`` (Z = -P_z, m).

Disparity ``d = f * baseline / Z`` (px) gets ``N(0, noise_sigma)`` px of noise and is
quantized to ``1 / subpixel`` px (1/8 on the Kinect), so depth steps grow as
``Z^2 / (subpixel * f * baseline)``. Windowed validity and smoothing as the original
(reference 6.5 step 4, simplified): a 9 x 9 window around each valid pixel must hold
more valid dots than 1/1.5 of its dots; the output disparity is the mean of the valid
dots' quantized disparities in the window, quantized again (so the valid region shrinks
by about 2 px at its edges: with a dot on every pixel, 7 of the 9 window columns must be
valid). The dot pattern is BlenSor's
own: each pixel is a dot with probability ``dot_density``, drawn from the seed (the
original shipped a fixed 495 x 633 mask). Output: one value per projector pixel (row 0 at
the top), as the original's; ``range``/``xyz`` are the true projected points,
``range_noisy``/``xyz_noisy`` lie on the projector ray at the measured depth, so the
depth image is ``-xyz_noisy[:, 2]``.

Kinect v1 constants (reference 6.5; the issue's values): 640 x 480, ~58 x 45 deg
(fov_h 58 deg, square pixels give 45.1 deg vertically), baseline 0.075 m, depth
0.7..6.0 m, 1/8 px disparity steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import Preset, SensorSettings, check_less, setting
from .budget import MAX_PIXELS_SIDE, refuse_rays
from .patterns import RayPattern, angles_of, pinhole_grid, pinhole_intrinsics
from .physics import assemble, frame_rng
from .sensor import Sensor

PRESETS = {
    "kinect_v1": Preset("Microsoft Kinect v1", {"width": 640, "height": 480, "fov_h": 58.0, "baseline": 0.075,
                                                "min_depth": 0.7, "max_depth": 6.0, "noise_sigma": 0.0,
                                                "subpixel": 8, "dot_density": 0.25},
                        "reference 6.5; seed 000 section 3.6"),
}
WINDOW = 9


@dataclass(frozen=True)
class KinectSettings(SensorSettings):
    """Settings of the structured-light camera. Attributes (units): preset; width,
    height (px, 1..16384); fov_h (deg, (0, 180)); baseline (m, > 0); min_depth,
    max_depth (m); noise_sigma (px, disparity noise); subpixel (disparity steps per
    pixel, 1..64); dot_density (fraction of pixels that are dots, (0, 1])."""

    preset: str = setting("kinect_v1", "Sensor", "Sensor model; choosing one sets its values", choices=tuple(PRESETS))
    width: int = setting(640, "Width", "Pixels per row", "px", lo=1, hi=MAX_PIXELS_SIDE)
    height: int = setting(480, "Height", "Pixel rows", "px", lo=1, hi=MAX_PIXELS_SIDE)
    fov_h: float = setting(58.0, "Horizontal FOV", "Horizontal field of view", "deg", lo=0.0, hi=180.0,
                           lo_open=True, hi_open=True)
    baseline: float = setting(0.075, "Baseline", "Projector offset along +X from the camera", "m", lo=0.0, hi=10.0,
                              lo_open=True, precision=4)
    min_depth: float = setting(0.7, "Min depth", "Nearest valid depth", "m", lo=0.0, hi=1e4)
    max_depth: float = setting(6.0, "Max depth", "Farthest valid depth", "m", lo=0.0, hi=1e4, lo_open=True)
    noise_sigma: float = setting(0.0, "Noise sigma", "Disparity noise", "px", lo=0.0, hi=100.0, precision=4)
    subpixel: int = setting(8, "Subpixel steps", "Disparity steps per pixel (quantization)", lo=1, hi=64)
    dot_density: float = setting(0.25, "Dot density", "Fraction of pixels lit by a projector dot", lo=0.0, hi=1.0,
                                 lo_open=True)

    def check(self) -> None:
        check_less("min_depth", self.min_depth, "max_depth", self.max_depth, "m")

    @property
    def focal_px(self) -> float:
        """Focal length in pixels, ``width / 2 / tan(fov_h / 2)``."""
        return self.width / 2.0 / np.tan(np.deg2rad(self.fov_h) / 2.0)


def dot_pattern(seed: int, height: int, width: int, density: float) -> np.ndarray:
    """(height, width) bool projector dots, deterministic in ``seed``."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0xD075])))
    return rng.random((height, width)) < density


def box_sum(a: np.ndarray, k: int = WINDOW) -> np.ndarray:
    """Sum of ``a`` (H, W) over the k x k window centred on each pixel (zeros outside)."""
    r = k // 2
    p = np.pad(a.astype(np.float64), ((r + 1, r), (r + 1, r)))
    c = p.cumsum(0).cumsum(1)
    return c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]


class Kinect(Sensor):
    """The structured-light camera (see the module docstring)."""

    name = "kinect"
    label = "Kinect"
    description = "Structured-light depth camera with projector shadows and disparity steps (Kinect v1)"
    Settings = KinectSettings
    presets = PRESETS
    storage = "kinect"
    number = 4  # stored value of sensor_type (saved files keep it)
    organized = True

    def grid_shape(self, s, frame, frame_time, mode, camera):
        return (s.height, s.width)

    def check_budget(self, s, frame, frame_time, mode, camera):
        refuse_rays(2 * s.width * s.height, "width", s.width, grows=True, unit="px")
        return 2 * s.width * s.height

    def max_range(self, s) -> float:
        return float(s.max_depth) * 4.0  # depth along the axis; rays at the image corners are longer

    def reported_range(self, s) -> float:
        """``max_depth`` (m): the farthest depth the device reports."""
        return float(s.max_depth)

    @staticmethod
    def view(s) -> tuple:
        """(x_min, x_max, y_min, y_max, z) of the projector's pinhole grid at z = -1
        (square pixels of focal length :attr:`KinectSettings.focal_px`)."""
        tx, ty = (s.width / 2.0) / s.focal_px, (s.height / 2.0) / s.focal_px
        return (-tx, tx, -ty, ty, -1.0)

    def intrinsics(self, s, camera):
        return pinhole_intrinsics(s.width, s.height, *self.view(s))

    def trace(self, s, ctx, *, frame, frame_time, mode):
        """Two casts (projector, then camera; see the module docstring)."""
        W, H = s.width, s.height
        f = s.focal_px
        u, idx = pinhole_grid(W, H, *self.view(s))
        origin = np.array([s.baseline, 0.0, 0.0])
        origins = np.broadcast_to(origin, u.shape)
        proj = ctx.cast(origins, u, self.max_range(s), s.max_bounces)
        P = origin + u * np.where(proj.hit, proj.range, 0.0)[:, None]
        dist = np.linalg.norm(P, axis=1)
        cand = np.flatnonzero(proj.hit & (dist > 0))
        seen = np.zeros(W * H, bool)
        if cand.size:
            cam = ctx.cast(np.zeros((cand.size, 3)), P[cand] / dist[cand, None], float(dist[cand].max()) * 1.001 + 1e-3,
                           s.max_bounces)
            seen[cand] = cam.hit & (np.abs(cam.range - dist[cand]) <= 1e-4 + 1e-5 * dist[cand])
        Z = -P[:, 2]
        valid = seen & (Z >= s.min_depth) & (Z <= s.max_depth)
        rng = frame_rng(s.seed, frame)
        disp = np.zeros(W * H)
        disp[valid] = f * s.baseline / Z[valid]
        if s.noise_sigma > 0:
            disp[valid] += rng.normal(0.0, s.noise_sigma, int(valid.sum()))
        q = float(s.subpixel)
        disp = np.round(disp * q) / q
        # windowed validity and smoothing over the dot pattern
        dots = dot_pattern(s.seed, H, W, s.dot_density)
        vd = (dots & valid.reshape(H, W))
        n_dots, n_valid = box_sum(dots), box_sum(vd)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = box_sum(np.where(vd, disp.reshape(H, W), 0.0)) / n_valid
        ok = valid.reshape(H, W) & (n_valid * 1.5 > n_dots) & (n_valid > 0)
        out = np.round(mean * q) / q
        ok &= out > 0
        keep = np.flatnonzero(ok.ravel())
        z_meas = f * s.baseline / out.ravel()[keep]
        az, el = angles_of(u[keep])
        pattern = RayPattern(directions=u[keep].astype(np.float32), azimuth=az, elevation=el,
                             channel=np.zeros(keep.size, np.uint16), ray_index=idx[keep],
                             timestamp=np.full(keep.size, frame * frame_time),
                             origins=np.broadcast_to(origin, (keep.size, 3)).astype(np.float32))
        hits = proj.take(keep)
        r = hits.range.astype(np.float64)
        r_noisy = z_meas / -u[keep, 2]
        return assemble(pattern, hits, r, r_noisy, ctx, s, frame=frame, frame_time=frame_time,
                        num_rays=W * H + cand.size, grid_shape=(H, W))


SENSOR = Kinect()
