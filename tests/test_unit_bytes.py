"""What each unit reports of a return (docs/physics.md, "What each unit reports"): the bytes
of Velodyne's calibrated reflectivity mode, Ouster's REFLECTIVITY, SIGNAL and NEAR_IR and
Hesai's Reflectivity, derived from the received power ``extra["signal"]`` of the radiometric
return model (1.0 = a 100 % Lambertian target at normal incidence at 1 m: ``rho cos(theta) /
r^2``), and the ``signal`` field of the writers. Results are built here with that
normalisation; without ``signal`` every byte is the one written before.
"""
from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
from pcap_synth import ouster_device, synthetic_result, velodyne_device

from blensor_addon.core.capabilities import Device
from blensor_addon.core.result import ScanResult, register_field
from blensor_addon.core.sensors.calibration import LaserTable
from blensor_addon.io.formats import _layouts
from blensor_addon.io.formats.las import las_bytes
from blensor_addon.io.formats.npz import npz_members
from blensor_addon.io.formats.pcd import pcd_bytes
from blensor_addon.io.formats.ply import ply_vertices
from blensor_addon.io.packets import firing_columns
from blensor_addon.io.packets.ouster import OusterEncoder, column_dtype

register_field("signal", "<f4")  # the radiometric model's field (core/result.py registers it too)


def plate(result: ScanResult, rho: float, range_m, theta_deg=0.0, signal: bool = True) -> ScanResult:
    """``result`` (a synthetic scan of a unit, tests/pcap_synth.py) as returns from a Lambertian
    plate of reflectivity ``rho`` at ``range_m`` (m, a number or one per return) seen at
    incidence ``theta_deg`` (deg, likewise): its ranges, reflectivity, intensity ``rho
    cos(theta)`` and, with ``signal``, the received power ``rho cos(theta) / r^2``."""
    n = len(result)
    r = np.broadcast_to(np.asarray(range_m, dtype=np.float64), (n,))
    cos = np.cos(np.radians(np.broadcast_to(np.asarray(theta_deg, dtype=np.float64), (n,))))
    extra = dict(result.extra)
    if signal:
        extra["signal"] = rho * cos / r ** 2
    return dataclasses.replace(result, range=r, range_noisy=r, reflectivity=np.full(n, rho),
                               intensity=rho * cos, extra=extra)


def hesai_device() -> Device:
    """A 32-laser Hesai unit (elevations -16..+15 deg), 1000 columns a turn at 10 Hz."""
    elev = tuple(float(v) for v in range(-16, 16))
    table = LaserTable(vendor="hesai", model="PandarXT-32", source="tests/test_unit_bytes.py",
                       elevation_deg=elev, firing_s=tuple(k * 1.512e-6 for k in range(32)), cycle_s=50e-6,
                       ring=tuple(range(32)))
    return Device("hesai", "PandarXT-32", table, 10.0, "cw", 1000.0, 0.05, 120.0)


def vlp16(cols: int = 200) -> ScanResult:
    return synthetic_result(velodyne_device("VLP-16"), 0, cols, 0, hole=0)


def os1(cols: int = 1024) -> ScanResult:
    return synthetic_result(ouster_device(), 0, cols, 0, psi0=2 * math.pi * 100 / 1024, hole=0)


def ouster_fields(result: ScanResult) -> dict:
    """The ouster-ros cloud's reflectivity, intensity (SIGNAL) and ambient (NEAR_IR) of each
    return (one return a cell), in the result's order."""
    _, rec, _, cols = _layouts.ouster_cloud(result, np.zeros((len(result), 3)), 0.0, True)
    shifts = _layouts.pixel_shifts(result)
    ri = result.ray_index.astype(np.int64)
    r, c = ri // cols, ri % cols
    if shifts is not None:
        c = np.mod(c + shifts[r], cols)
    cell = rec[r * cols + c]
    return {k: cell[k].astype(np.int64) for k in ("reflectivity", "intensity", "ambient")}


def ouster_packet_fields(result: ScanResult, profile: str = "RNG19_RFL8_SIG16_NIR16") -> dict:
    """REFLECTIVITY, SIGNAL and NEAR_IR of the OS1's packets of ``result``, (beams, columns)."""
    enc = OusterEncoder(result.capabilities.device, profile=profile)
    packets = enc.add(firing_columns(result, result.capabilities.device)) + enc.finish()
    head = 0 if profile == "LEGACY" else 32
    dt = column_dtype(enc.beams, profile)
    cols = np.concatenate([np.frombuffer(p[head:head + 16 * dt.itemsize], dtype=dt) for _, p in packets])
    px = cols["px"]  # (columns, beams)
    return {"reflectivity": px["reflectivity"].T.astype(np.int64), "signal": px["signal"].T.astype(np.int64),
            "near_ir": px["near_ir"].T.astype(np.int64), "range": px["range"].T.astype(np.int64)}


