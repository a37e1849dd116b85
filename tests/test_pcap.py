"""pcap: the packets a real unit sends, decoded by the vendors' own tools.

The decoders (velodyne-decoder 3.1.0, ouster-sdk 1.0.1) live in their own environment
(``.venv-decoders``, built by tools/decoders.sh, which tools/test.sh runs): both need numpy 2.
tests/pcap_decode.py runs in it and hands back what the decoder read; these tests compare it
with the scan's own points: every return present, range within the packet format's
resolution, the same laser, azimuth and time.
"""
from __future__ import annotations

import dataclasses
import math
import os
import struct
import subprocess

import numpy as np
import pytest
from conftest import ROOT
from pcap_synth import ouster_device, ouster_meta, synthetic_result, velodyne_device

from blensor_addon.core.errors import SettingsError
from blensor_addon.core.timebase import parse_start_time
from blensor_addon.io.formats import WRITERS, RunInfo, make_options
from blensor_addon.io.packets import velodyne as vpk
from blensor_addon.io.packets.reported import compensated_reflectivity, ouster_signal_photons
from blensor_addon.io.packets.reported import unit_reflectivity

DECODERS = ROOT / ".venv-decoders" / "bin" / "python"
#: the default time base (2020-01-01T00:00:00Z) in UNIX s: the captures' stamps count from it
BASE_S = parse_start_time(None) // 10**9
DECODE = ROOT / "tests" / "pcap_decode.py"
#: the decoders' azimuth error bound: the block azimuth's 0.01 deg unit (0.005 deg), the
#: decoder's own rounding of each firing's interpolated azimuth to 0.01 deg (0.005 deg), and
#: the rotation rate it estimates from the packet's first and last block azimuths
VELODYNE_AZIMUTH_TOL_DEG = 0.0125
#: timestamps: the packet's 1 us unit (0.5 us), the decoder's float32 time in the scan
VELODYNE_TIME_TOL_S = 0.6e-6


