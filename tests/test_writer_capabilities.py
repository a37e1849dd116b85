"""Writers and packet encoders read what they need of the sensor from the result's
capabilities (``core/capabilities.py``), never from its settings dict.

The settings dict (``ScanResult.sensor``, ``RunInfo.sensor``) is the run's record: npz
stores it whole as its ``sensor`` member; nothing else of ``io/`` looks a setting up in
it. The runtime check: every writer of the package writes real scans (a Velodyne in dual
and in last return mode with the radar intensity model, an Ouster in dual return mode
with its dual packet profile, a default HDL-64E, a ToF camera, a one-plane laser
scanner) once with the settings dict and once with a guard in its place that records
and refuses every look-up; the files must be the same bytes and the guard untouched.
"""
from __future__ import annotations

import dataclasses

import pytest

import blensor_addon
from blensor_addon.core.capabilities import Capabilities, Timing
from blensor_addon.core.errors import SettingsError
from blensor_addon.io.formats import WRITERS, make_options
from blensor_addon.io.formats._base import RunInfo
from blensor_addon.jobs.plan import check_writers
from conftest import CROSSING

#: scans that together exercise every writer of the package and every branch that once
#: read the settings (Velodyne return-mode byte and dual stamp, the strongest return by
#: received power under the intensity model, Ouster's second-strongest return);
#: name -> (camera settings, writer options)
CASES = {
    "velodyne_dual": (dict(preset="vlp16", returns="dual", beam_divergence=0.003, samples_per_beam=7,
                           intensity_model="radar"), {}),
    "velodyne_last": (dict(preset="vlp16", returns="last", beam_divergence=0.003, samples_per_beam=7), {}),
    "ouster_dual": (dict(preset="os1_64", returns="dual_ouster", beam_divergence=0.003, samples_per_beam=7),
                    {"pcap.ouster_profile": "RNG19_RFL8_SIG16_NIR16_DUAL"}),
    "hdl64e": ({}, {}),
    "tof": (dict(sensor_type="tof"), {}),
    "planar": (dict(sensor_type="planar", preset="utm30lx"), {}),
}


class SettingsGuard(dict):
    """A settings record that writers may copy whole (``items()``, what ``json.dumps``
    calls: npz's ``sensor`` member) and may not look a setting up in: every look-up by
    name, membership test, key listing or truth test is recorded in :attr:`reads` and
    refused with ``AssertionError`` (not ``KeyError`` or ``AttributeError``, which
    ``.get`` defaults and ``getattr`` defaults would swallow)."""

    def __init__(self, values: dict) -> None:
        super().__init__(values)
        self.reads: list[str] = []
        self.copies = 0

    def _refuse(self, what: str):
        self.reads.append(what)
        raise AssertionError(f"a writer read the settings dict: {what}")

    def __getitem__(self, key):
        self._refuse(f"[{key!r}]")

    def get(self, key, default=None):
        self._refuse(f".get({key!r})")

    def __contains__(self, key):
        self._refuse(f"{key!r} in")

    def keys(self):
        self._refuse(".keys()")

    def values(self):
        self._refuse(".values()")

    def __iter__(self):
        self._refuse("iter()")

    def __len__(self):
        self._refuse("len() or truth")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._refuse(f"getattr(settings, {name!r})")

    def items(self):
        self.copies += 1
        return super().items()


@pytest.fixture(scope="module")
def scans(bpy_mod):
    """name -> (a real single scan of the demo's camera with CASES' settings, options)."""
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))
    cam = bpy_mod.data.objects["Velodyne"]
    return {k: (blensor_addon.scan(cam, frame=1, seed=3, **kw), opts) for k, (kw, opts) in CASES.items()}


