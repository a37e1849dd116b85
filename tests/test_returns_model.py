"""The return physics' data model without Blender (``core/sensors/returns.py``): the rules
between return settings and their one-line refusals, the :class:`Returns` rows (``take``,
``concat``), the capabilities the settings give writers, and the per-stage random streams,
whose values every noisy output depends on."""
from __future__ import annotations

import numpy as np
import pytest

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors.returns import (STAGE_BEAM, STAGE_CAST, STAGE_WEATHER, Returns,
                                                ReturnSettings, return_capabilities, stage_rng)
from blensor_addon.core.settings import SensorSettings


def rows(k: int, base: float, *, noise: bool = False, transmission: bool = False) -> Returns:
    """``k`` returns whose every column holds distinct values (``base`` + row)."""
    i = np.arange(k)
    return Returns(beam=i + int(base), row=i * 2 + int(base), range=base + i + 0.5,
                   reflectivity=(base + i).astype(np.float32), returned=base + i + 0.25,
                   energy=base + i + 0.125, return_number=(i + 1).astype(np.uint8),
                   number_of_returns=np.full(k, k, np.uint8), weather=i % 2 == 1,
                   range_noise=base + i + 0.0625 if noise else None,
                   transmission=base + i + 0.03125 if transmission else None)


@pytest.mark.parametrize("kw,message", [
    ({"samples_per_beam": 2},
     "samples_per_beam must be 1 while beam_divergence is 0 (nothing to sample), got 2"),
    ({"returns": "dual", "divergence_algorithm": "first"},
     "returns must be one of strongest, last, first while divergence_algorithm is first (one return per "
     "beam; echoes gives several), got 'dual'"),
    ({"returns": "all", "divergence_algorithm": "average"},
     "returns must be one of strongest, last, first while divergence_algorithm is average (one return per "
     "beam; echoes gives several), got 'all'"),
])
def test_return_settings_refuse_contradictions_in_one_line(kw, message):
    with pytest.raises(SettingsError) as e:
        ReturnSettings(**kw).validate()
    assert str(e.value) == message


@pytest.mark.parametrize("kw", [
    {"samples_per_beam": 2, "beam_divergence": 0.001},
    {"samples_per_beam": 2, "beam_divergence_vertical": 0.001},
    {"samples_per_beam": 1},
    {"returns": "dual"},
    {"returns": "strongest", "divergence_algorithm": "random"},
    {"returns": "last", "divergence_algorithm": "first"},
])
def test_return_settings_accept_what_they_can_sample(kw):
    s = ReturnSettings(**kw)
    assert s.validate() is s


def test_return_capabilities_are_the_three_return_settings_and_nothing_for_other_sensors():
    s = ReturnSettings(returns="last", divergence_algorithm="first", intensity_model="radar")
    assert return_capabilities(s) == {"returns": "last", "divergence_algorithm": "first",
                                      "intensity_model": "radar"}
    assert return_capabilities(SensorSettings()) == {}


def test_take_keeps_the_rows_asked_for_in_order_with_their_optional_columns():
    r = rows(4, 10.0, noise=True)
    t = r.take(np.array([3, 1]))
    assert len(t) == 2 and len(r) == 4
    assert t.beam.tolist() == [13, 11] and t.row.tolist() == [16, 12]
    assert t.range.tolist() == [13.5, 11.5] and t.reflectivity.tolist() == [13.0, 11.0]
    assert t.returned.tolist() == [13.25, 11.25] and t.energy.tolist() == [13.125, 11.125]
    assert t.return_number.tolist() == [4, 2] and t.number_of_returns.tolist() == [4, 4]
    assert t.weather.tolist() == [True, True]
    assert t.range_noise.tolist() == [13.0625, 11.0625] and t.transmission is None
    m = r.take(np.array([True, False, False, True]))
    assert m.beam.tolist() == [10, 13] and m.range_noise.tolist() == [10.0625, 13.0625]


def test_concat_shifts_beams_and_rows_and_fills_missing_optional_columns():
    a, b = rows(2, 0.0, noise=True), rows(3, 100.0, transmission=True)
    c = Returns.concat([a, b], beam_offsets=[5, 7], row_offsets=[50, 70])
    assert len(c) == 5
    assert c.beam.tolist() == [5, 6, 107, 108, 109]
    assert c.row.tolist() == [50, 52, 170, 172, 174]
    assert c.range.tolist() == [0.5, 1.5, 100.5, 101.5, 102.5]
    assert c.returned.tolist() == [0.25, 1.25, 100.25, 101.25, 102.25]
    assert c.energy.tolist() == [0.125, 1.125, 100.125, 101.125, 102.125]
    assert c.reflectivity.dtype == np.float32 and c.return_number.dtype == np.uint8
    assert c.number_of_returns.tolist() == [2, 2, 3, 3, 3]
    assert c.weather.tolist() == [False, True, False, True, False]
    # a part without range noise adds none (0 m); a part without transmission is clear air (1)
    assert c.range_noise.dtype == np.float64 and c.range_noise.tolist() == [0.0625, 1.0625, 0.0, 0.0, 0.0]
    assert c.transmission.dtype == np.float64
    assert c.transmission.tolist() == [1.0, 1.0, 100.03125, 101.03125, 102.03125]
    plain = Returns.concat([rows(1, 0.0), rows(1, 1.0)], [0, 1], [0, 1])
    assert plain.range_noise is None and plain.transmission is None
    assert plain.beam.tolist() == [0, 2] and plain.row.tolist() == [0, 2]


def test_stage_streams_are_fixed_by_seed_frame_chunk_and_stage():
    # the draws every noisy output holds: a change here changes the bytes of every weather,
    # alpha and random-divergence scan
    def draw(*key):
        return stage_rng(*key).integers(0, 2**32, 3).tolist()
    assert (STAGE_CAST, STAGE_BEAM, STAGE_WEATHER) == (1, 2, 3)
    assert draw(7, 3, 2, STAGE_BEAM) == [3149504819, 2328066007, 2290471028]
    # frames beyond 32 bits keep their high word (the stream of frame 3 is not frame 2**32 * 5 + 3's)
    assert draw(7, (5 << 32) + 3, 2, STAGE_BEAM) == [1598637916, 3980795880, 1307623993]
    keys = [(7, 3, 2, 2), (8, 3, 2, 2), (7, 4, 2, 2), (7, 3, 3, 2), (7, 3, 2, 3), (7, 3 + (1 << 32), 2, 2)]
    streams = {tuple(draw(*k)) for k in keys}
    assert len(streams) == len(keys)
    assert draw(np.int64(7), np.int32(3), 2, 2) == draw(7, 3, 2, 2)
