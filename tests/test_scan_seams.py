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


class _Recording:
    """A per-frame writer that records what it is handed (frame_files, append)."""

    def __init__(self, name):
        from blensor_addon.io.formats import Writer

        class W(Writer):
            calls: list = []

            def frame_files(self, result):
                W.calls.append(("frame_files", result))
                return [(f"{name}{result.frame:05d}.bin", b"whole %d" % result.frame)]

            def append(self, result):
                W.calls.append(("append", result))
        W.name = name
        self.cls = W


def _pipeline(tmp_path, scanner, writers, n=3):
    from blensor_addon.core.packets import Packet
    from blensor_addon.io.formats import output_patterns
    from blensor_addon.io.outdir import OutputFolder, range_run_files
    from blensor_addon.jobs.pipeline import Pipeline
    from blensor_addon.jobs.plan import Plan
    from blensor_addon.jobs.run_files import ManifestWriter, TrajectoryWriter
    folder = OutputFolder(tmp_path / "out", manifest="manifest.json", patterns=output_patterns(),
                          listed=range_run_files)
    folder.open()
    folder.check(overwrite=False, resume=False)
    folder.prepare()
    plan = Plan("frame", tuple(Packet("frame", k) for k in range(n)), 0.1, 0.1, [0, n - 1])
    manifest = ManifestWriter(folder, {"formats": [w.name for w in writers]}, lambda: [])
    return Pipeline(scanner, plan, folder, writers, TrajectoryWriter(folder.path, 0.1), manifest, {},
                    lambda: [])


def test_pipeline_reads_scanner_and_result_through_their_protocols(tmp_path):
    """The pipeline takes a scanner's declared ``lookahead`` (the packets ahead are handed
    to ``expect``), a WholeResult's ``whole`` ScanResult for the writers that encode here
    (the very object, appended too) and its ``encoded`` files with their ``file_checks``
    (that writer is not called); a worker's PacketSummary (``whole`` None) is written from
    its encoded files alone."""
    from blensor_addon.core.packets import PacketRecord
    from blensor_addon.core.result import ScanResult
    from blensor_addon.jobs.cluster import PacketSummary, Scanned
    from blensor_addon.jobs.pipeline import PacketResult, PacketScanner, WholeResult
    from blensor_addon.io.outdir import file_record
    here, there = _Recording("here"), _Recording("there")
    pre = {"there": [("there00000.bin", b"encoded 0")]}
    checks = {"there00000.bin": {"size": 9, "sha256": "0" * 64}}  # taken as given, not recomputed
    made = {}

    class Fake:
        lookahead = 2

        def __init__(self):
            self.expected = []

        def expect(self, packets):
            self.expected.append([p.index for p in packets])

        def scan(self, packet) -> tuple[PacketResult, PacketRecord]:
            record = PacketRecord(packet, 0.1 * packet.index, np.eye(4))
            if packet.index == 0:
                made[0] = ScanResult.empty(frame=0, num_rays=5)
                return WholeResult(made[0], pre, checks), record
            files = {"here": [(f"here{packet.index:05d}.bin", b"h")],
                     "there": [(f"there{packet.index:05d}.bin", b"t")]}
            checked = {n: file_record(d) for v in files.values() for n, d in v}
            return PacketSummary(Scanned(record=record, frame=packet.index, points=0, rays=7,
                                         sensor_to_world=np.eye(4), files=files, checks=checked)), record

        def packet_hash(self, packet):
            return None

    fake: PacketScanner = Fake()
    writers = [here.cls(tmp_path), there.cls(tmp_path)]
    pipe = _pipeline(tmp_path, fake, writers, n=3)
    for _ in range(3):
        pipe.step()
    pipe.finish("complete")
    assert fake.expected[0] == [0, 1]
    assert [c for c, _ in here.cls.calls] == ["frame_files", "append"]
    assert all(r is made[0] for _, r in here.cls.calls)
    assert [c for c, _ in there.cls.calls] == ["append"]  # its files came encoded
    out = tmp_path / "out"
    assert (out / "there00000.bin").read_bytes() == b"encoded 0"
    assert (out / "here00000.bin").read_bytes() == b"whole 0"
    assert (out / "here00002.bin").read_bytes() == b"h" and (out / "there00002.bin").read_bytes() == b"t"
    import json
    man = json.loads((out / "manifest.json").read_text())
    assert man["frames"][0]["file_checks"]["there00000.bin"] == checks["there00000.bin"]
    assert [e["rays"] for e in man["frames"]] == [5, 7, 7]
