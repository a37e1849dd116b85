"""A numpy-only stand-in for the scene layer's ScanContext and its Hits, for tests that run
a sensor's core path (cast, receiver, detection, assembly) on a synthetic target without
Blender (tests/test_detect_and_assemble.py's wall, tests/test_radiometry.py's plate)."""
from __future__ import annotations

import numpy as np


class FakeHits:
    """The Hits protocol's fields (N rows each; ``last_dir`` may be None)."""

    FIELDS = ("range", "hit", "reflectivity", "cos_incidence", "normal", "last_dir", "color", "object_id",
              "instancer_id", "instance_id", "semantic", "ray", "weight")
    returned = energy = None  # set on echo hits only

    def __init__(self, **arrays):
        for k in self.FIELDS:
            setattr(self, k, arrays[k])

    def take(self, idx):
        return type(self)(**{k: None if getattr(self, k) is None else getattr(self, k)[idx]
                             for k in self.FIELDS})

    @classmethod
    def concat(cls, parts):
        return cls(**{k: None if getattr(parts[0], k) is None
                      else np.concatenate([getattr(p, k) for p in parts]) for k in cls.FIELDS})


def one_object_hits(rng, hit, reflectivity, cos_incidence, normal, last_dir) -> FakeHits:
    """FakeHits of N rays on one object (id 1, unlabelled, drawn directly): ``rng`` (N,)
    float64 m (inf where ``hit`` is False), ``hit`` (N,) bool, ``reflectivity`` float,
    ``cos_incidence`` (N,) or float, ``normal`` (N, 3) float32, ``last_dir`` (N, 3) or None."""
    n = hit.shape[0]
    return FakeHits(range=rng, hit=hit, reflectivity=np.full(n, reflectivity, np.float32),
                    cos_incidence=np.broadcast_to(np.asarray(cos_incidence, np.float64), (n,)).copy(),
                    normal=normal, last_dir=last_dir, color=np.zeros((n, 3), np.uint8),
                    object_id=np.ones(n, np.uint32), instancer_id=np.zeros(n, np.uint32),
                    instance_id=np.zeros(n, np.uint32), semantic=np.zeros(n, np.uint16),
                    ray=np.arange(n, dtype=np.int64), weight=np.ones(n, np.float32))


class FakeContext:
    """The ScanContext members a sensor's core path reads besides ``cast``: sensor frame =
    world frame, no objects, the surface fields taken from the hits."""

    sensor_to_world = np.eye(4)
    sensor_to_world_end = None
    frame_of_reference = "sensor"
    objects: list = []
    camera = None

    def sensor_points_to(self, frame, xyz, hits, world=None):
        return xyz

    def surface(self, pattern, hits):
        return {"object_id": hits.object_id, "semantic": hits.semantic, "instancer_id": hits.instancer_id,
                "instance_id": hits.instance_id, "cos_inc": hits.cos_incidence, "color": hits.color,
                "normal": hits.normal.astype(np.float64)}