# -- the 50 % plate at normal incidence -------------------------------------------------------------

@pytest.mark.parametrize("range_m", [10.0, 40.0])
def test_a_50_percent_plate_reads_50_on_every_unit(range_m):
    v = plate(vlp16(), 0.5, range_m)
    assert np.abs(_layouts.xyzirt_intensity(v) - 50).max() <= 5
    o = plate(os1(64), 0.5, range_m)
    assert np.abs(ouster_fields(o)["reflectivity"] - 50).max() <= 5
    pk = ouster_packet_fields(o)
    got = pk["reflectivity"][pk["range"] > 0]
    assert got.size == len(o) and np.abs(got - 50).max() <= 5
    h = plate(synthetic_result(hesai_device(), 0, 100, 0, hole=0), 0.5, range_m)
    assert np.abs(_layouts.xyzirt_intensity(h) - 50).max() <= 5


# -- incidence: the bytes fall as cos(theta) -------------------------------------------------------

THETA = np.array([0.0, 30.0, 60.0, 75.0, 80.0, 87.0])


def per_return(n: int, values) -> np.ndarray:
    return np.resize(np.asarray(values, dtype=np.float64), n)


def test_bytes_fall_as_the_cosine_of_incidence():
    want = np.round(100 * np.cos(np.radians(THETA)))  # 100, 87, 50, 26, 17, 5
    v = vlp16()
    th = per_return(len(v), THETA)
    v = plate(v, 1.0, 10.0, th)
    byte = _layouts.xyzirt_intensity(v)
    for t, w in zip(THETA, want):
        assert set(byte[th == t].tolist()) == {w}, (t, w)
    assert set(byte[th == 80.0].tolist()) == {17.0}  # a floor at 80 deg: 17, not 100
    o = os1(64)
    th = per_return(len(o), THETA)
    refl = ouster_fields(plate(o, 1.0, 10.0, th))["reflectivity"]
    for t, w in zip(THETA, want):
        assert set(refl[th == t].tolist()) == {w}, (t, w)
    # without the radiometric model: the material's reflectivity, whatever the incidence (as before)
    assert set(_layouts.xyzirt_intensity(plate(vlp16(), 1.0, 10.0, per_return(len(v), THETA),
                                               signal=False)).tolist()) == {100.0}


def test_a_range_compensated_byte_does_not_fall_with_range():
    v = vlp16(400)
    r = per_return(len(v), [2.0, 5.0, 20.0, 60.0, 100.0])
    byte = _layouts.xyzirt_intensity(plate(v, 0.3, r))
    assert set(byte.tolist()) == {30.0}


# -- Ouster SIGNAL and NEAR_IR ---------------------------------------------------------------------

def test_ouster_signal_falls_as_the_inverse_square_of_range_and_near_ir_is_0():
    o = os1(64)
    r = per_return(len(o), [10.0, 20.0, 40.0])
    f = ouster_fields(plate(o, 0.5, r))
    sig = {x: np.unique(f["intensity"][r == x]) for x in (10.0, 20.0, 40.0)}
    assert all(s.size == 1 for s in sig.values())
    s10, s20, s40 = (int(sig[x][0]) for x in (10.0, 20.0, 40.0))
    assert s10 / s40 == pytest.approx(16.0, rel=0.01) and s10 / s20 == pytest.approx(4.0, rel=0.01)
    assert s40 > 100  # photons, not round(100 x intensity) (= 50 at every range)
    assert (f["ambient"] == 0).all()
    pk = ouster_packet_fields(plate(o, 0.5, r))
    hit = pk["range"] > 0
    assert set(pk["signal"][hit].tolist()) == {s10, s20, s40}
    assert (pk["near_ir"] == 0).all()


def test_near_ir_carries_the_ambient_photons_an_ambient_model_adds():
    # the ambient light model's field (core/sensors/ambient.py, registered in core/result.py): a
    # result holding "near_ir" (ambient photons a return) gets them in NEAR_IR (packets) and
    # ambient (ouster-ros cloud)
    o = plate(os1(64), 0.5, 10.0)
    o = dataclasses.replace(o, extra={**o.extra, "near_ir": np.resize([0.0, 7.4, 300.0], len(o))})
    assert sorted(set(ouster_fields(o)["ambient"].tolist())) == [0, 7, 300]
    pk = ouster_packet_fields(o)
    assert sorted(set(pk["near_ir"][pk["range"] > 0].tolist())) == [0, 7, 300]