def decode(kind: str, pcap, meta, out) -> dict:
    """Run tests/pcap_decode.py in the decoder environment; the npz it wrote, as a dict
    (velodyne's times since the default time base, :data:`BASE_S`; ouster's absolute ns).
    Skips when the environment is absent (fails in CI, where tools/test.sh builds it)."""
    if not DECODERS.exists():
        msg = "the vendors' decoders (.venv-decoders) are absent: bash tools/decoders.sh builds them"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    res = subprocess.run([str(DECODERS), str(DECODE), kind, str(pcap), str(meta), str(out), str(BASE_S)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def write_pcap(folder, results, start_ns=None, **options) -> object:
    """Write ``results`` (frames of one run) with the pcap writer (``start_ns``: the run's
    time base, UNIX ns; None: the default); returns the writer."""
    folder.mkdir(parents=True, exist_ok=True)
    run = RunInfo() if start_ns is None else RunInfo(start_ns=start_ns)
    w = WRITERS["pcap"](folder, make_options(("pcap",), {f"pcap.{k}": v for k, v in options.items()})["pcap"],
                        run)
    for r in results:
        w.append(r)
    w.close("complete")
    return w


def truth_of(results) -> dict:
    """The results' per-point fields a decoder can be compared with, concatenated, with the
    reflectivity the unit reports (``unit_reflectivity``: range-compensated under the
    radiometric return model, else the material's, io/packets/reported.py) and, where the
    results carry it, the received power ``signal``."""
    keys = ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel", "reflectivity",
            "intensity")
    out = {k: np.concatenate([getattr(r, k) for r in results]) for k in keys}
    out["unit_reflectivity"] = np.concatenate([unit_reflectivity(r) for r in results])
    if all("signal" in r.extra for r in results):
        out["signal"] = np.concatenate([r.extra["signal"] for r in results])
    return out


def reported_reflectivity(truth: dict) -> np.ndarray:
    """The reflectivity the unit reports of ``truth``'s returns (1 = 100 % diffuse): its
    ``unit_reflectivity``, else the range-compensated reflectivity of its received power
    ``signal`` (an npz of the radiometric return model: ``signal x range^2``), else its
    material ``reflectivity`` (io/packets/reported.py)."""
    if "unit_reflectivity" in truth:
        return truth["unit_reflectivity"]
    if "signal" in truth:
        return compensated_reflectivity(truth["signal"], truth["range"])
    return truth["reflectivity"]


def compare_velodyne(device, truth: dict, dec: dict, bundled: bool = False) -> dict:
    """Assert that velodyne-decoder's points are ``truth``'s (see the module docstring);
    returns the numbers: points compared, largest range (m), azimuth (deg), time (s) and
    elevation (rad) differences.

    ``bundled``: decoded with the decoder's own default calibration of the model, which
    raises each beam by a vertical offset (focal distance x tan(-elevation), velodyne-decoder
    src/calib_db.cpp): the horizontal range is compared, not the elevation."""
    unit = vpk.distance_unit(device, vpk.model_of(device))
    ring = np.asarray(device.table.ring)
    laser_of_ring = np.empty_like(ring)
    laser_of_ring[ring] = np.arange(ring.size)
    laser = laser_of_ring[dec["ring"]]
    n = truth["timestamp"].size
    assert dec["x"].size == n, (dec["x"].size, n)  # every return, and nothing else
    a = np.lexsort((dec["time"], laser))
    b = np.lexsort((truth["timestamp"], truth["channel"]))
    assert np.array_equal(laser[a], truth["channel"][b])  # the same laser...
    dt = np.abs(dec["time"][a] - truth["timestamp"][b])
    assert dt.max() <= VELODYNE_TIME_TOL_S, dt.max()  # ...at the same firing
    x, y, z = dec["x"][a], dec["y"][a], dec["z"][a]
    # the beam origin: vert_offset_correction up the spin axis (velodyne-decoder: z = d sin v + vo)
    zb = z if bundled else z - device.table.per_laser("vert_offset_m")[laser[a]]
    r = np.sqrt(x * x + y * y + zb * zb)
    if bundled:
        r = np.hypot(x, y)
        dr = np.abs(r - truth["range_noisy"][b] * np.cos(truth["elevation"][b]))
    else:
        dr = np.abs(r - truth["range_noisy"][b])
    assert dr.max() <= unit / 2 + 2e-6 * r.max(), dr.max()  # within the distance unit (float32 xyz)
    daz = np.degrees(np.abs(np.angle(np.exp(1j * (np.arctan2(y, x) - truth["azimuth"][b])))))
    assert daz.max() <= VELODYNE_AZIMUTH_TOL_DEG, daz.max()
    de = np.zeros(1) if bundled else np.abs(np.arcsin(zb / r) - truth["elevation"][b])
    assert de.max() < 1e-5, de.max()
    # Velodyne's calibrated reflectivity byte: round(100 x reflectivity), of the stored float32 value
    # (range-compensated under the radiometric model: signal x r^2)
    refl = reported_reflectivity(truth)
    assert np.array_equal(dec["intensity"][a], np.round(100 * refl[b].astype(np.float64)))
    out = {"points": n, "range_m": float(dr.max()), "azimuth_deg": float(daz.max()),
           "time_s": float(dt.max()), "elevation_rad": float(de.max())}
    if "xyz_noisy" in truth:  # REP-103 sensor-frame points: the driver's, within the range unit and
        # the azimuth's (0.0125 deg is 10 mm across at 46 m)
        dxyz = np.linalg.norm(np.stack([x, y, z], 1) - truth["xyz_noisy"][b], axis=1)
        bound = unit / 2 + r * math.radians(VELODYNE_AZIMUTH_TOL_DEG) + 1e-4
        assert (dxyz <= bound).all(), (dxyz - bound).max()
        out["xyz_m"] = float(dxyz.max())
    return out


def compare_ouster(device, truth: dict, dec: dict) -> dict:
    """Assert that ouster-sdk's scans hold ``truth``'s returns (ranges in Ouster's convention:
    the path from the beam origin + n); the numbers as :func:`compare_velodyne` (and
    ``xyz_m``: ouster-sdk's XYZ against the beam origin plus the path along the beam, in the
    sensor frame)."""
    t = device.table
    n_org = t.beam_origin_m
    valid = (dec["status"] & 1) > 0
    frame, col = np.nonzero(valid)
    ts = dec["timestamp"][valid].astype(np.int64) - BASE_S * 10**9  # scene time, ns
    o = np.argsort(ts)
    ts, frame, col = ts[o], frame[o], col[o]
    want = np.round(truth["timestamp"] * 1e9).astype(np.int64)
    pos = np.clip(np.searchsorted(ts, want - 1), 0, ts.size - 1)
    dt = np.abs(ts[pos] - want)
    assert dt.max() <= 1, dt.max()  # ns: the column of each return
    f, m, k = frame[pos], col[pos], truth["channel"].astype(np.int64)
    rng_mm = dec["range"][f, k, m]
    # every return, and no other
    assert (dec["range"] > 0).sum() == truth["timestamp"].size and (rng_mm > 0).all()
    dr = np.abs(rng_mm / 1000.0 - truth["range_noisy"])
    assert dr.max() <= 0.0005 + 1e-9, dr.max()  # 1 mm unit
    d = dec["direction"][f, k, m]
    daz = np.degrees(np.abs(np.angle(np.exp(1j * (np.arctan2(d[:, 1], d[:, 0]) - truth["azimuth"])))))
    assert daz.max() < 1e-3, daz.max()
    de = np.abs(np.arcsin(d[:, 2] / np.linalg.norm(d, axis=1)) - truth["elevation"])
    assert de.max() < 1e-5, de.max()
    # XYZ: beam origin n along the column's encoder azimuth (psi_col = azimuth + a_k), then the
    # rest of Ouster's range r (the path from the beam origin + n) along the beam; the lidar
    # origin 36.18 mm above the sensor frame's
    psi_col = truth["azimuth"] + np.deg2rad(t.per_laser("azimuth_deg"))[k]
    el, az, r = truth["elevation"], truth["azimuth"], truth["range_noisy"] - n_org
    exp = np.stack([n_org * np.cos(psi_col) + r * np.cos(el) * np.cos(az),
                    n_org * np.sin(psi_col) + r * np.cos(el) * np.sin(az), r * np.sin(el)], 1)
    l2s = np.asarray(t.extra["lidar_to_sensor_transform"]).reshape(4, 4)[:3, 3] / 1000.0
    exp += l2s
    dxyz = np.linalg.norm(dec["xyz"][f, k, m] - exp, axis=1)
    assert dxyz.max() < 0.0006, dxyz.max()  # the 1 mm range unit
    refl = np.round(100 * reported_reflectivity(truth).astype(np.float64))
    assert np.array_equal(dec["reflectivity"][f, k, m], refl)
    # SIGNAL: the signal photons of the received power (radiometric model), else round(100 x intensity)
    if "signal" in truth or "intensity" in truth:
        sig = (ouster_signal_photons(truth["signal"], device.model) if "signal" in truth
               else np.round(100 * truth["intensity"].astype(np.float64)))
        assert np.array_equal(dec["signal"][f, k, m], sig)
    out = {"points": int(want.size), "range_m": float(dr.max()), "azimuth_deg": float(daz.max()),
           "time_s": float(dt.max()) * 1e-9, "elevation_rad": float(de.max()), "xyz_m": float(dxyz.max())}
    if "xyz_noisy" in truth:  # REP-103 sensor-frame points: ouster-sdk's, less the lidar origin's height
        dp = np.linalg.norm(dec["xyz"][f, k, m] - l2s - truth["xyz_noisy"], axis=1)
        assert dp.max() < 0.0006 + 1e-4, dp.max()
        out["points_xyz_m"] = float(dp.max())
    return out


def two_frames(device, **kw):
    """Two consecutive frames of ``device`` covering 2.05 turns, cut inside a packet."""
    n = int(device.columns)
    return [synthetic_result(device, 0, n + 37, 0, **kw),
            synthetic_result(device, n + 37, n + 13, 1, seed=1, **kw)]


# -- Velodyne --------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,radiometric", [("VLP-16", False), ("HDL-32E", False), ("VLP-32C", False),
                                               ("VLP-32C", True)])
