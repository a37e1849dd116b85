"""core/: scan pattern, timing, noise, reflectivity limit, settings validation (no bpy)."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors.physics import frame_rng, reflectivity_limit
from blensor_addon.core.sensors.rotating_presets import HDL64E_S2_BIAS_M, preset_table
from blensor_addon.core.sensors.rotating import (LidarSettings,
                                                 make_pattern, noisy_range, range_scan_columns, scan_columns)
from blensor_addon.core.settings import meta_of


def single_scan_pattern(s, frame, frame_time):
    """Every ray of a single scan at scene frame ``frame``."""
    return make_pattern(s, *scan_columns(s, frame, frame_time, "single"))


def range_frame_pattern(s, frame, frame_time):
    """Every ray of frame ``frame`` of a range scan."""
    return make_pattern(s, *scan_columns(s, frame, frame_time, "range"))


def parse_elevations(text):
    """The ``elevations`` setting typed as text (the panel's and ``--set``'s parser)."""
    return meta_of(LidarSettings, "elevations").parse("elevations", text)


def test_core_never_imports_bpy():
    code = ("import sys; import blensor_addon.core.sensors, blensor_addon.process.alloc, "
            "blensor_addon.process.blas, "
            "blensor_addon.raycast.trace, blensor_addon.raycast.native; "
            "bad = [m for m in ('bpy', 'mathutils') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_hdl64e_full_turn_matches_original_ray_count():
    s = LidarSettings()
    p = single_scan_pattern(s, frame=0, frame_time=1 / 24)
    assert len(p) == 133312  # 2083 columns x 64 lasers (reference 6.1)
    assert p.directions.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(p.directions, axis=1), 1.0, atol=1e-6)
    # azimuth 0 looks down -Z; +90 deg turns toward -X (reference section 2); laser k fires
    # along psi - a_k (issue 21: the unit's azimuth corrections, -9.6..+8.8 deg)
    a = np.deg2rad(preset_table("hdl64e_s2").azimuth_deg)
    first = p.directions[:64].astype(np.float64)
    assert np.all(first[:, 2] < 0)
    np.testing.assert_allclose(first[:, 0] / np.hypot(first[:, 0], first[:, 2]), np.sin(a), atol=1e-6)
    assert np.ptp(a) > np.deg2rad(17.0)
    col = int(round(90 / 0.1728))
    q = single_scan_pattern(s.replace(start_angle=90.0, end_angle=91.0), 0, 1 / 24)
    assert np.all(q.directions[:64, 0] < -0.9)
    # issue 21, section 1: the preset's elevations are a real unit's (64e_s2.1-sztaki.yaml)
    np.testing.assert_allclose(np.rad2deg(p.elevation[:64]), preset_table("hdl64e_s2").elevation_deg,
                               atol=1e-5)
    # timestamps: psi / (360 rps) within the turn, same for every laser of a column
    assert p.timestamp[64 * col] == pytest.approx(col * 0.1728 / 3600.0)
    assert np.all(p.timestamp[64 * col: 64 * col + 64] == p.timestamp[64 * col])


def test_range_frames_tile_the_rotation():
    s = LidarSettings()
    ft = 1 / 24
    cols = [range_scan_columns(s, f, ft) for f in range(0, 30)]
    allc = np.concatenate(cols)
    assert np.array_equal(allc, np.arange(allc[0], allc[-1] + 1))  # no gap, no overlap
    # 150 deg per frame at 10 Hz and 24 fps (reference 9)
    assert abs(len(cols[3]) * s.angle_resolution - 150.0) <= s.angle_resolution
    p = range_frame_pattern(s, 5, ft)
    assert p.timestamp.min() >= 5 * ft - 1e-12 and p.timestamp.max() < 6 * ft
    # a sector restricts the columns of every frame: [start, end) counter-clockwise, and
    # (start, end] clockwise (issue 21: the head enters the sector at its end)
    # (the column azimuths psi: each laser's own is psi - a_k, the unit's azimuth correction)
    s2 = s.replace(start_angle=0.0, end_angle=90.0, rotation_direction="ccw")
    az = np.concatenate([scan_columns(s2, f, ft, "range")[0] for f in range(12)])
    assert az.max() < 90.0 and az.min() >= 0.0 and az.size > 0
    s2 = s2.replace(rotation_direction="cw")
    az = np.concatenate([scan_columns(s2, f, ft, "range")[0] for f in range(12)])
    assert az.max() == pytest.approx(90.0) and az.min() > 0.0


def test_reflectivity_limit_is_original_rule():
    s = LidarSettings(ref_dist=50.0, ref_limit=0.1, ref_slope=0.01)
    d = np.array([10.0, 49.9, 50.0, 120.0])
    np.testing.assert_allclose(reflectivity_limit(d, s.ref_dist, s.ref_limit, s.ref_slope), [-1, -1, 0.1, 0.8])


def test_noise_is_seeded_and_per_laser_bias_is_the_table():
    s = LidarSettings(noise_sigma=0.0)
    r = np.full(64, 10.0)
    ch = np.arange(64, dtype=np.uint16)
    out = noisy_range(frame_rng(0, 1), r, ch, s)
    np.testing.assert_allclose(out - 10.0, HDL64E_S2_BIAS_M)
    s = LidarSettings(noise_sigma=0.05, bias_distribution="gaussian", bias_sigma=0.0)
    a = noisy_range(frame_rng(7, 3), np.full(20000, 5.0), np.zeros(20000, np.uint16), s)
    b = noisy_range(frame_rng(7, 3), np.full(20000, 5.0), np.zeros(20000, np.uint16), s)
    c = noisy_range(frame_rng(7, 4), np.full(20000, 5.0), np.zeros(20000, np.uint16), s)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert abs(a.std() - 0.05) < 0.002 and abs(a.mean() - 5.0) < 0.002
    lap = LidarSettings(preset="vlp16", bias_distribution="laplace", bias_sigma=0.1, seed=3).laser_bias()
    assert lap.shape == (16,) and np.array_equal(lap, LidarSettings(
        preset="vlp16", bias_distribution="laplace", bias_sigma=0.1, seed=3).laser_bias())
    assert not np.array_equal(lap, LidarSettings(
        preset="vlp16", bias_distribution="laplace", bias_sigma=0.1, seed=4).laser_bias())


@pytest.mark.parametrize("field,value,needle", [
    ("angle_resolution", 0.0, "angle_resolution must be in (0, 360] deg"),
    ("angle_resolution", -1.0, "angle_resolution"),
    ("max_range", 0.0, "max_range must be in (0, 100000] m"),
    ("max_range", float("nan"), "max_range"),
    ("rotation_speed", float("inf"), "rotation_speed"),
    ("noise_sigma", -0.1, "noise_sigma must be in [0, 1000] m"),
    ("noise_sigma", 1e308, "noise_sigma must be in [0, 1000] m"),  # noisy ranges were inf
    ("noise_mu", -1e30, "noise_mu must be in [-1000, 1000] m"),
    ("end_angle", -10.0, "end_angle"),
    ("preset", "hdl128", "preset must be one of hdl64e_s2, hdl32e, vlp16, generic, os0_128"),
    ("max_bounces", 100, "max_bounces must be an integer in [0, 64]"),
    ("bias_distribution", "uniform", "bias_distribution"),
])
def test_bad_settings_name_setting_and_range(field, value, needle):
    with pytest.raises(SettingsError) as ei:
        LidarSettings(**{field: value}).validate()
    assert needle in str(ei.value)
    assert ei.value.setting == field


def test_elevation_parsing():
    assert parse_elevations("-15, 0,15") == (-15.0, 0.0, 15.0)
    for bad in ("", "a,b", "91", "1,,nan"):
        with pytest.raises(SettingsError, match="elevations"):
            parse_elevations(bad)
    s = LidarSettings(preset="generic", elevations=(-1.0, 2.0)).validate()
    assert s.num_lasers == 2 and math.isclose(s.elevations_deg[1], 2.0)


def _blas_threads():
    from threadpoolctl import threadpool_info
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_single_blas_thread_limits_nested_and_concurrent_uses_then_restores():
    import threading

    from threadpoolctl import threadpool_limits

    from blensor_addon.process.blas import single_blas_thread
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        if not before or max(before) < 2:
            pytest.skip("this numpy's BLAS runs one thread only")
        entered, release = threading.Event(), threading.Event()

        def other():  # the writer thread's use, overlapping the main thread's
            with single_blas_thread():
                entered.set()
                release.wait(10)

        with single_blas_thread():
            assert set(_blas_threads()) == {1}
            with single_blas_thread():
                assert set(_blas_threads()) == {1}
            assert set(_blas_threads()) == {1}  # the nested exit kept the limit
            th = threading.Thread(target=other)
            th.start()
            assert entered.wait(10)
        assert set(_blas_threads()) == {1}  # the other thread is still inside
        release.set()
        th.join(10)
        assert _blas_threads() == before


def test_rotating_patterns_are_kept_read_only_by_their_inputs():
    from blensor_addon.core.sensors import rotating
    s = LidarSettings()
    az, ts = rotating.scan_columns(s, 12, 1 / 24, "single")
    fire = rotating.firing_offsets(s)
    p = rotating.make_pattern(s, az, ts, firing=fire)
    assert rotating.make_pattern(s, az.copy(), ts.copy(), firing=fire.copy()) is p  # equal inputs: the same rays
    assert not p.directions.flags.writeable and not p.timestamp.flags.writeable
    with pytest.raises(ValueError):
        p.directions[0, 0] = 0.0
    # the pattern made anew equals the kept one, and other inputs give other rays
    fresh = rotating._make_pattern(s, az, ts, 0, None, fire)
    assert all(np.array_equal(getattr(fresh, f), getattr(p, f)) for f in p._FIELDS)
    later = rotating.make_pattern(s, az, ts + 1.0, firing=fire)
    assert later is not p and np.array_equal(later.timestamp, (ts + 1.0).repeat(len(fire)) + np.tile(fire, len(ts)))
    for k in range(3):  # only the last few are kept
        rotating.make_pattern(s, az, ts + 2.0 + k, firing=fire)
    assert len(rotating._PATTERNS) == rotating._PATTERNS_KEPT


def test_swept_sensor_refusal_names_the_setting_whose_advice_works():
    # one sweep too many: the angle resolution (the rotation speed does not change the
    # rays of a sweep, and naming it sent a user in a circle); several sweeps in a frame's
    # packet: the rotation speed. The value the message gives is accepted.
    import re

    from blensor_addon.core.sensors import get_sensor
    from blensor_addon.core.sensors.planar import PlanarSettings
    sen = get_sensor("planar")
    fine = PlanarSettings(angle_resolution=1e-5)
    for sweep in range(12):  # float rounding gives some sweeps a column more
        with pytest.raises(SettingsError, match="angle_resolution must be at least") as ei:
            sen.check_budget(fine, sweep, sen.sweep_period(fine), "range", None)
    fit = float(re.search(r"at least ([0-9.e+-]+) deg", str(ei.value)).group(1))
    assert sen.check_budget(PlanarSettings(angle_resolution=fit * 1.01), 1, sen.sweep_period(fine), "range",
                            None) <= 20_000_000
    fast = PlanarSettings(angle_resolution=0.0005, rotation_speed=1000.0)  # 42 sweeps a frame
    with pytest.raises(SettingsError, match="rotation_speed must be at most") as ei:
        sen.check_budget(fast, 1, 1 / 24, "range", None)
    fit = float(re.search(r"at most ([0-9.e+-]+) Hz", str(ei.value)).group(1))
    assert sen.check_budget(PlanarSettings(angle_resolution=0.0005, rotation_speed=fit * 0.99), 1, 1 / 24,
                            "range", None) <= 20_000_000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("env,expected", [({}, "True True"), ({"BLENSOR_KEEP_HEAP": "0"}, "False False")])
def test_freed_memory_is_kept_once_per_process_unless_switched_off(env, expected):
    """process/alloc.py: glibc accepts M_MMAP_THRESHOLD and M_TOP_PAD (mallopt returns 1 for
    each), the second call reports the first's outcome, and BLENSOR_KEEP_HEAP=0 leaves the
    allocator alone."""
    import os
    code = "from blensor_addon.process import alloc; print(alloc.keep_freed_memory(), alloc.keep_freed_memory())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True)
    assert res.stdout.split("\n")[-2] == expected, res.stdout + res.stderr


# ---------------------------------------------------------------------------------------
# open registries and capabilities


def test_register_sensor_and_writer_refuse_bad_objects_and_duplicates():
    import dataclasses

    from blensor_addon.core.sensors import SENSORS, Sensor, register_sensor
    from blensor_addon.core.settings import SensorSettings
    from blensor_addon.io.formats import WRITERS, Writer, register_writer
    before_s, before_w = list(SENSORS), list(WRITERS)

    @dataclasses.dataclass(frozen=True)
    class Bare(SensorSettings):
        width: int = 3  # no setting() metadata

    class NoMeta(Sensor):
        name = "nometa"
        Settings = Bare

    class Low(Sensor):
        name = "low"
        number = 3  # the ToF's stored value

    class Clash(Sensor):
        name = "clash"
        number = SENSORS["tof"].number + 5000

    cases = [(lambda: register_sensor(object()), "sensor must be a blensor_addon.core.sensors.Sensor"),
             (lambda: register_sensor(SENSORS["tof"]), "sensor must be a name not registered yet"),
             (lambda: register_sensor(type("Up", (Sensor,), {"name": "Bad Name"})()),
              "sensor must be a name of"),
             (lambda: register_sensor(NoMeta()), "every setting of sensor 'nometa' declared with"),
             (lambda: register_sensor(Low()), "number of sensor 'low' an integer in [1024, 2147483647]"),
             (lambda: register_writer(object), "writer must be a subclass of blensor_addon.io.formats"),
             (lambda: register_writer(WRITERS["npz"]), "writer must be a name not registered yet"),
             (lambda: register_writer(type("W", (Writer,), {"name": "w1", "outputs": ("(",)})),
              "writer must be outputs of writer 'w1' regular expressions"),
             (lambda: register_writer(type("W", (Writer,), {"name": "w2", "flag_bit": 3})),
              "flag_bit of writer 'w2' an integer in [16, 30]")]
    for call, msg in cases:
        with pytest.raises(SettingsError) as ei:
            call()
        assert msg in str(ei.value), str(ei.value)
    Clash.number = SENSORS["tof"].number  # a number another sensor holds
    with pytest.raises(SettingsError, match="integer in"):
        register_sensor(Clash())
    assert list(SENSORS) == before_s and list(WRITERS) == before_w  # nothing half-registered


#: What saved .blend files hold for the built-in sensor types (``sensor_type``: the sensor's
#: number) and formats (``formats``, ``depth_formats``, ``motion_formats``: flag bits). These
#: never change: a renumbering fails below. A type or format added later keeps its own number
#: (the registry refuses one already held) and needs no entry here to pass.
STORED_SENSOR_NUMBERS = {"rotating": 0, "line": 1, "planar": 2, "tof": 3, "kinect": 4, "depth": 5,
                         "rosette": 6, "cylindrical": 7, "pattern": 8}
STORED_FLAG_BITS = {"npz": 0, "evd": 1, "pcd": 2, "las": 3, "laz": 4, "ply": 5, "kitti": 6, "rosbag2": 7,
                    "range_image": 8, "exr": 9, "npy": 10, "pfm": 11, "dmap": 12, "pcap": 13, "laserscan": 14,
                    "preview": 15}
STORED_MOTION_BITS = {"blensor": 0, "tum": 1, "kitti": 2, "json": 3}


def test_builtin_stored_numbers_are_unchanged_and_every_number_is_unique():
    # saved files hold these: sensor_type as the number, formats as flag bits
    from blensor_addon.core.sensors import BUILTIN_LIMIT, SENSORS
    from blensor_addon.io.formats import BUILTIN_BITS, FLAG_BITS, MOTION_FORMATS
    assert {k: SENSORS[k].number for k in STORED_SENSOR_NUMBERS} == STORED_SENSOR_NUMBERS
    assert {k: FLAG_BITS[k] for k in STORED_FLAG_BITS} == STORED_FLAG_BITS
    assert {k: BUILTIN_BITS[k] for k in STORED_FLAG_BITS} == STORED_FLAG_BITS
    assert {k: MOTION_FORMATS[k].bit for k in STORED_MOTION_BITS} == STORED_MOTION_BITS
    for numbers in ([s.number for s in SENSORS.values()], list(FLAG_BITS.values()),
                    [m.bit for m in MOTION_FORMATS.values()]):
        assert len(set(numbers)) == len(numbers), numbers
    assert all(SENSORS[k].number < BUILTIN_LIMIT for k in STORED_SENSOR_NUMBERS)


#: a sensor type and a format added as modules of the package (as a new built-in would be)
PROBE_SENSOR = """
import dataclasses
from ..settings import SensorSettings, setting
from .sensor import Sensor


