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


@pytest.mark.parametrize("kwargs,line", [
    ({"formats": "npz,xyzw"}, "formats must be a comma-separated subset of "),
    ({"overwrite": "yes"}, "overwrite must be True or False, got 'yes'"),
    ({"overwrite": True, "resume": True},
     "overwrite must be False with resume=True (overwrite deletes what resume keeps), got True"),
    ({"options": ["pcd.ascii"]}, "options must be a dict of format options"),
    ({"formats": ("pcd",), "options": {"pcd.ascii": True}, "pcd_ascii": True},
     "pcd_ascii must be not given with the option pcd.ascii (one or the other)"),
    ({"start_time": "yesterday"}, "start_time must be "),
])
def test_range_scan_spec_refuses_bad_input_in_one_line(bpy_mod, tmp_path, kwargs, line):
    """The spec's one validator names the setting in one line; nothing is written."""
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.range_scan import RangeScanSpec
    with pytest.raises(SettingsError) as err:
        RangeScanSpec(None, [1], tmp_path / "out", **kwargs)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_range_scan_spec_is_frozen_and_normalised(bpy_mod, tmp_path):
    from blensor_addon.jobs.range_scan import RangeScanJob, RangeScanSpec
    spec = RangeScanSpec("cam", [1, 2], tmp_path, formats="npz, PCD", pcd_ascii=True,
                         options={"pcap.start_time": 1e9 + 0.5}, overrides={"max_range": 50.0})
    assert spec.formats == ("npz", "pcd") and spec.options == {"pcd.ascii": True}
    assert spec.start_ns == 1_000_000_000_500_000_000 and spec.format_options["pcd"].ascii is True
    assert spec.scanner_options() == {"backend": "auto", "seed": None, "frame_of_reference": "sensor",
                                      "overrides": {"max_range": 50.0}, "axes": "ros"}
    for name, value in (("formats", ("npz",)), ("resume", True), ("start_ns", 0)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, name, value)
    again = dataclasses.replace(spec, out_dir=tmp_path / "other")  # the checks give the same spec
    assert (again.formats, again.options, again.start_ns) == (spec.formats, spec.options, spec.start_ns)
    assert again.format_options == spec.format_options and again.out_dir == tmp_path / "other"
    with pytest.raises(TypeError, match="RangeScanJob takes a RangeScanSpec"):
        RangeScanJob("cam")  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # everything after the folder is a keyword
        RangeScanSpec("cam", [1], tmp_path, ("npz",))  # type: ignore[misc]


def test_rig_and_range_job_share_one_progress_and_the_spec(bpy_mod, crossing, tmp_path):
    """A rig's progress is the range job's own (one definition over the pipelines), and
    each member is a RangeScanJob of a RangeScanSpec made from the rig's arguments."""
    import bpy

    from blensor_addon.jobs.range_scan import RangeScanJob, RangeScanSpec, SteppedJob
    from blensor_addon.jobs.rig_scan import RigJob, scan_rig
    for name in ("out", "done", "points", "reused", "remaining", "scanned", "total"):
        assert getattr(RigJob, name) is getattr(RangeScanJob, name) is getattr(SteppedJob, name), name
    from conftest import add_camera
    side = add_camera(bpy, "Side", location=(0.0, 0.0, 2.0))
    cams = [bpy.data.objects["Velodyne"], side]
    cams[0].data.blensor.end_angle = 20.0
    job = scan_rig(cams, range(1, 2), tmp_path, ("npz",), seed=5, overrides={"Side": {"end_angle": 30.0}})
    assert all(isinstance(m.spec, RangeScanSpec) and m.member is not None for m in job.members)
    assert [m.spec.seed for m in job.members] == [5, 5]
    assert dict(job.members[1].spec.overrides) == {"end_angle": 30.0}
    assert job.total == sum(len(m.plan) for m in job.members) == job.scanned == len(job.done)
    assert job.points == sum(m.points for m in job.members) > 0 and job.remaining == 0


def test_the_range_operator_runs_the_range_jobs_loop(bpy_mod, crossing, tmp_path, monkeypatch):
    """The panel's synchronous range scan is run by run_job (the CLI's and the API's loop),
    not a loop of its own."""
    import bpy

    from blensor_addon.jobs import range_scan
    runs = []
    loop = range_scan.run_job

    def spy(make, progress=None, should_cancel=None):
        runs.append(loop(make, progress, should_cancel))
        return runs[-1]
    monkeypatch.setattr(range_scan, "run_job", spy)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 3, 4
    s = bpy.data.objects["Velodyne"].data.blensor
    s.output_dir, s.formats = str(tmp_path), {"npz"}
    assert bpy.ops.blensor.scan_range("INVOKE_DEFAULT") == {"FINISHED"}
    assert len(runs) == 1 and isinstance(runs[0], range_scan.RangeScanJob)
    assert runs[0].status == "complete" and runs[0].scanned == runs[0].total == len(runs[0].done) == 2
    assert runs[0].out == tmp_path / "scan"


