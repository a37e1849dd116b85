"""Outputs of several returns per beam: the return fields of a multi-return scan in every writer
(LAS return bits, PCD and PointCloud2 fields, PLY, npz), Velodyne's dual return packets read
back by velodyne-decoder, and the new settings in the panel, the CLI and the Blender
properties.

Results are built by hand (the beam module that forms real multiple returns is tested in
tests/test_beam.py): :func:`multi_result` adds second returns behind some beams of a scan.
"""
from __future__ import annotations

import dataclasses
import io
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CROSSING
from pcap_synth import ouster_device, synthetic_result, velodyne_device
from test_pcap import DECODERS, compare_velodyne, decode, write_pcap

from blensor_addon.core.capabilities import Capabilities, Timing
from blensor_addon.core.result import FIELDS, ScanResult
from blensor_addon.io.packets import velodyne as vpk

RETURN_FIELDS = ("return_number", "number_of_returns")


def multi_result(base: ScanResult, every: int = 3, far: float = 5.0, mode: str = "dual") -> ScanResult:
    """``base`` with a second return ``far`` m behind the first on the beams whose
    (column + channel) is a multiple of ``every``: its reflectivity shifted by 0.37 (mod 1),
    intensity half of it, object id + 1; return_number / number_of_returns set (1-based,
    nearest first), rows column-major, each beam's returns nearest first; capabilities
    ``returns = mode`` (what the writers read; the result holds no settings record)."""
    cols = base.grid_shape[1]
    col = base.ray_index % cols
    two = (col + base.channel) % every == 0
    idx = np.flatnonzero(two)
    f = {k: getattr(base, k) for k in FIELDS}
    g = {k: v[idx].copy() for k, v in f.items()}
    scale = (g["range"] + far) / g["range"]
    g["range"] = g["range"] + far
    g["range_noisy"] = g["range_noisy"] + far
    g["xyz"] = g["xyz"] * scale[:, None]
    g["xyz_noisy"] = g["xyz_noisy"] * scale[:, None]
    g["reflectivity"] = np.mod(g["reflectivity"] + 0.37, 1.0)
    g["intensity"] = g["reflectivity"] * 0.5
    g["object_id"] = g["object_id"] + 1
    rn = np.concatenate([np.ones(len(base), np.uint8), np.full(idx.size, 2, np.uint8)])
    nr = np.concatenate([np.where(two, 2, 1).astype(np.uint8), np.full(idx.size, 2, np.uint8)])
    a = {k: np.concatenate([f[k], g[k]]) for k in FIELDS}
    order = np.lexsort((rn, a["channel"], a["ray_index"] % cols))
    a = {k: v[order] for k, v in a.items()}
    caps = dataclasses.replace(base.capabilities, fields=(*FIELDS, *RETURN_FIELDS), returns=mode,
                               divergence_algorithm="echoes")
    extra = {"return_number": rn[order], "number_of_returns": nr[order]}
    return ScanResult(**a, frame=base.frame, frame_time=base.frame_time, grid_shape=base.grid_shape,
                      capabilities=caps, axes=base.axes, extra=extra)


def generic_result(n_cols: int = 40, rows: int = 4) -> ScanResult:
    """A swept scan of a sensor that models no unit (no device), every cell returning."""
    n = rows * n_cols
    cells = np.arange(n)
    ch, col = cells // n_cols, cells % n_cols
    az = col * 2 * math.pi / n_cols
    el = np.radians(ch * 2.0 - 3.0)
    rng = 5.0 + 0.1 * cells
    d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], 1)
    caps = Capabilities(Timing("sweep", 0.1), grid=(rows, n_cols))
    order = np.lexsort((ch, col))
    cells = cells[order]
    p = (d * rng[:, None])[order]
    r = ScanResult(timestamp=0.1 + col[order] * 1e-4, azimuth=az[order], elevation=el[order],
                   range=rng[order], range_noisy=rng[order] + 0.01, xyz=p, xyz_noisy=p,
                   object_id=np.full(n, 7), semantic=np.full(n, 40), instancer_id=np.zeros(n),
                   instance_id=np.zeros(n), channel=ch[order], ring=ch[order], ray_index=cells,
                   reflectivity=np.linspace(0.1, 0.9, n), intensity=np.linspace(0.05, 0.45, n),
                   color=np.full((n, 3), 100), normal=-d[order], frame=1, frame_time=0.1,
                   grid_shape=(rows, n_cols), capabilities=caps, axes="ros")
    return r


# -- writers ------------------------------------------------------------------------------------------