# -- nothing changes without signal ----------------------------------------------------------------

def test_without_signal_every_byte_is_the_one_written_before():
    v = plate(vlp16(), 0.37, 12.0, 60.0, signal=False)
    assert np.array_equal(_layouts.xyzirt_intensity(v), np.full(len(v), 37.0, np.float32))
    o = plate(os1(64), 0.37, 12.0, 60.0, signal=False)
    f = ouster_fields(o)
    assert set(f["reflectivity"].tolist()) == {37}
    inten = np.float64(np.float32(0.37 * 0.5))  # the result's float32 intensity
    assert set(f["intensity"].tolist()) == {np.round(100 * inten)}  # round(100 x intensity)
    pk = ouster_packet_fields(o, "LEGACY")
    hit = pk["range"] > 0
    assert set(pk["reflectivity"][hit].tolist()) == {37}
    assert set(pk["signal"][hit].tolist()) == {np.round(100 * inten)}
    h = plate(synthetic_result(hesai_device(), 0, 50, 0, hole=0), 0.37, 12.0, 60.0, signal=False)
    assert set(_layouts.xyzirt_intensity(h).tolist()) == {np.round(255 * inten)}
    text = pcd_bytes(h).split(b"DATA")[0]
    assert b"FIELDS x y z intensity ring time label semantic rgb\n" in text
    assert "signal" not in npz_members(h) and "signal" not in (ply_vertices(h).dtype.names or ())


# -- the signal field ------------------------------------------------------------------------------

def test_writers_hold_the_signal_field():
    import laspy
    h = plate(synthetic_result(hesai_device(), 0, 50, 0, hole=0), 0.5, 20.0, 30.0)
    sig = h.extra["signal"]
    assert np.array_equal(npz_members(h)["signal"], sig)
    assert np.array_equal(ply_vertices(h)["signal"], sig)
    data = pcd_bytes(h)
    head, body = data.split(b"DATA binary\n")
    assert b"FIELDS x y z intensity ring time label semantic rgb signal\n" in head
    assert b"SIZE 4 4 4 4 2 4 4 2 4 4\n" in head and b"TYPE F F F F U F U U F F\n" in head
    rec = np.frombuffer(body, np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"),
                                        ("ring", "<u2"), ("time", "<f4"), ("label", "<u4"),
                                        ("semantic", "<u2"), ("rgb", "<f4"), ("signal", "<f4")]))
    assert np.array_equal(rec["signal"], sig)
    # Hesai's PCD intensity: the Reflectivity byte its driver publishes, range-compensated
    assert set(rec["intensity"].tolist()) == {round(50 * math.cos(math.radians(30)))}
    las = laspy.read(io.BytesIO(las_bytes(h)))
    assert np.array_equal(np.sort(np.asarray(las["signal"])), np.sort(sig))
    fields, rec = _layouts.xyzirt(h, True, 0.0)
    assert ("signal", 22, _layouts.FLOAT32) in fields and np.array_equal(rec["signal"], sig)
    # Velodyne's XYZIRT stays velodyne_pointcloud's 22-byte layout
    fields, rec = _layouts.xyzirt(plate(vlp16(), 0.5, 20.0), True, 0.0)
    assert [f[0] for f in fields] == ["x", "y", "z", "intensity", "ring", "time"]
    assert rec.dtype.itemsize == 22


def test_the_ouster_photon_scales_follow_the_calibration_table():
    # SIGNAL's per-unit scale (derived: SNR = sqrt(photons)) holds the weakest return each unit's
    # entry of core/tables/radiometry.json names (its lowest reflectivity at > 90 % or without a
    # probability) at the OS1 datasheet's lowest SNR, 12: 144 photons
    import json
    from pathlib import Path

    from blensor_addon.core.sensors.rotating_presets import preset_table
    from blensor_addon.io.packets import reported
    path = Path(reported.__file__).resolve().parents[2] / "core" / "tables" / "radiometry.json"
    units = json.loads(path.read_text())["units"]
    seen = set()
    for preset, unit in units.items():
        table = preset_table(preset)
        if table.vendor != "ouster":
            continue
        low = min(r["reflectivity"] for r in unit["ranges"])
        fig = [r for r in unit["ranges"] if r["reflectivity"] == low and (r["probability"] or 0.9) >= 0.9]
        assert len(fig) == 1, preset
        assert reported.OUSTER_WEAKEST_RETURN[table.model] == (low, fig[0]["range_m"])
        assert min(p["snr"] for p in unit["precision"] if p["snr"]) == reported.OUSTER_WEAKEST_SNR
        photons = reported.ouster_signal_photons(np.array([low / fig[0]["range_m"] ** 2]), table.model)
        assert photons.tolist() == [144]
        seen.add(table.model)
    assert seen == set(reported.OUSTER_PHOTONS_AT_1M) == {"OS0-128", "OS1-64", "OS1-128", "OS2-128"}
    assert reported.OUSTER_PHOTONS_AT_1M["OS1-64"] == 2_304_000
    assert reported.ouster_photon_scale("OS1-32") == reported.OUSTER_PHOTONS_AT_1M["OS1-64"]