#: the scan job's seams: each reads what its collaborators declare, never an attribute
#: that may be missing with a default standing in for it
SEAM_FILES = ("scene/context.py", "scene/scanner.py", "jobs/pipeline.py", "jobs/range_scan.py",
              "jobs/rig_scan.py")


def test_the_scan_seams_read_no_attribute_with_a_default():
    import re
    from pathlib import Path

    import blensor_addon
    root = Path(blensor_addon.__file__).parent
    pattern = re.compile(r'getattr\([^,]+, *"[a-z_]+", ')
    found = [f"{name}:{i}: {line.strip()}" for name in SEAM_FILES
             for i, line in enumerate((root / name).read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_a_camera_without_the_add_ons_properties_scans_with_the_defaults(bpy_mod, empty_scene):
    """Where the add-on's properties are not registered the camera's sensor is the default
    type with its default settings; registered, the stored type is read."""
    import blensor_addon
    from blensor_addon.core.sensors import DEFAULT_TYPE, make_settings
    from blensor_addon.scene.scanner import read_sensor, sensor_props
    from conftest import add_camera
    cam = add_camera(bpy_mod)
    cam.data.blensor.sensor_type = "tof"
    assert sensor_props(cam) is not None and read_sensor(cam)[0].name == "tof"
    blensor_addon.unregister()
    try:
        assert sensor_props(cam) is None
        sensor, settings = read_sensor(cam)
        assert sensor.name == DEFAULT_TYPE and settings == make_settings(DEFAULT_TYPE, {}, {})[1]
    finally:
        blensor_addon.register()


#: members the typed seams declare (the sensors' Hits and EchoHits, Device, the material
#: table's cache, the ray caster's Backend, the pcap packet encoders, Writer, LaserTable,
#: rosbags' writer, the camera's ``blensor`` group and its sensor type, the motion
#: command's parsed options): read directly, never through ``getattr`` with a default
DECLARED = ("returned", "energy", "normal", "last_dir", "vendor", "_has_mirror", "dual", "profile",
            "flag_bit", "install", "extra", "storage", "blensor", "sensor_type", "formats_option", "bundles")


def test_declared_members_are_not_read_through_getattr_with_a_default():
    """core/, raycast/, io/, jobs/ and the CLI read the members their types declare
    (:data:`DECLARED`) directly: a ``getattr(x, "name", default)`` of one would hide a
    missing member."""
    import re
    from pathlib import Path

    import blensor_addon
    root = Path(blensor_addon.__file__).parent
    pattern = re.compile(r'getattr\([^,]+, *"(' + "|".join(DECLARED) + r')", ')
    files = [p for d in ("core", "raycast", "io", "jobs") for p in sorted((root / d).rglob("*.py"))]
    files.append(root / "cli.py")
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_the_typed_seams_declare_their_optional_members():
    """Hits' optional fields default to None on the protocols and on the scene's hits; a
    writer's ``flag_bit`` and ``install`` and an encoder's ``dual`` are declared."""
    from pcap_synth import ouster_device, velodyne_device

    from blensor_addon.core.sensors.protocols import EchoHits, Hits
    from blensor_addon.io.formats import Writer
    from blensor_addon.io.formats.pcap import PacketEncoder
    from blensor_addon.io.packets import ouster, velodyne
    from blensor_addon.scene.context import CastHits
    for name in ("returned", "energy", "last_dir"):
        assert name in Hits.__annotations__ and getattr(Hits, name) is None
    assert [getattr(CastHits, n, "undeclared") for n in ("returned", "energy")] == [None, None]
    assert "last_dir" in CastHits.FIELDS  # every cast's hits keep it
    assert EchoHits.__annotations__.keys() >= {"returned", "energy"}
    assert Writer.flag_bit is None and Writer.install == ""
    assert "dual" in PacketEncoder.__annotations__
    assert [ouster.OusterEncoder(ouster_device(), 0, p).dual for p in ouster.PROFILES] == [False, False, True]
    dev = velodyne_device("VLP-16")
    modes = (velodyne.RETURN_STRONGEST, velodyne.RETURN_DUAL)
    assert [velodyne.VelodyneEncoder(dev, 0, m).dual for m in modes] == [False, True]
