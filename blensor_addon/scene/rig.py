"""The scene sampled once for every sensor of a rig (docs/architecture.md, "Rigs").

A rig's scanners (:class:`~.scanner.Scanner`, one per camera) keep their own timelines,
but every sample of the scene goes through one :class:`RigSampler`: Blender evaluates the
scene at a time (``frame_set``) once, and one walk over the evaluated scene
(:meth:`~.extract.SceneExtractor.extract_many`) gives every camera its snapshot, each
relative to its own sensor position, so each sensor's files are byte for byte those of a
run of that camera alone.
"""
from __future__ import annotations

import collections

import bpy

from .extract import SceneExtractor
from .visibility import apply_render_visibility


class RigSampler:
    """Samples of the scene for several cameras at once.

    Args:
        scene: the scene. cameras: the rig's camera objects. render: scan the render
            visibility (the sensors' ``visibility = render``; the rig refuses sensors that
            disagree) or the viewport's.
        keep: samples (each one snapshot per camera) kept for the scanners that ask for a
            time again (sensors of different rates interleave their packets).
    Attributes:
        evaluations: scene evaluations made (``frame_set`` + one walk); extractor: the
        :class:`SceneExtractor` shared by the rig's scanners.
    """

    def __init__(self, scene, cameras, render: bool = True, keep: int = 12) -> None:
        self.scene = scene
        self.cameras = list(cameras)
        self.render = bool(render)
        self.keep = int(keep)
        self.extractor = SceneExtractor()
        self.evaluations = 0
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._visibility = None

    def sample(self, camera, frame: int, subframe: float):
        """The snapshot of ``camera`` with the scene at ``frame + subframe``; the scene is
        evaluated and walked once per distinct time for every camera of the rig."""
        key = (int(frame), float(subframe))
        snaps = self._cache.get(key)
        if snaps is None:
            if self.render and self._visibility is None:
                self._visibility = apply_render_visibility(self.scene, bpy.context.view_layer)
            sc = self.scene
            if sc.frame_current != frame or subframe or sc.frame_subframe:
                sc.frame_set(int(frame), subframe=float(subframe))
            got = self.extractor.extract_many(
                bpy.context.evaluated_depsgraph_get(), self.cameras, self.render
            )
            snaps = {cam.name: snap for cam, snap in zip(self.cameras, got)}
            self.evaluations += 1
            self._cache[key] = snaps
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return snaps[camera.name]

    def close(self) -> None:
        """Undo the render-visibility switches and drop the samples (idempotent)."""
        self._cache.clear()
        if self._visibility is not None:
            self._visibility.restore()
            self._visibility = None


__all__ = ["RigSampler"]