# -- through a real scan ---------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["vlp16", "os1_64"])
def test_a_real_radiometric_scan_reports_the_plates_bytes(bpy_mod, empty_scene, tmp_path, preset):
    """Real Blender: 50 % Lambertian walls 10 m ahead and 40 m behind a unit of a real preset
    (the radiometric model, its default); its npz holds ``signal``, its bytes read 50 on the
    walls at normal incidence and fall with incidence as cos(theta), Ouster's SIGNAL falls as
    1/r^2, and the vendor's decoder reads the pcap's bytes as the npz's received power gives
    them (tests/test_pcap.py)."""
    import test_pcap
    from conftest import add_camera, add_mesh, quad

    from blensor_addon.core.capabilities import Device
    from blensor_addon.core.sensors.rotating_presets import preset_table
    from blensor_addon.io.packets.reported import compensated_reflectivity, ouster_signal_photons
    from blensor_addon.jobs.range_scan import scan_range
    grey = bpy_mod.data.materials.new("Grey")
    grey.blensor.reflectivity = 0.5
    for name, z in (("Near", -10.0), ("Far", 40.0)):  # the sensor looks down -z, y up
        v, f = quad(-60, 60, -15, 15, z)
        add_mesh(bpy_mod, name, v, f, grey)
    cam = add_camera(bpy_mod)
    cam.data.blensor.preset = preset
    assert cam.data.blensor.return_model == "radiometric"
    job = scan_range(cam, None, tmp_path, ("npz", "pcap"), seed=3, time=(0.1, 0.2), axes="ros",
                     frame_of_reference="sensor")
    assert job.status == "complete"
    with np.load(next(tmp_path.glob("scan*.npz"))) as z:
        truth = {k: z[k] for k in ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel",
                                   "reflectivity", "intensity", "signal", "xyz_noisy")}
    refl = compensated_reflectivity(truth["signal"], truth["range"])
    # the incidence on a wall normal to the view: cos = cos(elevation) |cos(azimuth)|
    cos = np.cos(truth["elevation"]) * np.abs(np.cos(truth["azimuth"]))
    az = np.degrees(truth["azimuth"]) % 180.0  # (azimuth in [0, 360) deg: 0 ahead, 180 behind)
    inner = (az < 40) | (az > 140)  # off the walls' side edges
    byte = np.round(100 * refl.astype(np.float64))
    normal = inner & (cos > 0.99)
    near, far = normal & (truth["range"] < 12), normal & (truth["range"] > 39)
    assert near.sum() > 10 and far.sum() > 10
    assert np.abs(byte[near | far] - 50).max() <= 5
    slant = inner & (cos < 0.8)
    assert slant.sum() > 10
    np.testing.assert_allclose(byte[slant], 50 * cos[slant], atol=1.5)
    table = preset_table(preset)
    device = Device(table.vendor, table.model, table, 10.0)
    if table.vendor == "ouster":
        photons = ouster_signal_photons(truth["signal"], table.model).astype(np.float64)
        ratio = np.median(photons[near] / cos[near]) / np.median(photons[far] / cos[far])
        mean_r = np.median(truth["range"][far]) / np.median(truth["range"][near])
        assert ratio == pytest.approx(mean_r ** 2, rel=0.02)
        kind, meta = "ouster", "scan.json"
    else:
        kind, meta = "velodyne", "scan.yaml"
    dec = test_pcap.decode(kind, tmp_path / "scan.pcap", tmp_path / meta, tmp_path / "dec.npz")
    compare = test_pcap.compare_ouster if kind == "ouster" else test_pcap.compare_velodyne
    stats = compare(device, truth, dec)
    print(f"{preset}: {int(near.sum())} near, {int(far.sum())} far, {int(slant.sum())} slanted; {stats}")
    assert stats["points"] == len(truth["range"])