@dataclasses.dataclass(frozen=True)
class ProbeSettings(SensorSettings):
    reach: float = setting(5.0, "Reach", "Farthest return", "m", lo=0.0, hi=10.0, lo_open=True)


class ProbeSensor(Sensor):
    name = "probe"
    label = "Probe"
    description = "A sensor module added inside the package (tests/test_core.py)"
    Settings = ProbeSettings
    number = 9


SENSOR = ProbeSensor()
"""
PROBE_WRITER = """
from ._base import Writer


class ProbeWriter(Writer):
    name = "probe"
    description = "A format module added inside the package (tests/test_core.py)"
    outputs = (r"probe\\d{5}\\.txt",)


WRITER = ProbeWriter
"""
#: the registry tests that a new sensor or format must not fail, and that a renumbering must
REGISTRY_TESTS = ("test_core.py::test_builtin_stored_numbers_are_unchanged_and_every_number_is_unique",
                  "test_blender_ui.py::test_enums_store_explicit_numbers_that_saved_files_hold",
                  "test_cluster.py::test_the_same_bytes_runs_cover_each_way_the_cluster_handles_a_writer")


def test_a_sensor_and_a_format_added_inside_the_package_pass_the_registry_tests(tmp_path):
    """A copy of the add-on with a new sensor module (``core/sensors/probe.py``, number 9)
    and a new format module (``io/formats/probe.py``): both are registered (the sensor
    with its number, the format with a free plug-in bit), ``blensor sensors`` lists the
    sensor, and the registry tests pass on it unchanged; the same copy with the ToF's
    stored number changed fails them."""
    import os
    import re
    import shutil
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(root / "blensor_addon", dest / "blensor_addon",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (dest / "blensor_addon" / "core" / "sensors" / "probe.py").write_text(PROBE_SENSOR)
        (dest / "blensor_addon" / "io" / "formats" / "probe.py").write_text(PROBE_WRITER)
        return dest

    def run(where: Path, *args) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(where)}
        return subprocess.run([sys.executable, *args], cwd=where, env=env, capture_output=True, text=True,
                              timeout=600)

    added = copy("added")
    res = run(added, "-c", "import blensor_addon\n"
              "from blensor_addon.core.sensors import SENSORS\n"
              "from blensor_addon.io.formats import FLAG_BITS, PLUGIN_BITS, parse_formats\n"
              "assert blensor_addon.__file__.startswith(" + repr(str(added)) + "), blensor_addon.__file__\n"
              "assert FLAG_BITS['probe'] in PLUGIN_BITS and parse_formats('npz,probe') == ('npz', 'probe')\n"
              "print(SENSORS['probe'].number, list(SENSORS)[-1])\n")
    assert res.returncode == 0 and res.stdout.split() == ["9", "probe"], res.stdout + res.stderr
    res = run(added, "-m", "blensor_addon.cli", "sensors")
    assert res.returncode == 0 and "\nprobe: Probe - A sensor module added inside the package" in res.stdout
    tests = [str(root / "tests" / t) for t in REGISTRY_TESTS]
    res = run(added, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert res.returncode == 0 and "3 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    renumbered = copy("renumbered")
    tof = renumbered / "blensor_addon" / "core" / "sensors" / "tof.py"
    text, n = re.subn(r"^    number = 3\b", "    number = 10", tof.read_text(), flags=re.M)
    assert n == 1
    tof.write_text(text)
    res = run(renumbered, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert res.returncode == 1 and "2 failed, 1 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]


PLUGIN = '''
import dataclasses
import numpy as np
from blensor_addon.core.sensors import Sensor
from blensor_addon.core.settings import SensorSettings, setting
from blensor_addon.io.formats import Writer


@dataclasses.dataclass(frozen=True)
class EpSettings(SensorSettings):
    reach: float = setting(5.0, "Reach", "Farthest return", "m", lo=0.0, hi=10.0, lo_open=True)


class EpSensor(Sensor):
    name = "epsensor"
    Settings = EpSettings


class EpWriter(Writer):
    name = "epwriter"
    description = "test plug-in"
    outputs = (r"ep\\d+\\.txt",)
'''


def test_entry_point_plugins_load_once_and_a_broken_one_is_one_warning_line(tmp_path):
    """pip-installed plug-ins (entry points ``blensor.sensors`` / ``blensor.writers``) are
    registered when the registries are imported; a plug-in that raises is left out with
    one line on stderr, and BlenSor works."""
    import os
    (tmp_path / "ep_plugin.py").write_text(PLUGIN)
    (tmp_path / "ep_broken.py").write_text("raise ImportError('needs the frobnicator library')\n")
    dist = tmp_path / "ep_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[blensor.sensors]\nepsensor = ep_plugin:EpSensor\n"
                                           "broken = ep_broken:SENSOR\n\n[blensor.writers]\n"
                                           "epwriter = ep_plugin:EpWriter\n")
    code = ("from blensor_addon.core.sensors import SENSORS, plugin_number, make_settings\n"
            "from blensor_addon.io.formats import WRITERS, FLAG_BITS, PLUGIN_BITS, parse_formats\n"
            "s = SENSORS['epsensor']\n"
            "assert s.number == plugin_number('epsensor') >= 65536 and s.storage == 'epsensor'\n"
            "assert make_settings('epsensor', {}, {'reach': 2.0})[1].reach == 2.0\n"
            "assert FLAG_BITS['epwriter'] in PLUGIN_BITS\n"
            "assert parse_formats('npz,epwriter') == ('npz', 'epwriter')\n"
            "print(list(SENSORS)[-1], list(WRITERS)[-1])\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split() == ["epsensor", "epwriter"]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == ["blensor: warning: plug-in 'broken' (ep_broken:SENSOR) of blensor.sensors left out: "
                     "needs the frobnicator library"]


def test_capabilities_declare_timing_grid_and_fields():
    from blensor_addon.core.capabilities import Capabilities
    from blensor_addon.core.result import FIELDS
    from blensor_addon.core.sensors import SENSORS
    from blensor_addon.core.sensors.raypattern import CameraFrame, sweep_column_count

    def caps(name, camera=None, **values):
        sensor = SENSORS[name]
        c = sensor.capabilities(sensor.settings(values), camera)
        assert isinstance(c, Capabilities)
        return c

    c = caps("rotating")  # HDL-64E S2: 2083 columns of a full turn at 0.1728 deg, 10 Hz
    assert (c.timing.kind, c.timing.period, c.grid, c.organized) == ("sweep", 0.1, (64, 2083), False)
    assert c.fields == tuple(FIELDS)
    c = caps("planar", preset="lms511", start_angle=-95.0, end_angle=95.0, angle_resolution=0.25,
             rotation_speed=25.0)
    assert c.timing.period == pytest.approx(0.04)
    assert c.grid == (1, 760) == (1, sweep_column_count(-95, 95, 0.25))
    assert caps("line").grid == (4, 340)  # -50..35 deg at 0.25 deg
    c = caps("tof", readout_time=0.01, deskew=True)
    assert (c.timing.kind, c.timing.exposure, c.grid, c.organized) == ("exposure", 0.01, (144, 176), True)
    assert c.fields[-2:] == ("xyz_deskewed", "xyz_noisy_deskewed")
    assert caps("tof", readout_time=0.01, time_model="frame").timing.exposure == 0.0  # global shutter
    cam = CameraFrame(320, 240, -1.0, 1.0, -0.75, 0.75, -1.0)
    assert caps("depth", cam).grid == (240, 320) and caps("kinect").grid == (480, 640)
    # the column count is computed in one place: int((end - start) / res), 0 when empty
    assert sweep_column_count(0.0, 360.0, 0.1728) == 2083 and sweep_column_count(0.0, 0.1, 0.25) == 0
