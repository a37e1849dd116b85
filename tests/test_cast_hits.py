"""The scan context's hits (scene/context.py ``CastHits``): a chain of takes, as a sensor
makes one (its echoes, the returns kept, the detected, the returns mode), reads each field
from the cast once, at the rows it ends with, and gives the values of eager takes."""
from __future__ import annotations

import numpy as np
import pytest

from blensor_addon.scene.context import CastHits, _Labels

LAZY = CastHits.LAZY


class CountingSnap:
    """A step's snapshot for :class:`_Labels`: counts the rows it labels."""

    def __init__(self, objects: int, rng: np.random.Generator) -> None:
        self.instance_object_id = rng.integers(1, 9, objects).astype(np.uint32)
        self.instance_instancer_id = rng.integers(0, 3, objects).astype(np.uint32)
        self.instance_index = rng.integers(0, 100, objects).astype(np.uint32)
        self.rows_labelled = 0
        self.calls = 0

    def labels(self, instance, semantic):
        self.rows_labelled += int(np.asarray(instance).shape[0])
        self.calls += 1
        inst = np.asarray(instance)
        got = inst >= 0
        ids = []
        for a in (self.instance_object_id, self.instance_instancer_id, self.instance_index):
            v = np.zeros(inst.shape[0], np.uint32)
            v[got] = a[inst[got]]
            ids.append(v)
        cls = np.where(semantic[ids[0]] > 0, semantic[ids[0]], semantic[ids[1]]).astype(np.uint16)
        return ids[0], ids[1], ids[2], cls


def cast_part(m: int, snap: CountingSnap, rng: np.random.Generator) -> CastHits:
    """A step's hits of ``m`` rays as ``TimelineContext._cast_step`` makes them: the
    labels and colour from a source."""
    semantic = np.arange(10, dtype=np.uint16)
    color = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    instance = rng.integers(-1, len(snap.instance_index), m).astype(np.int32)
    material = rng.integers(0, 4, m).astype(np.int32)
    return CastHits(source=_Labels(snap, semantic, color, instance, material),
                    range=rng.random(m) * 100, hit=rng.random(m) < 0.9,
                    reflectivity=rng.random(m).astype(np.float32),
                    normal=rng.random((m, 3)).astype(np.float32),
                    last_dir=rng.random((m, 3)).astype(np.float32), time=rng.random(m),
                    segment=rng.integers(0, 3, m).astype(np.int32), ray=np.arange(m, dtype=np.int64),
                    weight=rng.random(m).astype(np.float32), bounces=rng.integers(0, 3, m).astype(np.uint8))


def eager(hits: CastHits) -> dict:
    """Every field of ``hits`` as plain arrays."""
    return {k: np.array(getattr(hits, k)) for k in CastHits.FIELDS}


def chain(hits: CastHits, rng: np.random.Generator):
    """A sensor's takes: echoes (rows repeated, out of order), their fields changed as
    ``core.sensors.sensor.echo_hits`` changes them, the returns kept (a mask), the
    detected (a mask), the returns mode (indices); with the same takes of plain arrays."""
    n = hits.range.shape[0]
    rows = np.sort(rng.integers(0, n, int(n * 0.9)))[::-1].copy()
    rows[5:9] = rows[5]
    ref = {k: v[rows] for k, v in eager(hits).items()}
    echo = hits.take(rows)
    echo.range = ref["range"] = ref["range"] * 0.5
    w = np.arange(0, rows.shape[0], 97)
    for k in ("object_id", "instance_id", "normal", "color"):
        getattr(echo, k)[w] = 0
        ref[k][w] = 0
    keep = echo.hit & (echo.range < 40.0)
    kept = echo.take(keep)
    ref = {k: v[keep] for k, v in ref.items()}
    seen = rng.random(kept.range.shape[0]) < 0.8
    detected = kept.take(seen)
    ref = {k: v[seen] for k, v in ref.items()}
    chosen = np.flatnonzero(rng.random(detected.range.shape[0]) < 0.7)
    ref = {k: v[chosen] for k, v in ref.items()}
    return detected.take(chosen), ref