def test_velodyne_pcap_decodes_to_the_scan(tmp_path, model, radiometric):
    dev = velodyne_device(model)
    results = two_frames(dev, radiometric=radiometric)
    w = write_pcap(tmp_path, results)
    per_packet = vpk.BLOCKS * vpk.MODELS[model].sequences
    cols = sum(r.grid_shape[1] for r in results)
    assert w.packets == math.ceil(cols / per_packet)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.pcap", "scan.yaml"]
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    stats = compare_velodyne(dev, truth_of(results), dec)
    print(f"{model}: {stats}")
    assert stats["points"] > 40_000 and int(dec["scans"]) >= 2


@pytest.mark.parametrize("model", ["VLP-16", "HDL-32E", "VLP-32C"])
def test_velodyne_model_is_found_from_the_product_id(tmp_path, model):
    # no calibration given: velodyne-decoder picks the model from the packets' product id byte
    # and its own bundled calibration of that model, whose angles are the tables' here
    dev = velodyne_device(model)
    results = [synthetic_result(dev, 0, 2 * int(dev.columns), 0)]
    write_pcap(tmp_path, results)
    dec = decode("velodyne", tmp_path / "scan.pcap", "-", tmp_path / "dec.npz")
    compare_velodyne(dev, truth_of(results), dec, bundled=True)


def test_velodyne_distance_correction_round_trips(tmp_path):
    # the packet holds the raw distance (reported range - dist_correction) and scan.yaml the
    # correction, which the decoder adds back: the decoded range is the scan's again
    dev = velodyne_device("VLP-16")
    dev = dataclasses.replace(dev, table=dataclasses.replace(
        dev.table, distance_m=tuple(0.01 * ((k % 5) - 2) for k in range(16))))
    results = [synthetic_result(dev, 0, 2000, 0)]
    write_pcap(tmp_path, results)
    assert "dist_correction: -0.02" in (tmp_path / "scan.yaml").read_text()
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    compare_velodyne(dev, truth_of(results), dec)


