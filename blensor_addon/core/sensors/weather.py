"""Weather between the sensor and the scene (issue 22, section 4): fog (Hahner et al.,
ICCV 2021) and rain.

CONTRACT STUB: clear air (returns unchanged).
"""
from __future__ import annotations

import numpy as np

from .returns import Returns

#: semantic class id of a return from the atmosphere (SemanticKITTI ``outlier``)
WEATHER_SEMANTIC = 1


def apply(s, ret: Returns, sub, rng: np.random.Generator) -> Returns:
    """The returns ``ret`` of a chunk of beams through the atmosphere of settings ``s``
    (``weather``, ``fog_visibility``, ``rain_rate``): attenuated (``transmission``,
    ``returned`` and ``energy`` scaled by it), given range noise (``range_noise``), and
    with the atmosphere's own returns added (``weather`` True; ``row``: the first cast row
    of their beam, ``sub`` the chunk's :class:`~.beam.SubRays`). Rows stay in beam
    order, nearest first within a beam; ``return_number`` and ``number_of_returns``
    renumbered when rows are added or dropped. Stub: ``weather = none``."""
    return ret