@pytest.mark.parametrize("scattered", [False, True])
def test_a_chain_of_takes_gives_the_values_of_eager_takes(scattered):
    rng = np.random.default_rng(3)
    snap = CountingSnap(50, rng)
    if scattered:  # a sweep cast in three steps, the rows of each interleaved at the step ends
        n = 3000
        order = np.argsort(np.arange(n) + rng.integers(0, 40, n), kind="stable")
        rows = [np.sort(order[a:b]) for a, b in ((0, 1000), (1000, 2100), (2100, n))]
        hits = CastHits.scatter([cast_part(len(r), snap, rng) for r in rows], rows, n)
    else:
        hits = cast_part(3000, snap, rng)
    before = eager(hits)
    got, want = chain(hits, rng)
    for k in CastHits.FIELDS:
        v = getattr(got, k)
        assert v.dtype == want[k].dtype and np.array_equal(v, want[k]), k
    for k, v in eager(hits).items():  # the cast's own hits are unchanged by the changes to the echoes
        assert np.array_equal(v, before[k]), k


@pytest.mark.parametrize("scattered", [False, True])
def test_a_chain_of_takes_labels_only_the_rows_it_ends_with_once(scattered):
    # the labels (object, instancer and instance id, class, colour) of the returns a scan
    # keeps are made once, from their rows only: not for every echo first and copied on
    rng = np.random.default_rng(4)
    snap = CountingSnap(50, rng)
    n = 3000
    if scattered:
        rows = [np.arange(0, 1000), np.arange(1000, 2100), np.arange(2100, n)]
        hits = CastHits.scatter([cast_part(len(r), snap, rng) for r in rows], rows, n)
    else:
        hits = cast_part(n, snap, rng)
    first = hits.take(np.arange(0, n, 2))  # 1500 echoes
    kept = first.take(np.arange(first.range.shape[0]) < 600)
    final = kept.take(np.arange(0, 600, 3))  # 200 returns
    assert snap.rows_labelled == 0
    for k in LAZY:
        getattr(final, k)
    assert snap.rows_labelled == 200
    assert snap.calls == (3 if scattered else 1)  # once per step the rows come from


def test_a_chain_of_takes_copies_no_field_it_does_not_read():
    # the rows of a take are copied when a field is read, once: a field never read after
    # a chain of takes is never copied (here: the part's weight raises if it is indexed)
    class Untouchable(np.ndarray):
        def take(self, *a, **k):
            raise AssertionError("weight copied")

        def __getitem__(self, idx):
            raise AssertionError("weight copied")

    rng = np.random.default_rng(6)
    snap = CountingSnap(20, rng)
    part = cast_part(500, snap, rng)
    part.weight = np.asarray(part.weight).view(Untouchable)
    final = part.take(np.arange(0, 500, 2)).take(np.arange(250) < 100).take(np.arange(0, 100, 4))
    assert np.array_equal(final.range, part.range[np.arange(0, 500, 2)][:100][::4])


def test_a_scattered_field_is_held_once():
    # a field read in ray order (form_returns reads seven) is held by the hits alone: the
    # steps' parts drop their rows of it, and views still read it, from the hits
    rng = np.random.default_rng(8)
    snap = CountingSnap(20, rng)
    rows = [np.arange(0, 300), np.arange(300, 700)]
    parts = [cast_part(len(r), snap, rng) for r in rows]
    want = np.concatenate([p.normal for p in parts])
    hits = CastHits.scatter(parts, rows, 700)
    view = hits.take(np.arange(0, 700, 5))
    assert np.array_equal(hits.normal, want)
    held = hits._scatter.parts  # the scatter's own parts (the caller's stay as they were)
    assert all("normal" not in p.__dict__ for p in held) and all("normal" in p.__dict__ for p in parts)
    assert all("range" in p.__dict__ for p in held)  # not read: still the parts'
    assert np.array_equal(view.normal, want[::5]) and np.array_equal(view.object_id.shape, (140,))