def test_velodyne_packet_bytes(tmp_path):
    dev = velodyne_device("VLP-16")
    r = synthetic_result(dev, 0, 100, 0, hole=0)  # every laser returns
    write_pcap(tmp_path, [r], points="clean", start_ns=1_700_000_000 * 10**9)
    data = (tmp_path / "scan.pcap").read_bytes()
    magic, major, minor, _, _, snap, link = struct.unpack_from("<IHHiIII", data)
    assert (magic, major, minor, snap, link) == (0xA1B2C3D4, 2, 4, 65535, 1)
    sec, usec, incl, orig = struct.unpack_from("<IIII", data, 24)
    frame = data[40:40 + incl]
    assert incl == orig == 14 + 20 + 8 + 1206 and len(data) == 24 + 5 * (16 + incl)  # 100 columns: 5 packets
    assert frame[:6] == b"\xff" * 6 and frame[12:14] == b"\x08\x00"
    ip = frame[14:34]
    assert ip[0] == 0x45 and ip[9] == 17 and ip[12:16] == bytes([192, 168, 1, 201])
    words = sum(struct.unpack("!10H", ip))
    assert (words & 0xFFFF) + (words >> 16) == 0xFFFF  # the header checksum holds
    assert struct.unpack("!HHH", frame[34:40]) == (2368, 2368, 8 + 1206)
    pkt = frame[42:]
    blocks = np.frombuffer(pkt[:1200], dtype=vpk.BLOCK_DTYPE)
    assert (blocks["flag"] == b"\xff\xee").all()
    # block b = columns 2b and 2b + 1, at the clockwise azimuth of column 2b: -psi0 = -0.3 rad,
    # growing 360 deg x 10 Hz x 55.296 us per column
    want = np.round(np.mod(-math.degrees(0.3) + 3600.0 * 2 * np.arange(12) * 55.296e-6, 360.0) * 100)
    assert np.array_equal(blocks["azimuth"], want)
    ts, mode, product = struct.unpack("<IBB", pkt[1200:])
    t0 = 1_700_000_000 * 10**9 + round(r.timestamp[0] * 1e9)  # ns
    assert (mode, product) == (0x37, 0x22) and ts == (t0 + 500) // 1000 % 3_600_000_000
    assert sec + usec * 1e-6 == pytest.approx(1_700_000_000.0 + 23 * 55.296e-6 + 55.296e-6, abs=1e-6)
    # record k of a block's first half: laser k of its first column, clean range in 2 mm
    first = r.channel[:16], r.range[:16]
    assert np.array_equal(blocks["records"]["distance"][0, first[0]], np.round(first[1] / 0.002))
    second = 16 + r.channel[16:32]
    assert np.array_equal(blocks["records"]["distance"][0, second], np.round(r.range[16:32] / 0.002))
    yaml = (tmp_path / "scan.yaml").read_text()
    assert "distance_resolution: 0.002" in yaml and yaml.count("laser_id") == 16


def test_pcap_is_byte_reproducible(tmp_path):
    for name, dev in (("v", velodyne_device("VLP-32C")), ("o", ouster_device())):
        kw = {"psi0": 2 * math.pi * 100 / 1024} if name == "o" else {}
        for d in ("a", "b"):
            write_pcap(tmp_path / name / d, two_frames(dev, **kw))
        for f in ("scan.pcap", "scan.json" if name == "o" else "scan.yaml"):
            assert (tmp_path / name / "a" / f).read_bytes() == (tmp_path / name / "b" / f).read_bytes()


# -- Ouster -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile,radiometric", [("LEGACY", False), ("RNG19_RFL8_SIG16_NIR16", False),
                                                 ("RNG19_RFL8_SIG16_NIR16", True)])
def test_ouster_pcap_decodes_to_the_scan(tmp_path, profile, radiometric):
    dev = ouster_device()
    # column azimuths on the unit's 1024-column encoder grid, as every preset has them
    results = two_frames(dev, psi0=2 * math.pi * 100 / 1024, radiometric=radiometric)
    w = write_pcap(tmp_path, results, ouster_profile=profile)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.json", "scan.pcap"]
    dec = decode("ouster", tmp_path / "scan.pcap", tmp_path / "scan.json", tmp_path / "dec.npz")
    assert str(dec["profile"]) == profile and str(dec["lidar_mode"]) == "1024x10"
    # frames are whole turns: frame ids count them, measurement ids are the unit's columns
    assert list(dec["frame_id"]) == [0, 1, 2]
    assert w.packets * 16 - sum(r.grid_shape[1] for r in results) < 32  # only the first and last padded
    stats = compare_ouster(dev, truth_of(results), dec)
    print(f"OS1-64 {profile}: {stats}")
    assert stats["points"] > 100_000


def test_ouster_metadata_is_the_units(tmp_path):
    import json
    dev = ouster_device()
    write_pcap(tmp_path, [synthetic_result(dev, 0, 64, 0, psi0=0.0)])
    meta, src = json.loads((tmp_path / "scan.json").read_text()), ouster_meta()
    for k in ("beam_altitude_angles", "beam_azimuth_angles", "lidar_origin_to_beam_origin_mm",
              "lidar_to_sensor_transform", "lidar_mode", "prod_line", "prod_sn"):
        assert meta[k] == src[k], k
    for k in ("columns_per_frame", "columns_per_packet", "pixel_shift_by_row", "pixels_per_column",
              "column_window"):
        assert meta["data_format"][k] == src["data_format"][k], k
    data = (tmp_path / "scan.pcap").read_bytes()
    incl = struct.unpack_from("<I", data, 24 + 8)[0]
    assert incl == 42 + 16 * (16 + 64 * 12 + 4) and struct.unpack_from("!HH", data, 40 + 34) == (7502, 7502)
    # the single-return profile: packet header (type 1, frame id, initialization id and serial
    # number as the metadata), 16 columns of 12 + 64 x 12 bytes, a 32-byte footer
    write_pcap(tmp_path / "rng19", [synthetic_result(dev, 0, 64, 0, psi0=0.0)],
               ouster_profile="RNG19_RFL8_SIG16_NIR16")
    meta = json.loads((tmp_path / "rng19" / "scan.json").read_text())
    data = (tmp_path / "rng19" / "scan.pcap").read_bytes()
    incl = struct.unpack_from("<I", data, 24 + 8)[0]
    assert incl == 42 + 32 + 16 * (12 + 64 * 12) + 32
    ptype, frame_id, init_sn = struct.unpack_from("<HHQ", data, 40 + 42)
    assert (ptype, frame_id) == (1, 0)
    assert meta["data_format"]["udp_profile_lidar"] == "RNG19_RFL8_SIG16_NIR16"
    assert init_sn & 0xFFFFFF == meta["initialization_id"] and init_sn >> 24 == int(src["prod_sn"])