def write_all(name: str, result, options: dict, folder, sensor) -> dict[str, bytes]:
    """Every file writer ``name`` leaves in ``folder`` for the one-frame run of ``result``
    whose settings record (the result's and the run's) is ``sensor``: relative path ->
    bytes."""
    folder.mkdir(parents=True)
    r = dataclasses.replace(result, sensor=sensor)
    run = RunInfo(camera="Velodyne", sensor_type=r.sensor_type, sensor=sensor, seed=3,
                  frame_time=r.frame_time, frames=[r.frame])
    opts = make_options((name,), {k: v for k, v in options.items() if k.startswith(name + ".")})[name]
    w = WRITERS[name](folder, opts, run)
    for rel, data in w.frame_files(r):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    w.append(r)
    w.close("complete")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def test_no_writer_or_encoder_reads_the_settings_dict(scans, tmp_path):
    served = set()
    copied = set()
    for case, (result, options) in scans.items():
        assert len(result) > 100, case
        for name, writer in WRITERS.items():
            try:
                check_writers(result.capabilities, {name: writer.needs}, result.sensor_type)
            except SettingsError:
                continue  # a format this sensor cannot serve (the plan refuses it)
            served.add(name)
            want = write_all(name, result, options, tmp_path / case / name / "dict", dict(result.sensor))
            guard = SettingsGuard(result.sensor)
            got = write_all(name, result, options, tmp_path / case / name / "guard", guard)
            assert guard.reads == [], (case, name)
            assert want and got == want, (case, name)
            if guard.copies:
                copied.add(name)
    # every writer of the package ran on a scan it serves; only npz copies the record
    assert {n for n, w in WRITERS.items() if w.__module__.startswith("blensor_addon.")} <= served
    assert copied == {"npz"}


def test_the_capabilities_carry_the_return_settings_writers_read(scans):
    names = ("returns", "divergence_algorithm", "intensity_model")
    want = {"velodyne_dual": ("dual", "echoes", "radar"), "velodyne_last": ("last", "echoes", "lambert"),
            "ouster_dual": ("dual_ouster", "echoes", "lambert"), "hdl64e": ("strongest", "echoes", "lambert")}
    for case, (result, _) in scans.items():
        got = tuple(getattr(result.capabilities, k) for k in names)
        assert got == want.get(case, got), case
        if "returns" in result.sensor:  # a sensor with the return physics: its settings
            assert got == tuple(result.sensor[k] for k in names), case
        else:  # one without (the ToF camera): one strongest return a ray, Lambertian
            assert got == ("strongest", "echoes", "lambert"), case
    assert "returns" not in scans["tof"][0].sensor
    # a result assembled without a sensor reads the same defaults
    bare = Capabilities(Timing("exposure"))
    assert tuple(getattr(bare, k) for k in names) == ("strongest", "echoes", "lambert")


def test_the_packet_return_mode_follows_the_capabilities_not_the_settings(scans):
    from blensor_addon.io.packets import velodyne as vpk
    dual, _ = scans["velodyne_dual"]
    last, _ = scans["velodyne_last"]
    assert vpk.return_mode(dual) == vpk.RETURN_DUAL and vpk.is_dual(dual)
    assert vpk.return_mode(last) == vpk.RETURN_LAST and not vpk.is_dual(last)
    # the settings record says nothing: the capabilities decide
    for r, byte in ((dual, vpk.RETURN_DUAL), (last, vpk.RETURN_LAST)):
        assert vpk.return_mode(dataclasses.replace(r, sensor={})) == byte
    # last return with a divergence algorithm of one return a beam: the strongest byte
    avg = dataclasses.replace(last, capabilities=dataclasses.replace(last.capabilities,
                                                                     divergence_algorithm="average"))
    assert vpk.return_mode(avg) == vpk.RETURN_STRONGEST


def test_every_sensor_with_the_return_physics_declares_its_return_settings():
    from blensor_addon.core.sensors import SENSORS, make_settings
    from blensor_addon.core.sensors.returns import ReturnSettings
    names = ("returns", "divergence_algorithm", "intensity_model")
    declared = set()
    for name, sensor in SENSORS.items():
        s = make_settings(name, None, {})[1]
        if isinstance(s, ReturnSettings):
            s = dataclasses.replace(s, returns="last", intensity_model="radar")
        try:
            caps = sensor.capabilities(s)
        except SettingsError:
            continue  # needs what a scan gives (a Blender camera's intrinsics, a pattern file)
        got = tuple(getattr(caps, k) for k in names)
        if isinstance(s, ReturnSettings):
            declared.add(name)
            assert got == ("last", "echoes", "radar"), name
        else:
            assert got == ("strongest", "echoes", "lambert"), name
    assert "rosette" in declared  # the sensor that builds its capabilities itself