def test_las_return_bits_and_laspy_fields(tmp_path):
    import laspy

    from blensor_addon.io.formats.las import las_bytes
    r = multi_result(generic_result())
    raw = las_bytes(r)
    las = laspy.read(io.BytesIO(raw))
    order = np.argsort(r.ring, kind="stable")  # LAS orders the points by ring
    assert np.array_equal(np.asarray(las.return_number), r.return_number[order])
    assert np.array_equal(np.asarray(las.number_of_returns), r.number_of_returns[order])
    # the byte itself (LAS 1.4 R15 Table 15, point format 6-10: bits 0-3 return number, 4-7 number
    # of returns): 0x11, 0x12, 0x22 for a single return, the first and the second of two
    bits = np.asarray(las.points.array["bit_fields"])
    assert set(np.unique(bits).tolist()) == {0x11, 0x21, 0x22}
    assert np.array_equal(bits, (r.return_number | (r.number_of_returns << 4))[order])
    # one return per beam: 1 of 1 everywhere (0x11), the result holds no return fields
    one = generic_result()
    assert "return_number" not in one.extra
    assert (np.asarray(laspy.read(io.BytesIO(las_bytes(one))).points.array["bit_fields"]) == 0x11).all()


def test_pcd_gains_the_return_fields_read_back_by_pypcd4(tmp_path):
    from pypcd4 import PointCloud

    from blensor_addon.io.formats.pcd import pcd_bytes
    one = generic_result()
    head = pcd_bytes(one).split(b"DATA binary\n")[0].decode()
    # one return per beam: the file as before issue 22 (9 fields, 32 bytes a point)
    assert "FIELDS x y z intensity ring time label semantic rgb\n" in head
    assert len(pcd_bytes(one)) == len(head) + len("DATA binary\n") + 32 * len(one)
    r = multi_result(generic_result())
    data = pcd_bytes(r)
    head = data.split(b"DATA binary\n")[0].decode()
    assert "FIELDS x y z intensity ring time label semantic rgb return_number number_of_returns\n" in head
    assert "SIZE 4 4 4 4 2 4 4 2 4 1 1\n" in head and "TYPE F F F F U F U U F U U\n" in head
    assert len(data) == len(head) + len("DATA binary\n") + 34 * len(r)
    for binary in (True, False):
        path = tmp_path / f"m{binary}.pcd"
        path.write_bytes(pcd_bytes(r, binary=binary))
        pc = PointCloud.from_path(path)
        assert pc.fields[-2:] == ("return_number", "number_of_returns")
        arr = pc.numpy(("x", "z", "return_number", "number_of_returns"))
        assert np.array_equal(arr[:, 2], r.return_number) and np.array_equal(arr[:, 3], r.number_of_returns)
        np.testing.assert_array_equal(arr[:, 1].astype(np.float32), r.xyz[:, 2])
    # Open3D's tensor reader takes the two uint8 fields as attributes
    import open3d as o3d
    t = o3d.t.io.read_point_cloud(str(tmp_path / "mTrue.pcd"))
    assert np.array_equal(t.point["return_number"].numpy().ravel(), r.return_number)
    assert np.array_equal(t.point["number_of_returns"].numpy().ravel(), r.number_of_returns)
    # every second return is return 2 of 2
    second = r.return_number == 2
    assert second.sum() > 10 and (r.number_of_returns[second] == 2).all()


def test_ply_and_npz_hold_the_return_fields_as_uint8(tmp_path):
    import plyfile

    from blensor_addon.io.formats.npz import npz_bytes
    from blensor_addon.io.formats.ply import ply_bytes
    r = multi_result(generic_result())
    ply = plyfile.PlyData.read(io.BytesIO(ply_bytes(r)))["vertex"]
    names = [p.name for p in ply.properties]
    assert names[-2:] == ["return_number", "number_of_returns"]
    assert [p.val_dtype for p in ply.properties[-2:]] == ["u1", "u1"]
    assert np.array_equal(ply["return_number"], r.return_number)
    with np.load(io.BytesIO(npz_bytes(r))) as z:
        assert z["return_number"].dtype == np.uint8
        assert np.array_equal(z["number_of_returns"], r.number_of_returns)
    with np.load(io.BytesIO(npz_bytes(generic_result()))) as z:
        assert "return_number" not in z.files and "number_of_returns" not in z.files


def _bag_points(tmp_path, result, name, **options):
    from test_driver_layouts import write_bag
    msgs, _ = write_bag(tmp_path / name, [result], {f"rosbag2.{k}": v for k, v in options.items()})
    return msgs["/blensor/points"][0][1]