def test_ouster_metadata_follows_the_grid_cast():
    # issue 21 review: the encoder's width is the grid's columns (Device.columns), not the table's
    # columns_per_frame, and the table's pixel shifts (measured for 1024 columns) are not reused at
    # 2048: the default ones of that width, as the driver-layout cloud takes them
    from blensor_addon.io.packets.ouster import OusterEncoder, pixel_shift_by_row
    dev = dataclasses.replace(ouster_device(), columns=2048.0)
    meta = OusterEncoder(dev).metadata()
    assert meta["lidar_mode"] == "2048x10" and meta["data_format"]["columns_per_frame"] == 2048
    s = np.round(2048 * np.asarray(ouster_meta()["beam_azimuth_angles"]) / 360.0).astype(int)
    assert meta["data_format"]["pixel_shift_by_row"] == list(s - s.min())
    assert list(pixel_shift_by_row(dev.table, 1024)) == ouster_meta()["data_format"]["pixel_shift_by_row"]
    # the sample unit's own shifts at 1024 are this same rule: round(W a / 360) less the smallest
    s = np.round(1024 * np.asarray(ouster_meta()["beam_azimuth_angles"]) / 360.0).astype(int)
    assert np.abs((s - s.min()) - ouster_meta()["data_format"]["pixel_shift_by_row"]).max() <= 1


# -- refusals ---------------------------------------------------------------------------------------

def _with_device(result, device):
    caps = dataclasses.replace(result.capabilities, device=device)
    return dataclasses.replace(result, capabilities=caps)


@pytest.mark.parametrize("change, field, words", [
    (lambda d: None, "formats", "models a real unit"),
    (lambda d: dataclasses.replace(d, model="HDL-64E S2"), "formats", "VLP-16, HDL-32E, VLP-32C"),
    # issue 21 review, item 6: an imported table's model names no unit: the message says what to do
    (lambda d: dataclasses.replace(d, model="Velodyne 16-laser calibration"), "formats",
     "import it over a VLP-16/HDL-32E/VLP-32C preset"),
    (lambda d: dataclasses.replace(d, vendor="hesai", model="Pandar64"), "formats", "velodyne or ouster"),
    (lambda d: dataclasses.replace(d, direction="ccw"), "rotation_direction", "cw for pcap"),
])
def test_pcap_refuses_what_no_unit_sends(tmp_path, change, field, words):
    dev = velodyne_device("VLP-16")
    r = _with_device(synthetic_result(dev, 0, 30, 0), change(dev))
    w = WRITERS["pcap"](tmp_path, None)
    with pytest.raises(SettingsError) as e:
        w.append(r)
    w.discard()
    assert e.value.setting == field and words in str(e.value) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_the_plan_refuses_pcap_for_a_sensor_with_no_device():
    from blensor_addon.core.capabilities import Capabilities, Timing
    from blensor_addon.jobs.plan import check_writers
    caps = Capabilities(timing=Timing("sweep", 0.1), grid=(16, 100))
    with pytest.raises(SettingsError, match="pcap needs a preset that models a real unit"):
        check_writers(caps, {"pcap": WRITERS["pcap"].needs}, "rotating")
    dev = velodyne_device("VLP-16")
    check_writers(dataclasses.replace(caps, device=dev), {"pcap": WRITERS["pcap"].needs}, "rotating")
    # the model and the spin are checked before anything is scanned
    for bad, what in ((dataclasses.replace(dev, model="HDL-64E S2"), "pcap of a Velodyne VLP-16"),
                      (dataclasses.replace(dev, direction="ccw"), "rotation_direction must be cw")):
        with pytest.raises(SettingsError, match=what):
            check_writers(dataclasses.replace(caps, device=bad), {"pcap": WRITERS["pcap"].needs}, "rotating")


def test_ouster_refuses_columns_off_the_encoder_grid_and_unknown_modes(tmp_path):
    dev = ouster_device()
    w = WRITERS["pcap"](tmp_path / "a", None)
    (tmp_path / "a").mkdir()
    with pytest.raises(SettingsError, match="encoder grid"):
        w.append(synthetic_result(dev, 0, 32, 0, psi0=0.3))  # 0.3 rad: 48.9 columns
    w.discard()
    fast = dataclasses.replace(dev, rotation_speed=15.0)
    w = WRITERS["pcap"](tmp_path / "a", None)
    with pytest.raises(SettingsError, match="lidar mode 512x10"):
        w.append(synthetic_result(fast, 0, 32, 0, psi0=0.0))
    w.discard()
    assert list((tmp_path / "a").iterdir()) == []


# -- a real scan --------------------------------------------------------------------------------------

RNG19 = {"pcap.ouster_profile": "RNG19_RFL8_SIG16_NIR16"}
#: preset -> decoder, metadata file beside scan.pcap, pcap options
REAL_UNITS = {"vlp16": ("velodyne", "scan.yaml", {}), "hdl32e": ("velodyne", "scan.yaml", {}),
              "vlp32c": ("velodyne", "scan.yaml", {}), "os0_128": ("ouster", "scan.json", {}),
              "os1_64": ("ouster", "scan.json", {}), "os1_128": ("ouster", "scan.json", RNG19),
              "os2_128": ("ouster", "scan.json", RNG19)}


