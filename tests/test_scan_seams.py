"""The scan job's typed seams: the cast's options as one frozen value handed to every
step's cast (scene/context.py), the protocols through which the range pipeline reads a
scanner and a result (jobs/pipeline.py), the one validated range-scan spec
(jobs/range_scan.py) and the progress and loop the rig and the panel's operator share
with the range job."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

OPTION_ATTRIBUTES = ("_split", "_rng", "_wavelength", "_bundle", "_acceptance")


def test_cast_options_frozen_and_normalised():
    from blensor_addon.raycast.trace import SPECULAR_ACCEPTANCE
    from blensor_addon.scene.context import CastOptions
    opts = CastOptions.of(split=1, rng=None, wavelength=905.0, bundle=0, acceptance=None)
    assert opts == CastOptions(split=True, rng=None, wavelength=905.0, bundle=1,
                               acceptance=SPECULAR_ACCEPTANCE)
    assert CastOptions.of(bundle=np.int64(7), acceptance=1).bundle == 7
    assert type(CastOptions.of(acceptance=1).acceptance) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.bundle = 3  # type: ignore[misc]


def test_cast_gets_its_options_only_through_cast_options(crossing, monkeypatch):
    """Every step's cast receives the one CastOptions of its cast (split paths, the
    sub-rays' bundle, the wavelength), and the context keeps no option attributes."""
    import bpy

    import blensor_addon
    from blensor_addon.scene.context import CastOptions, TimelineContext
    seen = []
    step = TimelineContext._cast_step

    def spy(self, st, idx, origins, d_s, t, max_range, max_bounces, opts):
        seen.append((self, opts))
        return step(self, st, idx, origins, d_s, t, max_range, max_bounces, opts)
    monkeypatch.setattr(TimelineContext, "_cast_step", spy)
    cam = bpy.data.objects["Velodyne"]
    cam.data.blensor.end_angle = 20.0
    result = blensor_addon.scan(cam, frame=12, samples_per_beam=7, beam_divergence=0.002, returns="dual")
    assert len(result) > 1000 and seen
    assert all(isinstance(o, CastOptions) for _, o in seen)
    assert {o.bundle for _, o in seen} == {7} and all(o.split for _, o in seen)
    assert {o.wavelength for _, o in seen} == {float(result.sensor["wavelength"])}
    for ctx, _ in seen:
        assert not [a for a in OPTION_ATTRIBUTES if a in vars(ctx)]