def test_pointcloud2_generic_layout_gains_return_fields_at_22_and_23(tmp_path):
    r = multi_result(generic_result())
    msg = _bag_points(tmp_path, r, "g")
    fields = [(f.name, f.offset, f.datatype) for f in msg.fields]
    assert fields == [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7), ("ring", 16, 4),
                      ("time", 18, 7), ("return_number", 22, 2), ("number_of_returns", 23, 2)]
    assert msg.point_step == 24 and msg.width == len(r) and msg.row_step == 24 * len(r)
    data = np.asarray(msg.data, np.uint8).reshape(len(r), 24)
    assert np.array_equal(data[:, 22], r.return_number) and np.array_equal(data[:, 23], r.number_of_returns)
    # with the labels: they follow the return fields, packed, the step rounded to 4 bytes
    msg = _bag_points(tmp_path, r, "l", labels=True)
    fields = [(f.name, f.offset) for f in msg.fields]
    assert fields[6:] == [("return_number", 22), ("number_of_returns", 23), ("object_id", 24),
                          ("instancer_id", 28), ("instance_id", 32), ("semantic", 36)]
    assert msg.point_step == 40
    # one return per beam: velodyne_pointcloud's 22-byte XYZIRT, as before issue 22
    msg = _bag_points(tmp_path, generic_result(), "o")
    assert msg.point_step == 22 and [f.name for f in msg.fields][-1] == "time"


def test_velodyne_and_ouster_driver_layouts_keep_their_points(tmp_path):
    # velodyne_pointcloud's XYZIRT has no return field: every return is a point of its own
    dev = velodyne_device("VLP-16")
    r = multi_result(synthetic_result(dev, 0, 48, 0))
    r.capabilities = dataclasses.replace(r.capabilities, returns="strongest")  # the layout ignores the mode
    msg = _bag_points(tmp_path, r, "v")
    assert msg.point_step == 22 and msg.width == len(r)
    assert "return_number" not in [f.name for f in msg.fields]
    # ouster-ros's organized cloud: one point a cell, each beam's strongest return
    from test_driver_layouts import grid_result
    from test_driver_layouts import ouster_device as small_ouster
    odev = small_ouster()
    base = grid_result(4, 8, np.arange(32), device=odev)
    r = multi_result(base, every=2, far=3.0, mode="dual_ouster")
    msg = _bag_points(tmp_path, r, "o", points="clean")
    assert (msg.height, msg.width, msg.point_step) == (4, 8, 48)
    rec = np.frombuffer(bytes(np.asarray(msg.data, np.uint8)), np.uint8).reshape(32, 48)
    rng_mm = rec[:, 32:36].copy().view("<u4").ravel()
    # which return each cell holds: the one with the larger received power (lambert: intensity / r^2)
    beam = r.ray_index.astype(np.int64)
    pw = r.intensity.astype(np.float64) / r.range.astype(np.float64) ** 2
    best = {}
    for i in range(len(r)):
        if beam[i] not in best or pw[i] > pw[best[beam[i]]]:
            best[beam[i]] = i
    want = sorted(np.round(r.range[list(best.values())] * 1000).astype(np.int64).tolist())
    assert sorted(rng_mm.tolist()) == want
    picked_second = [i for i in best.values() if r.return_number[i] == 2]
    assert picked_second and len(best) == 32  # some cells show their second (stronger) return
    # /blensor/points2: ouster-ros's second cloud, each beam's other (second strongest) return, NaN elsewhere
    from test_driver_layouts import write_bag
    msgs, _ = write_bag(tmp_path / "o2", [r], {"rosbag2.points": "clean"})
    m2 = msgs["/blensor/points2"][0][1]
    assert (m2.height, m2.width, m2.point_step, m2.is_dense) == (4, 8, 48, False)
    rec2 = np.frombuffer(bytes(np.asarray(m2.data, np.uint8)), np.uint8).reshape(32, 48)
    rng2 = rec2[:, 32:36].copy().view("<u4").ravel()
    others = sorted(set(range(len(r))) - set(best.values()))
    want2 = sorted(np.round(r.range[others] * 1000).astype(np.int64).tolist())
    assert sorted(rng2[rng2 > 0].tolist()) == want2
    assert np.isnan(rec2[:, 0:4].copy().view("<f4").ravel()[rng2 == 0]).all()
    assert "/blensor/points2" not in write_bag(tmp_path / "o1", [base])[0]  # one return per beam: none


# -- Velodyne dual return packets ---------------------------------------------------------------------

def _packets(pcap: Path) -> list[bytes]:
    data = pcap.read_bytes()
    out, off = [], 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off + 16 + 42:off + 16 + incl])
        off += 16 + incl
    return out


