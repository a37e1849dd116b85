"""Decode a BlenSor pcap with the vendor's own tool and save what it gives as an npz.

Run in the decoder environment (``.venv-decoders``, ``tools/decoders.sh``: velodyne-decoder
and ouster-sdk, whose numpy 2 cannot share bpy's environment), by tests/test_pcap.py:

    .venv-decoders/bin/python tests/pcap_decode.py velodyne scan.pcap scan.yaml out.npz [BASE]
    .venv-decoders/bin/python tests/pcap_decode.py ouster scan.pcap scan.json out.npz [BASE]

BASE: the capture's time base, whole UNIX seconds (default 0), subtracted from velodyne's
times before they are saved (a float64 UNIX time in 2020 holds 0.24 us; the difference holds
the decoder's own float64 stamp to its rounding); ouster's integer ns are saved as read.

velodyne: every point of every scan velodyne-decoder returns (``read_pcap`` with the
calibration file, no range limits): x, y, z (m, REP-103), intensity, time (s since BASE:
the scan's stamp minus BASE plus the point's time), column, ring, return_type (velodyne-decoder's
ReturnMode: 1 strongest, 2 last, 3 both: a dual pair whose blocks hold the same return); and
``model``, the model the decoder detected from the packets' product id.
ouster: every LidarScan ouster-sdk reads (``PcapScanSource`` with the metadata): range
(mm), reflectivity, signal (staggered, rows = beams; of the dual-return profile also range2,
reflectivity2, signal2), the same three destaggered by
ouster-sdk's ``destagger`` with the metadata's ``pixel_shift_by_row`` (``*_destaggered``:
what ouster-ros publishes as an organized cloud), xyz (m, sensor frame, XYZLut), the beams'
unit directions, column timestamps (ns), measurement ids, frame ids and status.
"""
import sys

import numpy as np


def velodyne(pcap, calib, out, base=0):
    import velodyne_decoder as vd
    config = vd.Config()
    if calib != "-":  # "-": the model from the packets' product id, the decoder's bundled calibration
        config.calibration = vd.Calibration.read(calib)
    config.min_range = 0.0
    config.max_range = 1000.0
    config.timestamp_first_packet = True
    parts = []
    for stamp, points in vd.read_pcap(pcap, config):
        pts = np.asarray(points, dtype=np.float64)
        t0 = stamp.device if hasattr(stamp, "device") else float(stamp)
        pts[:, 4] += t0 - base
        parts.append(pts)
    pts = np.concatenate(parts) if parts else np.zeros((0, 8))
    model = ""
    np.savez(out, x=pts[:, 0], y=pts[:, 1], z=pts[:, 2], intensity=pts[:, 3], time=pts[:, 4],
             column=pts[:, 5].astype(np.int64), ring=pts[:, 6].astype(np.int64), scans=len(parts),
             model=str(model),
             return_type=pts[:, 7].astype(np.int64) if pts.shape[1] > 7 else np.zeros(len(pts), np.int64))


def ouster(pcap, meta, out):
    from ouster.sdk import core, open_source
    source = open_source(pcap, meta=[meta], collate=False)
    info = source.sensor_info[0]
    lut = core.XYZLut(info, use_extrinsics=False)
    staggered = ("range", "reflectivity", "signal")
    dual = ("range2", "reflectivity2", "signal2")  # the dual-return profile's second return
    fields = {k: [] for k in (*staggered, *(f"{k}_destaggered" for k in staggered), "xyz", "direction",
                              "timestamp", "measurement_id", "frame_id", "status")}
    for frames in source:
        scan = frames[0]
        if scan is None:
            continue
        rng = scan.field(core.ChanField.RANGE).astype(np.int64)
        fields["range"].append(rng)
        fields["reflectivity"].append(scan.field(core.ChanField.REFLECTIVITY).astype(np.int64))
        fields["signal"].append(scan.field(core.ChanField.SIGNAL).astype(np.int64))
        for k in staggered:
            fields[f"{k}_destaggered"].append(core.destagger(info, np.ascontiguousarray(fields[k][-1])))
        for k in dual:
            if k.upper() in scan.fields:
                fields.setdefault(k, []).append(scan.field(k.upper()).astype(np.int64))
        fields["xyz"].append(lut(scan))
        base = np.where(rng > 0, rng, 1000).astype(np.uint32)  # the beam's direction: 1 m further
        fields["direction"].append(lut(base + 1000) - lut(base))
        fields["timestamp"].append(np.asarray(scan.timestamp, dtype=np.uint64))
        fields["measurement_id"].append(np.asarray(scan.measurement_id, dtype=np.int64))
        fields["frame_id"].append(int(scan.frame_id))
        fields["status"].append(np.asarray(scan.status, dtype=np.int64))
    np.savez(out, profile=str(info.format.udp_profile_lidar), lidar_mode=str(info.config.lidar_mode),
             **{k: np.asarray(v) for k, v in fields.items()})


if __name__ == "__main__":
    kind, pcap, meta, out = sys.argv[1:5]
    if kind == "velodyne":
        velodyne(pcap, meta, out, int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        ouster(pcap, meta, out)