@pytest.mark.parametrize("preset", list(REAL_UNITS))
def test_a_real_scan_decodes_to_its_npz(bpy_mod, crossing, tmp_path, preset):
    """Real Blender, the demo scene, the real unit's preset: the npz and the pcap of one run,
    the pcap read back by the vendor's decoder, every return of the npz found in it."""
    from blensor_addon.core.capabilities import Device
    from blensor_addon.core.sensors.rotating_presets import preset_table
    from blensor_addon.jobs.range_scan import scan_range
    kind, meta, options = REAL_UNITS[preset]
    cam = bpy_mod.data.objects["Velodyne"]
    # a 90 deg sector of the two sweeps that start in [0.1, 0.3) s: packets with gaps between turns
    # (its ends on the Ouster units' 1024-column grid: their columns are the encoder's)
    job = scan_range(cam, None, tmp_path, ("npz", "pcap"), seed=3, time=(0.1, 0.3), preset=preset,
                     start_angle=90.0, end_angle=180.0, axes="ros", frame_of_reference="sensor",
                     options=options)
    assert job.status == "complete"
    parts = []
    for f in sorted(tmp_path.glob("scan*.npz")):
        with np.load(f) as z:
            first = z["return_number"] == 1 if "return_number" in z.files else slice(None)
            keys = ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel", "reflectivity",
                    "intensity", "xyz_noisy") + (("signal",) if "signal" in z.files else ())
            parts.append({k: z[k][first] for k in keys})
    assert len(parts) == 2
    truth = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    table = preset_table(preset)
    device = Device(table.vendor, table.model, table, 10.0)
    dec = decode(kind, tmp_path / "scan.pcap", tmp_path / meta, tmp_path / "dec.npz")
    stats = (compare_velodyne if kind == "velodyne" else compare_ouster)(device, truth, dec)
    print(f"{preset} on scenes/crossing.blend: {stats}")
    assert stats["points"] > 2000


# -- the packets and the driver layouts agree (issue 21 review) ----------------------------------------

def packet_stamps(pcap) -> np.ndarray:
    """(P,) int64: the data packets' own timestamps (us past the hour) of a Velodyne pcap."""
    data = pcap.read_bytes()
    pos, out = 24, []
    while pos < len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        payload = data[pos + 16 + 42:pos + 16 + incl]
        out.append(struct.unpack_from("<I", payload, 1200)[0])
        pos += 16 + incl
    return np.asarray(out, dtype=np.int64)


def test_velodyne_packets_start_on_the_grid_velodyne_stamp_counts(tmp_path):
    # issue 21 review, item 3: velodyne_stamp (XYZIRT's time origin) takes packets that start at
    # global columns multiple of 384 / L from t = 0; the encoder started its first packet at the run's
    # first column (754 for vlp16 --frames 1-3 on scenes/crossing.blend), so no packet it wrote had the
    # stamp the clouds' times count from. Now the first packet is padded with no-return firings.
    from blensor_addon.io.formats._layouts import velodyne_stamp
    dev = velodyne_device("VLP-16")
    dt = 1.0 / (dev.rotation_speed * dev.columns)
    frame_time = 753.5 * dt  # frame f starts at global column ceil(753.5 f)
    results = [dataclasses.replace(synthetic_result(dev, a, b - a, f), frame_time=frame_time)
               for f, a, b in ((1, 754, 1507), (2, 1507, 2261))]
    write_pcap(tmp_path, results)
    stamps = packet_stamps(tmp_path / "scan.pcap")
    cols = stamps * 1e-6 / dt
    np.testing.assert_allclose(cols, np.round(cols), atol=0.02)
    assert (np.round(cols).astype(int) % 24 == 0).all() and round(cols[0]) == 744  # 754 = 744 + 10
    assert round(cols[-1]) == 2256 and stamps.size == (2256 - 744) // 24 + 1
    for r in results:  # each cloud's stamp is the stamp of a packet BlenSor wrote: the last one's
        us = round(velodyne_stamp(r) * 1e6)
        assert us in stamps, (us, stamps[:3])
        g_last = r.ray_index.max() % r.grid_shape[1] + round(r.timestamp.min() / dt)
        assert us == stamps[np.searchsorted(stamps, round(g_last * dt * 1e6), "right") - 1]
    # the padding is firings of no return: the decoder finds every return and nothing else
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    compare_velodyne(dev, truth_of(results), dec)


def test_velodyne_encoder_pads_gaps_at_their_own_columns():
    dev = velodyne_device("HDL-32E")
    enc = vpk.VelodyneEncoder(dev)
    r = synthetic_result(dev, 5, 30, 0, hole=0)  # columns 5..34: packets 0 (5..11), 1, 2 (24..34)
    from blensor_addon.io.packets import firing_columns
    out = enc.add(firing_columns(r, dev)) + enc.finish()
    assert len(out) == 3
    blocks = [np.frombuffer(p[:1200], dtype=vpk.BLOCK_DTYPE) for _, p in out]
    # packet 0: blocks 0-4 are columns 0-4 of no return, at their own azimuths (360 x 10 Hz x 46.08 us
    # = 0.166 deg a column, clockwise: 16.59 units of 0.01 deg)
    dist = [b["records"]["distance"] for b in blocks]
    assert (dist[0][:5] == 0).all() and (dist[0][5:] > 0).all()
    az = np.concatenate([b["azimuth"] for b in blocks]).astype(float)
    step = np.mod(np.diff(az), 36000)
    assert np.abs(step - 16.5888).max() <= 1.0  # every block one column on, padding included
    assert (dist[2][11:] == 0).all() and (dist[2][:11] > 0).all()  # column 35: no return