@pytest.mark.parametrize("model", ["VLP-16", "HDL-32E", "VLP-32C"])
def test_velodyne_dual_return_packets_decode_to_every_return(tmp_path, model):
    dev = velodyne_device(model)
    m = vpk.MODELS[model]
    base = synthetic_result(dev, 0, 400, 0)
    r = multi_result(base)
    w = write_pcap(tmp_path, [r], points="clean")
    per = 12 * m.sequences // 2  # a pair of blocks per firing: half the columns of a single-return packet
    assert vpk.columns_per_packet(m.lasers, dual=True) == per
    assert w.packets == math.ceil(400 / per)
    pkts = _packets(tmp_path / "scan.pcap")
    assert all(len(p) == 1206 for p in pkts)
    mode, product = struct.unpack("<BB", pkts[0][1204:1206])
    assert (mode, product) == (0x39, m.product_id)  # VLP-16 manual 9.3.1.6: 0x39 dual return
    blocks = np.frombuffer(pkts[0][:1200], dtype=vpk.BLOCK_DTYPE)
    # each pair of blocks: one azimuth (the firing's); the even block the last return, the odd the
    # strongest (or second strongest)
    assert np.array_equal(blocks["azimuth"][0::2], blocks["azimuth"][1::2])
    assert (np.diff(blocks["azimuth"][0::2].astype(np.int64)) % 36000 > 0).all()
    dist = blocks["records"]["distance"].astype(np.int64)
    unit = vpk.distance_unit(dev, m)
    # the packet's first column (pair 0, first firing sequence): beams with two returns hold the
    # far one (5 m further) in block 0 and the near one in block 1, beams with one return both alike
    cols = r.grid_shape[1]
    col = r.ray_index % cols
    for k in range(m.lasers):
        rows = np.flatnonzero((col == 0) & (r.channel == k))
        if rows.size == 0:
            assert dist[0, k] == dist[1, k] == 0
        elif rows.size == 1:
            assert dist[0, k] == dist[1, k] == round(r.range[rows[0]] / unit)
        else:
            near, far = sorted(rows, key=lambda i: r.return_number[i])
            assert dist[0, k] == round(r.range[far] / unit) and dist[1, k] == round(r.range[near] / unit)
    assert (dist[0] != dist[1]).any() and (dist[0] == dist[1]).any()
    # velodyne-decoder reads the pairs: LAST (even block), STRONGEST (odd), BOTH (a pair holding one
    # return, given once); every return of the scan, nothing else
    dec = decode("velodyne", tmp_path / "scan.pcap", tmp_path / "scan.yaml", tmp_path / "dec.npz")
    kind = dec["return_type"]
    two = r.number_of_returns == 2
    assert (kind == 3).sum() == (~two).sum()
    assert (kind == 2).sum() == (two & (r.return_number == 2)).sum() == (kind == 1).sum()
    keys = ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel", "reflectivity")
    truth = {k: getattr(r, k) for k in keys}
    truth["range_noisy"] = truth["range"]  # points=clean
    # the decoder's last returns are the scan's second returns, its strongest the first of those
    # beams, its "both" the beams' single returns: each set matches in laser, time, range, azimuth,
    # elevation and reflectivity byte (compare_velodyne's tolerances)
    for want, rt in ((two & (r.return_number == 2), 2), (two & (r.return_number == 1), 1), (~two, 3)):
        sub = {k: v[want] for k, v in truth.items()}
        got = {k: (v[kind == rt] if np.ndim(v) else v) for k, v in dec.items()}
        stats = compare_velodyne(dev, sub, got)
        print(f"{model} dual, return type {rt}: {stats}")


def test_velodyne_return_mode_byte_and_dual_stamp(tmp_path):
    from blensor_addon.io.formats._layouts import velodyne_stamp
    dev = velodyne_device("VLP-16")
    base = synthetic_result(dev, 0, 30, 0)
    # the default (and every single-return mode but last): strongest, 0x37; returns = last: 0x38
    caps = base.capabilities
    for i, (mode, algorithm, byte) in enumerate((("strongest", "echoes", 0x37), ("last", "echoes", 0x38),
                                                 ("last", "average", 0x37))):
        base.capabilities = dataclasses.replace(caps, returns=mode, divergence_algorithm=algorithm)
        write_pcap(tmp_path / f"m{i}", [base])
        assert _packets(tmp_path / f"m{i}" / "scan.pcap")[0][1204] == byte
    # velodyne_pointcloud's stamp: the first column of the last data packet, on the dual grid
    r = multi_result(synthetic_result(dev, 0, 30, 0))
    period = 1.0 / (dev.rotation_speed * dev.columns)
    assert velodyne_stamp(r) == pytest.approx(24 * period)  # columns 24-29 in the third dual packet
    r.capabilities = dataclasses.replace(r.capabilities, returns="all")
    assert velodyne_stamp(r) == pytest.approx(24 * period)  # single-return grid: 24 columns a packet
    assert vpk.return_mode(r) == 0x37 and not vpk.is_dual(r)


