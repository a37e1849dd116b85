"""Semantic classes: name -> uint16 id, SemanticKITTI's table by default.

The names and ids of SemanticKITTI's ``semantic-kitti.yaml`` (``labels``), so labels
written by BlenSor (``ScanResult.semantic``, KITTI ``.label`` low 16 bits, LAS
``semantic`` extra dimension) mean what the benchmark's tools expect. An object's
custom property ``blensor_label`` names its class; an instance without one takes its
instancer's; no label is ``unlabeled`` (0). Also owns the class tables the writers derive
from it: SemanticKITTI's thing classes (instance ids) and moving-* classes, and the
ASPRS classification of LAS files (:data:`ASPRS_OF_SEMANTIC_KITTI`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import SettingsError
from .ndtypes import U8, U16, Bool, Integer

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


def semantic_of_objects(objects: Sequence[Mapping[str, Any]],
                        classes: Mapping[str, int] | None = None) -> U16:
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


#: SemanticKITTI ``things`` (countable objects): the classes whose points carry an
#: instance id in the dataset's ``.label`` files; every other class (``stuff``: road,
#: sidewalk, parking, building, vegetation, terrain, ...; and unlabeled, outlier) has
#: instance id 0 there (semantic-kitti.yaml; the panoptic benchmark's thing classes plus
#: bus and on-rails, which the raw labels also give instances, and their moving-* ids)
THING_CLASSES: frozenset[int] = frozenset((10, 11, 13, 15, 16, 18, 20, 30, 31, 32, *range(252, 260)))

#: static class id -> its moving-* class (semantic-kitti.yaml ids 252..259); a class
#: without a moving variant (bicycle, motorcycle: their riders move) keeps its id
MOVING_CLASS: dict[int, int] = {10: 252, 31: 253, 30: 254, 32: 255, 16: 256, 13: 257, 18: 258, 20: 259}

#: ASPRS classification (LAS 1.4 R15, Table 17 "ASPRS Standard Point Classes"; codes
#: 64-255 "user definable") of each SemanticKITTI class, for LAS ``classification``.
#: Standard codes where one fits: 1 unclassified, 2 ground, 3 low vegetation, 5 high
#: vegetation, 6 building, 7 low point (noise), 11 road surface. ASPRS has no class for
#: vehicles, people, poles, signs or fences: they take user-definable codes 64-78
#: (named in the file's Classification Lookup VLR), a moving-* class the code of its
#: static class (the SemanticKITTI id, moving included, stays in the extra dimension
#: ``semantic``). KITTI's ``terrain`` ("grass and all other horizontally spreading
#: vegetation, including soil") is low vegetation (3); ``vegetation`` (trees' and
#: bushes' foliage) and ``trunk`` are high vegetation (5); medium vegetation (4) is not
#: used (the classes carry no height above ground).
ASPRS_OF_SEMANTIC_KITTI: dict[int, int] = {
    0: 1, 1: 7,  # unlabeled -> unclassified; outlier -> low point (noise)
    40: 11, 44: 11, 60: 11,  # road, parking, lane-marking -> road surface
    48: 2, 49: 2,  # sidewalk, other-ground -> ground
    50: 6,  # building
    70: 5, 71: 5, 72: 3,  # vegetation, trunk -> high vegetation; terrain -> low vegetation
    10: 64, 252: 64, 11: 65, 13: 66, 257: 66, 15: 67, 16: 68, 256: 68, 18: 69, 258: 69, 20: 70, 259: 70,
    30: 71, 254: 71, 31: 72, 253: 72, 32: 73, 255: 73,
    51: 74, 52: 75, 80: 76, 81: 77, 99: 78,
}

#: names of the ASPRS codes :data:`ASPRS_OF_SEMANTIC_KITTI` uses (the LAS Classification
#: Lookup VLR holds them; at most 15 characters each, letters, digits and spaces)
ASPRS_NAMES: dict[int, str] = {
    1: "Unclassified", 2: "Ground", 3: "Low Vegetation", 5: "High Vegetation", 6: "Building", 7: "Low Point",
    11: "Road Surface", 64: "Car", 65: "Bicycle", 66: "Bus", 67: "Motorcycle", 68: "On rails", 69: "Truck",
    70: "Other vehicle", 71: "Person", 72: "Bicyclist", 73: "Motorcyclist", 74: "Fence",
    75: "Other structure", 76: "Pole", 77: "Traffic sign", 78: "Other object",
}


def asprs_classes(semantic: Integer) -> U8:
    """ASPRS classification (:data:`ASPRS_OF_SEMANTIC_KITTI`) of SemanticKITTI class
    ids ``semantic`` (N,) uint16: (N,) uint8; an id the table does not hold (a custom
    class table) is 1, unclassified."""
    lut = np.ones(1 << 16, np.uint8)
    for k, v in ASPRS_OF_SEMANTIC_KITTI.items():
        lut[k] = v
    return lut[np.asarray(semantic, dtype=np.uint16)]


def moving_classes(semantic: Integer, moving: Bool) -> U16:
    """SemanticKITTI class ids (N,) uint16 with the points of moving objects (``moving``
    (N,) bool) in their moving-* class (:data:`MOVING_CLASS`); other ids unchanged."""
    lut = np.arange(1 << 16, dtype=np.uint16)
    for k, v in MOVING_CLASS.items():
        lut[k] = v
    sem = np.asarray(semantic, dtype=np.uint16)
    return np.where(np.asarray(moving, dtype=bool), lut[sem], sem).astype(np.uint16)


def is_thing(semantic: Integer) -> Bool:
    """(N,) bool: the class ids ``semantic`` (N,) are :data:`THING_CLASSES`."""
    return np.isin(np.asarray(semantic, dtype=np.uint16), np.fromiter(THING_CLASSES, np.uint16))


#: display colour (r, g, b) 0..255 of each SemanticKITTI class: the ``color_map`` of
#: SemanticKITTI's ``semantic-kitti.yaml`` (stored there as b, g, r), so BlenSor's pictures
#: (``--formats preview``) colour classes as the dataset's tools do; a class the table does
#: not hold is grey (:data:`OTHER_COLOR`)
CLASS_COLORS: dict[int, tuple[int, int, int]] = {k: (b[2], b[1], b[0]) for k, b in {
    0: (0, 0, 0), 1: (0, 0, 255), 10: (245, 150, 100), 11: (245, 230, 100), 13: (250, 80, 100),
    15: (150, 60, 30), 16: (255, 0, 0), 18: (180, 30, 80), 20: (255, 0, 0), 30: (30, 30, 255),
    31: (200, 40, 255), 32: (90, 30, 150), 40: (255, 0, 255), 44: (255, 150, 255), 48: (75, 0, 75),
    49: (75, 0, 175), 50: (0, 200, 255), 51: (50, 120, 255), 52: (0, 150, 255), 60: (170, 255, 150),
    70: (0, 175, 0), 71: (0, 60, 135), 72: (80, 240, 150), 80: (150, 240, 255), 81: (0, 0, 255),
    99: (255, 255, 50), 252: (245, 150, 100), 253: (200, 40, 255), 254: (30, 30, 255), 255: (90, 30, 150),
    256: (255, 0, 0), 257: (250, 80, 100), 258: (180, 30, 80), 259: (255, 0, 0)}.items()}
#: colour of a class id without an entry in :data:`CLASS_COLORS`
OTHER_COLOR = (128, 128, 128)
