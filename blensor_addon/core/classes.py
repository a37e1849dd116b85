"""Semantic classes: name -> uint16 id, SemanticKITTI's table by default.

The names and ids of SemanticKITTI's ``semantic-kitti.yaml`` (``labels``), so labels
written by BlenSor (``ScanResult.semantic``, KITTI ``.label`` low 16 bits, LAS
``classification`` where it fits) mean what the benchmark's tools expect. An object's
custom property ``blensor_label`` names its class; an instance without one takes its
instancer's; no label is ``unlabeled`` (0).
"""
from __future__ import annotations

import numpy as np

from .errors import SettingsError

SEMANTIC_KITTI: dict[str, int] = {
    "unlabeled": 0, "outlier": 1, "car": 10, "bicycle": 11, "bus": 13, "motorcycle": 15, "on-rails": 16,
    "truck": 18, "other-vehicle": 20, "person": 30, "bicyclist": 31, "motorcyclist": 32, "road": 40,
    "parking": 44, "sidewalk": 48, "other-ground": 49, "building": 50, "fence": 51, "other-structure": 52,
    "lane-marking": 60, "vegetation": 70, "trunk": 71, "terrain": 72, "pole": 80, "traffic-sign": 81,
    "other-object": 99, "moving-car": 252, "moving-bicyclist": 253, "moving-person": 254,
    "moving-motorcyclist": 255, "moving-on-rails": 256, "moving-bus": 257, "moving-truck": 258,
    "moving-other-vehicle": 259,
}

#: the class table in use (name -> id)
CLASSES = SEMANTIC_KITTI


def semantic_of_objects(objects: list, classes: dict | None = None) -> np.ndarray:
    """Class id per object id from an object table (list of {"id", "name", "label"}):
    (max id + 1,) uint16, 0 for unlabelled objects.

    Raises:
        SettingsError (``blensor_label``): a label that is not a class name (the first
        such object is named).
    """
    classes = CLASSES if classes is None else classes
    out = np.zeros(max((o["id"] for o in objects), default=0) + 1, np.uint16)
    for o in objects:
        label = o.get("label", "")
        if not label:
            continue
        cid = classes.get(label)
        if cid is None:
            raise SettingsError("blensor_label", "a class name of the table (" + ", ".join(classes) + ")",
                                f"{label!r} on object {o['name']!r}")
        out[o["id"]] = cid
    return out