def _match_by_time(t_ref: np.ndarray, t: np.ndarray, tol: float) -> np.ndarray:
    """Index into ``t_ref`` of the nearest time of each of ``t`` (asserted within ``tol`` s)."""
    o = np.argsort(t_ref)
    pos = np.clip(np.searchsorted(t_ref[o], t), 1, t_ref.size - 1)
    left, right = o[pos - 1], o[pos]
    best = np.where(np.abs(t_ref[left] - t) <= np.abs(t_ref[right] - t), left, right)
    assert np.abs(t_ref[best] - t).max() <= tol
    return best


def test_a_real_vlp16_run_pcap_bag_and_pcd_agree(bpy_mod, crossing, tmp_path):
    # issue 21 review, items 1 and 3 on real Blender (vlp16, frames 1-3 of scenes/crossing.blend, the
    # first at global column 754): velodyne_pointcloud publishes the packet's reflectivity byte as
    # intensity: velodyne-decoder's intensity of BlenSor's pcap is the bag's XYZIRT and the PCD's
    # intensity (it was round(255 x intensity) in the bag and 0..1 in the PCD); every cloud is stamped
    # at the first firing of a packet the pcap holds (its last).
    from open3d.t.io import read_point_cloud

    from blensor_addon.jobs.range_scan import scan_range
    from test_driver_layouts import read_bag
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, [1, 2, 3], tmp_path, ("npz", "pcap", "rosbag2", "pcd"), seed=5, preset="vlp16",
                     packets="frame", max_range=40.0)
    assert job.status == "complete"
    zs = [np.load(tmp_path / f"scan{f:05d}.npz") for f in (1, 2, 3)]
    bag, _ = read_bag(tmp_path / "rosbag2")
    msgs = [m for _, m in bag["/blensor/points"]]
    assert len(msgs) == 3
    xyzirt = np.dtype({"names": ["intensity", "ring", "time"], "formats": ["<f4", "<u2", "<f4"],
                       "offsets": [12, 16, 18], "itemsize": 22})
    stamps_us = packet_stamps(tmp_path / "scan.pcap")
    # frame 1 starts at global column ceil((1 / 24 s) / 55.296 us) = 754; its packet at column 744
    dt = 55.296e-6
    assert stamps_us[0] == round(744 * dt * 1e6) and zs[0]["timestamp"].min() >= 754 * dt - 1e-9
    times, inten_bag, inten_pcd, rings = [], [], [], []
    for f, z, msg in zip((1, 2, 3), zs, msgs):
        rec = np.frombuffer(msg.data.tobytes(), xyzirt)
        assert rec.size == z["range"].size  # the npz's order
        # scene time: the stamp less the time base (on the hour, so the packets' us past the hour
        # count from it too)
        stamp = (msg.header.stamp.sec - BASE_S) + msg.header.stamp.nanosec * 1e-9
        assert round(stamp * 1e6) in stamps_us, stamp
        np.testing.assert_allclose(stamp + rec["time"].astype(np.float64), z["timestamp"], atol=1e-6)
        pcd = read_point_cloud(str(tmp_path / "noisy" / f"scan{f:05d}.pcd"))
        first = z["return_number"] == 1 if "return_number" in z.files else np.ones(rec.size, bool)
        times.append(z["timestamp"][first])
        inten_bag.append(rec["intensity"][first])
        inten_pcd.append(pcd.point["intensity"].numpy().ravel()[first])
        rings.append(rec["ring"][first])
    times, inten_bag, inten_pcd, rings = (np.concatenate(v) for v in (times, inten_bag, inten_pcd, rings))
    np.testing.assert_array_equal(inten_pcd, inten_bag)
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    assert dec["x"].size == times.size > 2000
    idx = _match_by_time(times, dec["time"], VELODYNE_TIME_TOL_S)  # VLP-16 lasers fire 2.3 us apart
    assert np.array_equal(dec["ring"], rings[idx])
    assert np.array_equal(dec["intensity"], inten_bag[idx])  # the driver's intensity, and BlenSor's
    assert inten_bag.max() > 30 and (inten_bag == np.round(inten_bag)).all()
    print(f"vlp16 frames 1-3: {times.size} returns, pcap intensity = bag = PCD, {stamps_us.size} packets "
          f"from global column 744")


def _one_ouster_turn(dev):
    """One whole turn of ``dev`` (global columns W..2W-1, frame 1), column c at Ouster's
    measurement id c (psi0 = pi: the lidar frame is the sensor frame turned by 180 deg)."""
    W = int(dev.columns)
    r = synthetic_result(dev, W, W, 1, psi0=math.pi)
    return dataclasses.replace(r, frame_time=1.0 / dev.rotation_speed)