def test_ouster_dual_profile_carries_the_strongest_and_second_strongest(tmp_path, capfd):
    # RNG19_RFL8_SIG16_NIR16_DUAL: 16 bytes a beam (range | reflectivity << 24, range2 | reflectivity2
    # << 24, signal, signal2, near-ir, reserved, window); ouster-sdk reads RANGE/RANGE2 back
    from test_pcap import compare_ouster

    from blensor_addon.io.packets import second_strongest, strongest_per_beam
    dev = ouster_device()
    r = multi_result(synthetic_result(dev, 0, 1024 + 40, 0, psi0=2 * math.pi * 100 / 1024),
                     mode="dual_ouster")
    write_pcap(tmp_path, [r], ouster_profile="RNG19_RFL8_SIG16_NIR16_DUAL")
    assert "strongest return" not in capfd.readouterr().err  # every return is written: no note
    pkt = _packets(tmp_path / "scan.pcap")[0]
    assert len(pkt) == 32 + 16 * (12 + 64 * 16) + 32
    first, second = strongest_per_beam(r), second_strongest(r)
    assert first.size + second.size == len(r) and second.size > 1000
    # the bytes of the first packet's first valid column (status bit 0): beam k's two range words
    from blensor_addon.core.timebase import parse_start_time
    from blensor_addon.io.packets.ouster import DUAL, column_dtype
    blocks = np.frombuffer(pkt[32:-32], dtype=column_dtype(64, DUAL))
    valid = np.flatnonzero(blocks["status"] & 1)[0]
    # its column, from its scene time (the stamp less the default time base)
    t = (int(blocks["timestamp"][valid]) - parse_start_time(None)) * 1e-9
    g = int(round(t * dev.rotation_speed * dev.columns))
    raw = np.frombuffer(pkt[32:-32], np.uint8).reshape(16, 12 + 64 * 16)[valid, 12:].reshape(64, 16)
    words = raw[:, :8].copy().view("<u4")
    at = r.ray_index % r.grid_shape[1] == g
    for rows, w in ((first, 0), (second, 1)):
        sel = rows[at[rows]]
        k = r.channel[sel].astype(np.int64)
        assert sel.size and (words[:, w] > 0).sum() == sel.size
        want = np.round(r.range_noisy[sel].astype(np.float64) * 1000)
        assert np.array_equal(words[k, w] & 0x7FFFF, want)
        assert np.array_equal(words[k, w] >> 24, np.round(100 * r.reflectivity[sel].astype(np.float64)))
    if not DECODERS.exists():
        pytest.skip("the vendors' decoders (.venv-decoders) are absent")
    dec = decode("ouster", tmp_path / "scan.pcap", tmp_path / "scan.json", tmp_path / "dec.npz")
    assert str(dec["profile"]) == "RNG19_RFL8_SIG16_NIR16_DUAL"
    keys = ("timestamp", "azimuth", "elevation", "range", "range_noisy", "channel", "reflectivity")
    stats = compare_ouster(dev, {k: getattr(r, k)[first] for k in keys}, dec)  # RANGE: the strongest
    two = {k: dec[k] for k in dec}
    two["range"], two["reflectivity"] = dec["range2"], dec["reflectivity2"]
    # XYZLut places RANGE; RANGE2's point lies along the same beam (unit "direction"), further by the
    # difference of the two ranges
    two["xyz"] = dec["xyz"] + dec["direction"] * ((dec["range2"] - dec["range"]) / 1000.0)[..., None]
    stats2 = compare_ouster(dev, {k: getattr(r, k)[second] for k in keys}, two)  # RANGE2: the second
    print(f"OS1-64 dual: strongest {stats}, second strongest {stats2}")


