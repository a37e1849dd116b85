"""The sensor's pose between two scene samples (scene/timeline.py ``PoseSegment``): the
orientation turned by Rodrigues' formula per ray, its cosine and sine taken once per
ray of a step and shared by the ray's direction and origin, with the values of the
per-set computation, bit for bit."""
from __future__ import annotations

import math

import numpy as np

from blensor_addon.scene import timeline
from blensor_addon.scene.timeline import PoseSegment


def _turning_segment() -> PoseSegment:
    """A segment whose orientation turns 0.3 rad about a tilted axis and moves 1 m."""
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q[:, 0] *= np.sign(np.linalg.det(q))
    p0, p1 = np.eye(4), np.eye(4)
    p0[:3, :3], p0[:3, 3] = q, (1.0, 2.0, 3.0)
    a = 0.3
    turn = np.array([[math.cos(a), 0.0, math.sin(a)], [0.0, 1.0, 0.0], [-math.sin(a), 0.0, math.cos(a)]])
    p1[:3, :3], p1[:3, 3] = q @ turn, (2.0, 2.0, 3.0)
    return PoseSegment(0.0, 0.1, p0, p1)


def _reference(seg: PoseSegment, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``R(s) v`` as the formula reads, component by component, then ``R0``."""
    a0, a1, a2 = (float(a) for a in seg.axis)
    c, sn = np.cos(seg.theta * s), np.sin(seg.theta * s)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    d = (x * a0 + y * a1 + z * a2) * (1.0 - c)
    out = np.stack([x * c + (a1 * z - a2 * y) * sn + d * a0,
                    y * c + (a2 * x - a0 * z) * sn + d * a1,
                    z * c + (a0 * y - a1 * x) * sn + d * a2], axis=1)
    return out @ seg.R0.T


def test_shared_turn_gives_the_same_bits():
    seg = _turning_segment()
    rng = np.random.default_rng(3)
    s = np.sort(rng.random(5000))
    dirs, origins = rng.normal(size=(5000, 3)), rng.normal(scale=0.1, size=(5000, 3))
    turn = seg.turn(s)
    assert turn is not None
    for v in (dirs, origins):
        want = _reference(seg, s, v)
        assert seg.rotate(s, v, turn=turn).tobytes() == want.tobytes()
        assert seg.rotate(s, v).tobytes() == want.tobytes()
    still = PoseSegment(0.0, 0.1, np.eye(4), np.eye(4), still=True)
    assert still.turn(s) is None
    assert still.rotate(s, dirs).tobytes() == (dirs @ np.eye(3)).tobytes()


class _CountingNumpy:
    """numpy, with the elements its ``cos`` and ``sin`` were given counted."""

    def __init__(self) -> None:
        self.count = {"cos": 0, "sin": 0}

    def __getattr__(self, name):
        fn = getattr(np, name)
        if name in self.count:
            def counted(x, *args, **kwargs):
                self.count[name] += int(np.size(x))
                return fn(x, *args, **kwargs)
            return counted
        return fn


def test_a_cast_takes_each_rays_turn_once(crossing, monkeypatch):
    """A continuous-time scan whose sensor turns and carries beam origins (the HDL-64E
    S2's per-laser offsets): the casts take one cosine and one sine per ray (they were
    taken once for the directions and again for the origins)."""
    import bpy

    import blensor_addon
    from blensor_addon.scene.context import TimelineContext

    cam = bpy.data.objects["Velodyne"]
    cam.rotation_mode = "XYZ"
    z0 = cam.rotation_euler[2]
    for frame, z in ((1, z0), (48, z0 + 1.0)):
        cam.rotation_euler[2] = z
        cam.keyframe_insert("rotation_euler", index=2, frame=frame)
    counting = _CountingNumpy()
    monkeypatch.setattr(timeline, "np", counting)
    cast = TimelineContext.cast
    seen = {"rays": 0, "cos": 0, "sin": 0, "origins": 0}

    def counted_cast(self, origins, directions, *args, **kwargs):
        before = dict(counting.count)
        hits = cast(self, origins, directions, *args, **kwargs)
        seen["rays"] += int(np.size(directions)) // 3
        seen["origins"] += origins is not None
        seen["cos"] += counting.count["cos"] - before["cos"]
        seen["sin"] += counting.count["sin"] - before["sin"]
        return hits

    monkeypatch.setattr(TimelineContext, "cast", counted_cast)
    result = blensor_addon.scan(cam, frame=12)
    assert len(result) > 0 and seen["origins"] > 0
    assert seen["rays"] > 100_000
    assert (seen["cos"], seen["sin"]) == (seen["rays"], seen["rays"])