@pytest.mark.parametrize("shifts", ["metadata", "none"])
def test_ouster_organized_cloud_is_the_destaggered_decode_of_the_pcap(tmp_path, shifts):
    # issue 21 review, items 1 and 2: ouster-ros destaggers with the metadata's pixel_shift_by_row and
    # publishes signal as intensity and reflectivity as it is; BlenSor's organized cloud (rosbag2
    # PointCloud2 and PCD) is ouster-sdk's destaggered decode of BlenSor's pcap + scan.json. With a
    # table that has no shifts, scan.json had round(W a / 360) less its smallest and the cloud the
    # same without, and the cloud's intensity was 255 x intensity against the packets' 100 x.
    from blensor_addon.core.axes import sensor_points
    from blensor_addon.io.formats._layouts import ouster_cloud
    from blensor_addon.io.formats.pcd import ouster_records
    dev = ouster_device()
    if shifts == "none":
        extra = {k: v for k, v in dev.table.extra.items() if k != "pixel_shift_by_row"}
        dev = dataclasses.replace(dev, table=dataclasses.replace(dev.table, extra=extra))
    r = _one_ouster_turn(dev)
    r = dataclasses.replace(r, capabilities=dataclasses.replace(r.capabilities, device=dev))
    write_pcap(tmp_path, [r])
    dec = decode("ouster", tmp_path / "scan.pcap", tmp_path / "scan.json", tmp_path / "dec.npz")
    assert dec["range_destaggered"].shape == (1, 64, 1024) and list(dec["frame_id"]) == [1]
    _, rec, h, w = ouster_cloud(r, sensor_points(r, True, "ros"), 0.1, True)
    assert (h, w) == (64, 1024)
    rec = rec.reshape(h, w)
    assert (rec["range"] > 0).sum() == len(r) > 50_000
    np.testing.assert_array_equal(rec["range"], dec["range_destaggered"][0])
    np.testing.assert_array_equal(rec["intensity"], dec["signal_destaggered"][0])
    np.testing.assert_array_equal(rec["reflectivity"], dec["reflectivity_destaggered"][0])
    pcd = ouster_records(r, noisy=True).reshape(h, w)
    np.testing.assert_array_equal(pcd["intensity"], dec["signal_destaggered"][0])
    assert rec["intensity"].max() > 20  # round(100 x intensity) of intensities up to 0.5


def test_a_real_os1_64_turn_bag_and_pcd_are_the_destaggered_pcap(bpy_mod, crossing, tmp_path):
    # issue 21 review, items 1 and 2 on real Blender: one whole turn of the os1_64 preset; the bag's
    # and the PCD's organized clouds hold ouster-sdk's destaggered range, signal and reflectivity
    from open3d.t.io import read_point_cloud

    from blensor_addon.jobs.range_scan import scan_range
    from test_driver_layouts import read_bag
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, None, tmp_path, ("pcap", "rosbag2", "pcd"), seed=5, time=(0.1, 0.2),
                     preset="os1_64", max_range=50.0)
    assert job.status == "complete"
    dec = decode("ouster", tmp_path / "scan.pcap", tmp_path / "scan.json", tmp_path / "dec.npz")
    assert dec["range_destaggered"].shape == (1, 64, 1024)
    bag, _ = read_bag(tmp_path / "rosbag2")
    (msg,) = [m for _, m in bag["/blensor/points"]]
    dt = np.dtype({"names": ["intensity", "reflectivity", "range"], "formats": ["<f4", "<u2", "<u4"],
                   "offsets": [16, 24, 32], "itemsize": 48})
    rec = np.frombuffer(msg.data.tobytes(), dt).reshape(msg.height, msg.width)
    assert (rec["range"] > 0).sum() > 10_000
    np.testing.assert_array_equal(rec["range"], dec["range_destaggered"][0])
    np.testing.assert_array_equal(rec["intensity"], dec["signal_destaggered"][0])
    np.testing.assert_array_equal(rec["reflectivity"], dec["reflectivity_destaggered"][0])
    pcd = read_point_cloud(str(tmp_path / "noisy" / "scan00001.pcd"))
    np.testing.assert_array_equal(pcd.point["intensity"].numpy().reshape(64, 1024),
                                  dec["signal_destaggered"][0])
    print(f"os1_64 one turn: {(rec['range'] > 0).sum()} returns, 64 x 1024 cells = the destaggered pcap")


@pytest.mark.parametrize("preset, got", [("vls128", "'VLS-128'"), ("pandar64", "'hesai Pandar64'"),
                                         ("generic", "'pcap with sensor type rotating'")])
def test_pcap_on_a_preset_without_packets_lists_every_preset_that_has_them(tmp_path, preset, got):
    from test_faults import one_error_line, run
    from conftest import CROSSING
    res = run("scan", CROSSING, "--set", f"preset={preset}", "--formats", "pcap", "--frames", "1",
              "--out", tmp_path / "o")
    line = one_error_line(res)
    assert res.returncode == 2 and line.startswith("blensor: error: --formats must be ") and \
        line.endswith(f", got {got}"), line
    listed = line.partition("presets ")[2] or line.partition("real unit: ")[2]
    for name in ("vlp16", "hdl32e", "vlp32c", "os0_128", "os1_64", "os1_128", "os2_128"):
        assert name in listed, (name, line)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