def test_single_return_packets_of_a_multi_return_scan_carry_the_strongest(tmp_path, capfd):
    # a Velodyne in mode all, an Ouster in any multi-return mode: each beam's strongest return, said once
    dev = velodyne_device("HDL-32E")
    r = multi_result(synthetic_result(dev, 0, 120, 0), mode="all")
    write_pcap(tmp_path / "v", [r, multi_result(synthetic_result(dev, 120, 60, 1), mode="all")])
    err = capfd.readouterr().err
    assert err.count("single-return packets carry each beam's strongest return") == 1
    assert _packets(tmp_path / "v" / "scan.pcap")[0][1204] == 0x37
    if not DECODERS.exists():
        pytest.skip("the vendors' decoders (.venv-decoders) are absent")
    dec = decode("velodyne", tmp_path / "v" / "scan.pcap", tmp_path / "v" / "scan.yaml", tmp_path / "d.npz")
    from blensor_addon.io.packets import strongest_per_beam
    pick = strongest_per_beam(r)
    assert pick.size == len(np.unique(r.ray_index)) < len(r)
    t_end = r.timestamp.max() + 1e-6
    sel = dec["time"] <= t_end
    truth = {k: getattr(r, k)[pick] for k in ("timestamp", "azimuth", "elevation", "range", "range_noisy",
                                               "channel", "reflectivity")}
    compare_velodyne(dev, truth, {k: (v[sel] if np.ndim(v) else v) for k, v in dec.items()})
    odev = ouster_device()
    ro = multi_result(synthetic_result(odev, 0, 64, 0, psi0=2 * math.pi * 100 / 1024), mode="dual_ouster")
    write_pcap(tmp_path / "o", [ro])
    assert capfd.readouterr().err.count("OS1-64's single-return packets") == 1


# -- the settings in the CLI, the panel and the Blender properties ------------------------------------

BLENSOR = str(Path(sys.executable).parent / "blensor")
UNITS = {"wavelength": "nm", "beam_divergence": "rad", "beam_divergence_vertical": "rad",
         "focus_distance": "m",
         "echo_separation": "m", "fog_visibility": "m", "rain_rate": "mm/h"}


def _cli(*args, cwd=None):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_blensor_sensors_lists_return_physics_under_its_heading_with_units():
    res = _cli("sensors")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for stype in ("rotating", "line", "planar"):
        start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{stype}: "))
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
        block = lines[start:end]
        head = block.index("  Return physics:")
        own = [ln for ln in block[1:head] if not ln.startswith("  preset ")]
        assert own and all(ln.startswith("  ") and not ln.startswith("    ") for ln in own)
        physics = block[head + 1:]
        assert [ln.split()[0] for ln in physics] == [
            "wavelength", "beam_divergence", "beam_divergence_vertical", "focus_distance", "samples_per_beam",
            "divergence_algorithm", "returns", "max_returns", "echo_separation", "intensity_model", "weather",
            "fog_visibility", "rain_rate"]
        for ln in physics:
            name = ln.split()[0]
            assert ln.startswith("    ") and (f"{name} [{UNITS[name]}] = " in ln if name in UNITS
                                               else f"{name} = " in ln)
        text = "\n".join(physics)
        assert "beam_divergence [rad] = 0: " in text and "in [0, 0.0174533] rad" in text
        assert "samples_per_beam = 1: " in text and "an integer in [1, 64]" in text
        assert "rain_rate [mm/h] = 10: Rainfall rate; in [0, 500] mm/h (used with weather=rain)" in text
        assert "weather = none: " in text and "one of none, fog, rain" in text
    tof = lines[next(i for i, ln in enumerate(lines) if ln.startswith("tof: ")):]
    assert "  Return physics:" not in tof[:next(i for i in range(1, len(tof)) if not tof[i].startswith(" "))]


def test_set_accepts_the_return_settings_and_refuses_bad_values_in_one_line(tmp_path):
    # a 20 deg sector of one frame: quick; the settings reach the scan (the npz's settings record)
    res = _cli("scan", CROSSING, "--frames", "1", "--out", tmp_path / "o", "--set", "returns=dual", "--set",
               "beam_divergence=0.003", "--set", "samples_per_beam=7", "--set", "start_angle=0", "--set",
               "end_angle=20", "--quiet")
    assert res.returncode == 0, res.stderr
    import json
    with np.load(next((tmp_path / "o").glob("scan*.npz"))) as z:
        s = json.loads(str(z["sensor"]))
        assert (s["returns"], s["beam_divergence"], s["samples_per_beam"]) == ("dual", 0.003, 7)
        # several returns per beam: the result carries the return fields
        assert z["return_number"].dtype == np.uint8 and "number_of_returns" in z.files
    for setting, needle in (("samples_per_beam=0", "samples_per_beam must be an integer in [1, 64], got 0"),
                            ("weather=snow", "weather must be one of none, fog, rain, got 'snow'"),
                            ("beam_divergence=0.5", "beam_divergence must be in [0, 0.0174533] rad, got 0.5"),
                            ("rain_rate=-1", "rain_rate must be in [0, 500] mm/h, got -1.0"),
                            ("wavelength=100", "wavelength must be in [300, 2000] nm, got 100.0")):
        bad = _cli("scan", CROSSING, "--frames", "1", "--out", tmp_path / "b", "--set", setting)
        err = [ln for ln in bad.stderr.splitlines() if ln.strip()]
        assert bad.returncode == 2 and len(err) == 1 and needle in err[0], bad.stderr
        assert not (tmp_path / "b").exists()
    # a rule between settings: sub-rays with no divergence to sample
    bad = _cli("scan", CROSSING, "--frames", "1", "--out", tmp_path / "b", "--set", "samples_per_beam=4")
    assert bad.returncode == 2 and "samples_per_beam must be 1 while beam_divergence is 0" in bad.stderr


class _Layout:
    """A stand-in for Blender's UILayout that records what the panel draws."""

    def __init__(self, log, where="top"):
        self.log, self.where, self.use_property_split = log, where, False

    def prop(self, data, name, text=None, **kw):
        self.log.append((self.where, name, text))

    def label(self, text="", **kw):
        self.log.append((self.where, "label", text))

    def column(self, **kw):
        return self

    row = column

    def box(self):
        return _Layout(self.log, "box")

    def panel(self, idname, default_closed=False):
        return _Layout(self.log, idname + ":header"), _Layout(self.log, idname)

    def operator(self, *a, **kw):
        return None


def _draw(bpy, cam):
    from types import SimpleNamespace

    from blensor_addon.ui.panel import BLENSOR_PT_sensor
    log = []
    BLENSOR_PT_sensor.draw(SimpleNamespace(layout=_Layout(log)), SimpleNamespace(camera=cam.data))
    return log


@pytest.mark.parametrize("stype", ["rotating", "line", "planar"])
def test_panel_draws_return_physics_in_its_own_section_with_units_and_show_if(bpy_mod, empty_scene, stype):
    from conftest import add_camera
    cam = add_camera(bpy_mod)
    p = cam.data.blensor
    p.sensor_type = stype
    group = p if stype == "rotating" else getattr(p, stype)
    log = _draw(bpy_mod, cam)
    sec = "BLENSOR_PT_return_physics"
    assert (sec + ":header", "label", "Return physics") in log
    inside = [(name, text) for where, name, text in log if where == sec]
    assert ("beam_divergence", "Beam divergence (rad)") in inside
    assert ("wavelength", "Wavelength (nm)") in inside
    assert ("samples_per_beam", "Samples per beam") in inside and ("returns", "Returns") in inside
    names = [n for n, _ in inside]
    # show_if: max_returns with returns = all, fog_visibility with fog, rain_rate with rain only
    assert not {"max_returns", "fog_visibility", "rain_rate"} & set(names)
    # the sensor's own settings come first, outside the section
    top = [n for where, n, _ in log if where == "top"]
    assert "wavelength" not in top and top.index("sensor_type") == 0
    assert log.index(next(e for e in log if e[0] == sec)) > max(i for i, e in enumerate(log)
                                                                 if e[0] == "top" and e[1] in
                                                                 ("max_range", "rotation_speed"))
    group.returns, group.weather = "all", "rain"
    names = [n for where, n, _ in _draw(bpy_mod, cam) if where == sec]
    assert "max_returns" in names and "rain_rate" in names and "fog_visibility" not in names
    # Blender without layout panels (before 4.1): a box with the heading
    from types import SimpleNamespace

    from blensor_addon.ui.panel import BLENSOR_PT_sensor

    class NoPanel(_Layout):
        panel = property(lambda self: (_ for _ in ()).throw(AttributeError("panel")))
    log = []
    BLENSOR_PT_sensor.draw(SimpleNamespace(layout=NoPanel(log)), SimpleNamespace(camera=cam.data))
    assert ("box", "label", "Return physics") in log and ("box", "max_returns", "Max returns") in log


@pytest.mark.parametrize("stype", ["rotating", "line", "planar"])
def test_blender_properties_of_the_return_settings_reach_the_scan(bpy_mod, empty_scene, stype):
    import dataclasses

    from conftest import add_camera, add_mesh, quad

    from blensor_addon.core.sensors import SENSORS
    from blensor_addon.core.sensors.returns import RETURN_SETTINGS, ReturnSettings
    from blensor_addon.scene.scanner import read_sensor
    cam = add_camera(bpy_mod)
    p = cam.data.blensor
    p.sensor_type = stype
    group = p if stype == "rotating" else getattr(p, stype)
    sensor = SENSORS[stype]
    assert issubclass(sensor.Settings, ReturnSettings)
    # every return setting is a Blender property of its kind, at the dataclass default
    kinds = {"float": "FLOAT", "int": "INT", "enum": "ENUM"}
    for f in dataclasses.fields(sensor.Settings):
        if f.name not in RETURN_SETTINGS:
            continue
        meta = f.metadata["blensor"]
        rna = group.bl_rna.properties[f.name]
        assert rna.type == kinds[meta.kind], f.name
        assert getattr(group, f.name) == pytest.approx(f.default) if meta.kind == "float" else \
            getattr(group, f.name) == f.default
        if meta.kind == "enum":
            assert [i.identifier for i in rna.enum_items] == list(meta.choices)
        if meta.unit:
            assert f"({meta.unit})" in rna.description
    group.returns = "dual"
    group.beam_divergence = 0.003
    group.samples_per_beam = 7
    group.weather = "fog"
    group.fog_visibility = 250.0
    _, s = read_sensor(cam)
    assert (s.returns, s.samples_per_beam, s.weather) == ("dual", 7, "fog")
    assert s.beam_divergence == pytest.approx(0.003) and s.fog_visibility == 250.0 and s.multi_return
    # a scan of a wall in front of the sensor: the result is a multi-return one (the return
    # fields, the capabilities declaring them) and its settings record holds the values
    add_mesh(bpy_mod, "Wall", *quad(-30, 30, -30, 30, -10))
    from blensor_addon.scene.scanner import scan
    res = scan(cam, frame=1)
    assert len(res) > 100
    assert {"return_number", "number_of_returns"} <= set(res.extra)
    assert {"return_number", "number_of_returns"} <= set(res.capabilities.fields)
    assert res.sensor["returns"] == "dual" and res.sensor["samples_per_beam"] == 7
    group.samples_per_beam = 0  # out of range: the scan names the setting and its range
    from blensor_addon.core.errors import SettingsError
    with pytest.raises(SettingsError, match=r"samples_per_beam must be an integer in \[1, 64\]"):
        read_sensor(cam)



def test_a_file_saved_before_issue_22_loads_with_the_defaults_and_scans_as_before(bpy_mod, crossing):
    # issue 22, section 4 (settings version): the new settings' defaults keep an old file's behaviour,
    # so they need no upgrade step (version 3 is the ToF camera's and the vertical offsets'): the demo's
    # camera never stored them
    import dataclasses

    import blensor_addon
    from blensor_addon.core.sensors.returns import RETURN_SETTINGS, ReturnSettings
    from blensor_addon.scene.scanner import read_sensor
    from blensor_addon.ui.props import SETTINGS_VERSION
    cam = bpy_mod.data.objects["Velodyne"]
    p = cam.data.blensor
    assert SETTINGS_VERSION == 4 and p.settings_version == 4  # (4: the radiometric model, loaded upgraded)
    assert not any(p.is_property_set(n) for n in RETURN_SETTINGS)  # the file never stored them
    _, s = read_sensor(cam)
    defaults = {f.name: f.default for f in dataclasses.fields(ReturnSettings) if f.name in RETURN_SETTINGS}
    assert {n: getattr(s, n) for n in RETURN_SETTINGS} == defaults and not s.multi_return
    r = blensor_addon.scan(cam, frame=3)
    assert "return_number" not in r.extra and "return_number" not in r.capabilities.fields
    # the scan itself: byte for byte the pre-issue path's on opaque surfaces
    # (tests/test_return_physics.py, the demo without its glass pane)


def test_range_image_of_a_multi_return_result_keeps_the_strongest_return():
    # issue 22 review: range_image wrote every row into its cell, so the last (farthest)
    # return of each beam won; now each beam's strongest (io.packets.strongest_per_beam)
    from blensor_addon.io.formats.range_image import range_image
    from blensor_addon.io.packets import strongest_per_beam
    base = generic_result()
    res = multi_result(base)
    assert len(res) > len(base)
    pick = strongest_per_beam(res)
    assert pick.size == len(base)
    beam = res.ray_index.astype(np.int64)
    # the data must tell the two apart: beams whose strongest is the nearer return
    nearer = [i for i in pick if (beam == beam[i]).sum() == 2 and res.return_number[i] == 1]
    assert len(nearer) >= 3
    img = range_image(res)
    rows, cols = res.grid_shape
    cell = (rows - 1 - res.ring.astype(np.int64)) * cols + beam % cols
    flat = {k: img[k].ravel() for k in ("range", "intensity", "object_id")}
    np.testing.assert_array_equal(flat["range"][cell[pick]], res.range[pick].astype(np.float32))
    np.testing.assert_array_equal(flat["intensity"][cell[pick]], res.intensity[pick].astype(np.float32))
    np.testing.assert_array_equal(flat["object_id"][cell[pick]], res.object_id[pick])
    # a single-return result is unchanged: every row its own cell
    one = range_image(base)
    cell1 = (rows - 1 - base.ring.astype(np.int64)) * cols + base.ray_index.astype(np.int64) % cols
    np.testing.assert_array_equal(one["range"].ravel()[cell1], base.range.astype(np.float32))
