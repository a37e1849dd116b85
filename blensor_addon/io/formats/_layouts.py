"""Point layouts of the vendors' ROS drivers, for the writers that reproduce what a real
unit's driver publishes (PointCloud2 in rosbag2, PCD). Chosen from the result's
capabilities (``capabilities.device.vendor``), never from the settings.

- **velodyne_pointcloud XYZIRT** (ros-drivers/velodyne, ROS 2:
  ``velodyne_pointcloud/src/lib/pointcloudXYZIRT.cpp``): x, y, z, intensity float32, ring
  uint16, time float32; 22 bytes a point, unorganized. Its time convention
  (:func:`velodyne_stamp`): the driver stamps a scan with its **last** data packet's
  stamp (``velodyne_driver/src/driver/driver.cpp``: ``scan->header.stamp =
  scan->packets.back().stamp``), the cloud takes that stamp, and a point's ``time`` is
  its firing offset within its packet plus its packet's stamp minus the scan's
  (``rawdata.cpp``: ``time = timing_offsets_[i][j] + time_diff_start_to_this_packet``):
  seconds relative to the **first firing of the scan's last data packet**, negative for
  every earlier packet. A data packet holds 384 / L columns of an L-laser unit (VLP-16:
  12 blocks x 2 firing sequences; HDL-32E, VLP-32C: 12; HDL-64E: 6; VLS-128: 3), and the
  packets start at global columns that are multiples of it, as the pcap writer's packets
  do (:func:`~..packets.velodyne.columns_per_packet`, :func:`~..packets.velodyne.packet_first_column`).
  ``intensity``: a Velodyne unit's is the packet's calibrated reflectivity byte, which
  velodyne_pointcloud publishes as it is (``round(100 x reflectivity)``, 0-100 for diffuse
  targets: :func:`~..packets.velodyne.velodyne_reflectivity_byte`); under the radiometric
  return model the byte of the range-compensated reflectivity (``signal x r^2``, so incidence
  shows) and a Hesai unit's its Reflectivity byte (:func:`unit_intensity`,
  :mod:`..packets.reported`), with the received power as a ``signal`` float32 field
  (:data:`SIGNAL`) after the others (not on a Velodyne unit's cloud); any other sensor's the
  0..1 intensity x 255, rounded.
  Other devices (generic) keep the message stamp at the packet's start, ``time`` >= 0.
- **ouster-ros Point** (ouster-lidar/ouster-ros ``include/ouster_ros/os_point.h``,
  ``EIGEN_ALIGN16``: x, y, z float32 at 0, 4, 8 (PCL_ADD_POINT4D pads to 16), intensity
  float32 at 16, t uint32 at 20, reflectivity uint16 at 24, ring uint16 at 26, ambient
  uint16 at 28, range uint32 at 32; 48 bytes a point), organized as the driver publishes
  it (``src/point_cloud_compose.h`` ``scan_to_cloud_f``, ``organized`` and ``destagger``
  on, its defaults): height = beams, width = columns, row u = beam u (``ring = u``, the
  top beam first); column v of row u holds measurement column ``(v - pixel_shift_by_row[u])
  mod w`` (destaggered: a column is one azimuth); a cell with no return has NaN x, y, z
  (``point_cloud_processor.h``: ``cartesianT(..., quiet_NaN)``) and zeros in range,
  reflectivity, intensity (``is_dense`` false). ``t`` = ns since the scan's first column
  (``ts = timestamp[col] - scan_ts``, 0 if earlier), the message stamp. Values, those of
  the unit's packets (:mod:`..packets.ouster`): intensity = the packets' signal,
  ``round(100 x intensity)`` (:func:`~..packets.ouster.ouster_signal`), or under the
  radiometric return model the signal photons (:func:`~..packets.reported.ouster_signal_photons`);
  reflectivity = Ouster's calibrated reflectivity, ``round(100 x reflectivity)``, 0-100 for
  a diffuse target (:func:`~..packets.ouster.ouster_reflectivity`; range-compensated under the
  radiometric model); ambient the ambient photons of ``extra["near_ir"]``, else 0 (no ambient
  light model); range = the range in mm (:func:`~..packets.ouster.ouster_range_mm`). The
  shifts are the metadata's
  (:func:`~..packets.ouster.pixel_shift_by_row`), so the cloud is ouster-sdk's destaggered
  decode of the pcap writer's packets.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from ...core.axes import sensor_points
from ...core.capabilities import Device
from ...core.ndtypes import F32, F64, I64, Floating, Integer
from ...core.result import ScanResult
from ..packets import has_returns, strongest_per_beam
from ..packets.ouster import ouster_range_mm, ouster_reflectivity, ouster_signal, pixel_shift_by_row
from ..packets.reported import (
    has_signal,
    hesai_reflectivity_byte,
    ouster_near_ir,
    ouster_signal_photons,
    unit_reflectivity,
    velodyne_full_scale,
)
from ..packets.velodyne import is_dual, packet_first_column, velodyne_reflectivity_byte
from ._base import Records, capabilities_of

#: a PointField of a layout: (name, byte offset, datatype)
PointField = tuple[str, int, int]
#: PointField datatypes (sensor_msgs/PointField)
FLOAT32, UINT32, UINT16, UINT8 = 7, 6, 4, 2
_NP = {FLOAT32: "<f4", UINT32: "<u4", UINT16: "<u2", UINT8: "u1"}
_SIZE = {FLOAT32: 4, UINT32: 4, UINT16: 2, UINT8: 1}

#: velodyne_pointcloud XYZIRT: (name, offset, datatype)
XYZIRT = (("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, FLOAT32),
          ("ring", 16, UINT16), ("time", 18, FLOAT32))
#: ouster-ros ouster_ros::Point: (name, offset, datatype), 48 bytes
OUSTER = (("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 16, FLOAT32),
          ("t", 20, UINT32), ("reflectivity", 24, UINT16), ("ring", 26, UINT16), ("ambient", 28, UINT16),
          ("range", 32, UINT32))
#: per-point labels appended when asked: object id, instancer id, instance index, class
LABELS = (("object_id", UINT32), ("instancer_id", UINT32), ("instance_id", UINT32), ("semantic", UINT16))
#: the return fields appended to the generic layout of a result with several returns per beam
#: (``returns`` dual, dual_ouster, all): the return's 1-based rank along its beam and the
#: beam's returns (LAS's terms)
RETURNS = (("return_number", UINT8), ("number_of_returns", UINT8))
#: the received power of each return (relative units: 1 = a 100 % Lambertian target at normal
#: incidence at 1 m), appended to the XYZIRT layout of a result of the radiometric return model
#: that is not a Velodyne unit's (whose XYZIRT stays velodyne_pointcloud's)
SIGNAL = (("signal", FLOAT32),)


def layout(fields: Iterable[PointField], step: int, labels: bool = False,
           returns: bool = False, signal: bool = False) -> tuple[tuple[PointField, ...], np.dtype[np.void]]:
    """``(fields, dtype)``: the PointField triples (name, offset, datatype) and the numpy
    record dtype of a layout of ``step`` bytes, with :data:`RETURNS` (two uint8 at
    ``step`` and ``step + 1``) when ``returns``, then :data:`SIGNAL` (float32) when
    ``signal``, then :data:`LABELS` appended after them (packed; the step rounded up to 4
    bytes when any is appended)."""
    fields = list(fields)
    off = step
    for name, dt in ((RETURNS if returns else ()) + (SIGNAL if signal else ())
                     + (LABELS if labels else ())):
        fields.append((name, off, dt))
        off += _SIZE[dt]
    if returns or labels or signal:
        step = -(-off // 4) * 4
    dtype = np.dtype({"names": [f[0] for f in fields], "formats": [_NP[f[2]] for f in fields],
                      "offsets": [f[1] for f in fields], "itemsize": step})
    return tuple(fields), dtype


def device_of(result: ScanResult) -> Device | None:
    """The result's :class:`~blensor_addon.core.capabilities.Device`, or None."""
    return capabilities_of(result).device


def is_ouster(result: ScanResult) -> bool:
    """The result is an Ouster unit's with a ray grid (the ouster-ros layout applies)."""
    dev = device_of(result)
    return dev is not None and dev.vendor == "ouster" and result.has_grid


def _labels(rec: Records, result: ScanResult, rows: slice | Integer = slice(None),
            pick: slice | Integer = slice(None)) -> None:
    for name, _ in LABELS:
        rec[name][rows] = getattr(result, name)[pick]


def first_column(result: ScanResult) -> tuple[int, float] | None:
    """``(g0, dt)``: the global index of the packet's first grid column (columns counted
    from t = 0, one every ``dt`` s) and the column period ``dt`` (s), from the device
    (``columns`` a turn at ``rotation_speed``: ``dt = 1 / (columns * rotation_speed)``,
    the first column firing at or after the packet's start) or else the capabilities'
    sweep timing; None for a sensor that does not sweep."""
    start = float(result.frame * result.frame_time)
    caps = capabilities_of(result)
    dev = caps.device
    if dev is not None and dev.columns and dev.rotation_speed:
        dt = 1.0 / (float(dev.columns) * float(dev.rotation_speed))
        return int(np.ceil(start / dt - 1e-9)), dt
    if caps.timing.kind == "sweep" and caps.grid is not None and caps.timing.period:
        count = int(caps.grid[1])
        return caps.timing.first_column(count, start), float(caps.timing.period) / count
    return None


def velodyne_stamp(result: ScanResult) -> float:
    """The message stamp (s) velodyne_pointcloud gives the packet's points (see the module
    docstring): the firing time of the first column of the last data packet, the one
    holding the packet's last column, data packets starting at multiples of ``384 /
    lasers`` global columns (:func:`~..packets.velodyne.packet_first_column`, as the pcap
    writer's; :func:`first_column` numbers the columns); the packet's start (``frame *
    frame_time``) for a result that is not a Velodyne's swept grid."""
    start = float(result.frame * result.frame_time)
    dev = device_of(result)
    cols = first_column(result) if dev is not None and dev.vendor == "velodyne" and result.has_grid else None
    if cols is None or not result.grid_shape[1]:
        return start
    g0, dt = cols
    g_last = g0 + result.grid_shape[1] - 1
    return float(packet_first_column(g_last, int(result.grid_shape[0]), is_dual(result)) * dt)


def is_velodyne(result: ScanResult) -> bool:
    """The result is a Velodyne unit's (``capabilities.device.vendor == "velodyne"``)."""
    dev = device_of(result)
    return dev is not None and dev.vendor == "velodyne"


def unit_intensity(result: ScanResult) -> F32 | None:
    """(N,) float32: the intensity a unit's driver publishes of each return, or None for a
    sensor whose driver layout BlenSor does not write (its float intensity is written):

    - a Velodyne unit: its calibrated reflectivity byte, the byte in its packets
      (:func:`~..packets.velodyne.velodyne_reflectivity_byte` of
      :func:`~..packets.reported.unit_reflectivity`: ``round(100 x reflectivity)`` of the
      material's reflectivity, or under the radiometric return model of the range-compensated
      one, on the model's scale, :func:`~..packets.reported.velodyne_full_scale`);
    - a Hesai unit under the radiometric model: its Reflectivity byte (default linear
      mapping, :func:`~..packets.reported.hesai_reflectivity_byte` of the range-compensated
      reflectivity), which its ROS driver publishes as the point's intensity."""
    dev = device_of(result)
    if dev is None:
        return None
    radiometric = has_signal(result)
    if dev.vendor == "velodyne":
        scale = velodyne_full_scale(dev.model, radiometric)
        return velodyne_reflectivity_byte(unit_reflectivity(result), scale).astype(np.float32)
    if dev.vendor == "hesai" and radiometric:
        return hesai_reflectivity_byte(unit_reflectivity(result)).astype(np.float32)
    return None


def xyzirt_intensity(result: ScanResult) -> F32:
    """(N,) float32 ``intensity`` of the XYZIRT points (and of the PCD points of a
    Velodyne unit, or of a Hesai unit under the radiometric return model): the unit's byte
    as its driver publishes it (:func:`unit_intensity`); any other sensor's 0..1 intensity
    x 255, rounded (an 8-bit value)."""
    unit = unit_intensity(result)
    if unit is not None:
        return unit
    scaled: Floating = np.round(np.clip(result.intensity, 0.0, 1.0) * 255.0)
    return scaled.astype(np.float32)


def xyzirt(result: ScanResult, noisy: bool, stamp: float,
           labels: bool = False) -> tuple[tuple[PointField, ...], Records]:
    """``(fields, records)``: the (N,) XYZIRT records of ``result`` (REP-103 sensor frame,
    points at their firing time), ``time`` = timestamp - ``stamp`` s; intensity:
    :func:`xyzirt_intensity`; ring = ``result.ring``. A result with several returns per
    beam (:func:`has_returns`) that is not a Velodyne unit's gets ``return_number`` and
    ``number_of_returns`` (uint8 at offsets 22 and 23, 24 bytes a point, the labels after
    them); a Velodyne unit's keeps velodyne_pointcloud's 22-byte XYZIRT, which has no return
    field: every return is a point of its own, as the driver publishes both blocks of a dual
    return pair (module docstring). A result of the radiometric return model (``signal``) that
    is not a Velodyne unit's gets :data:`SIGNAL` after them (float32)."""
    returns = has_returns(result) and not is_velodyne(result)
    signal = result.extra.get("signal") if not is_velodyne(result) else None
    fields, dtype = layout(XYZIRT, 22, labels, returns, signal is not None)
    rec = np.zeros(len(result), dtype)
    if returns:
        rec["return_number"] = result.return_number
        rec["number_of_returns"] = result.number_of_returns
    if signal is not None:
        rec["signal"] = signal
    p = sensor_points(result, noisy, "ros")
    rec["x"], rec["y"], rec["z"] = p[:, 0], p[:, 1], p[:, 2]
    rec["intensity"] = xyzirt_intensity(result)
    rec["ring"] = result.ring
    rec["time"] = result.timestamp - stamp
    if labels:
        _labels(rec, result)
    return fields, rec


def pixel_shifts(result: ScanResult) -> I64 | None:
    """(rows,) int64 ``pixel_shift_by_row`` of the Ouster unit, the ones its metadata
    (the pcap writer's ``scan.json``) gives: :func:`~..packets.ouster.pixel_shift_by_row`
    (the table's, else the shift that puts every beam's measurement of one azimuth into
    one column, smallest 0); zeros when the table's beams are not the grid's rows; None
    when the packet is not one whole turn (destaggering needs the full ring of columns)."""
    dev = device_of(result)
    assert dev is not None  # an Ouster unit's result (is_ouster)
    rows, cols = result.grid_shape
    grid = cast("tuple[int, int]", capabilities_of(result).grid)  # an Ouster unit has a grid
    turn = int(round(float(dev.columns))) if dev.columns else grid[1]
    if cols != turn:
        return None
    if dev.table.lasers != rows:
        return np.zeros(rows, np.int64)
    return pixel_shift_by_row(dev.table, cols, dev.direction)


def column_times(result: ScanResult) -> F64:
    """(cols,) float64 s: firing time of each column of the packet's grid: the returns'
    own times where a column has one (all beams of an Ouster column fire at its time),
    else from the column numbering (:func:`first_column`)."""
    rows, cols = result.grid_shape
    first = first_column(result)
    if first is not None:
        out = (first[0] + np.arange(cols)) * first[1]
    else:
        out = np.full(cols, float(result.frame * result.frame_time))
    if len(result):
        assert result.ray_index is not None  # a result with a grid
        out[result.ray_index.astype(np.int64) % cols] = result.timestamp
    return out


def ouster_cloud(result: ScanResult, points: F64, stamp: float, noisy: bool, labels: bool = False,
                 pick: Integer | None = None) -> tuple[tuple[PointField, ...], Records, int, int]:
    """``(fields, records, height, width)``: the organized ouster-ros cloud of an Ouster
    result (see the module docstring); ``points`` (N, 3) float64 the returns' coordinates
    (the caller's frame), ``stamp`` s the message stamp (``t`` counts from it). Records
    are row-major: (height * width,). ``pick``: the rows placed, at most one a beam (default
    each beam's strongest return, :func:`~..packets.strongest_per_beam`; ouster-ros's second
    cloud ``points2``: :func:`~..packets.second_strongest`)."""
    fields, dtype = layout(OUSTER, 48, labels)
    rows, cols = result.grid_shape
    rec = np.zeros(rows * cols, dtype)
    for k in ("x", "y", "z"):
        rec[k] = np.nan
    u = np.repeat(np.arange(rows, dtype=np.int64), cols)
    src_col = np.tile(np.arange(cols, dtype=np.int64), rows)
    shifts = pixel_shifts(result)
    if shifts is not None:  # cloud column v of row u holds measurement column (v - shift_u) mod w
        src_col = np.mod(src_col - shifts[u], cols)
    rec["ring"] = u
    ts = column_times(result)[src_col]
    rec["t"] = np.round(np.clip(ts - stamp, 0.0, None) * 1e9).astype(np.uint64)
    # the cell of every return: its row, and the column it is shown in; one return a cell
    # (a multi-return result: each beam's strongest, :func:`strongest_per_beam`)
    if pick is None:
        pick = strongest_per_beam(result)
    assert result.ray_index is not None  # a result with a grid
    ri = result.ray_index.astype(np.int64)[pick]
    r, c = ri // cols, ri % cols
    if shifts is not None:
        c = np.mod(c + shifts[r], cols)
    cell = r * cols + c
    points = points[pick]
    rec["x"][cell], rec["y"][cell], rec["z"][cell] = points[:, 0], points[:, 1], points[:, 2]
    signal = result.extra.get("signal")
    if signal is None:
        rec["intensity"][cell] = ouster_signal(result.intensity[pick])
    else:
        dev = device_of(result)
        assert dev is not None  # an Ouster unit's result (is_ouster)
        rec["intensity"][cell] = ouster_signal_photons(signal[pick], dev.model)
    rec["reflectivity"][cell] = ouster_reflectivity(unit_reflectivity(result)[pick])
    near_ir = result.extra.get("near_ir")
    if near_ir is not None:
        rec["ambient"][cell] = ouster_near_ir(near_ir[pick], len(cell))
    rng = result.range_noisy if noisy else result.range
    rec["range"][cell] = ouster_range_mm(rng[pick])
    if labels:
        _labels(rec, result, cell, pick)
    return fields, rec, rows, cols


__all__ = ["XYZIRT", "OUSTER", "LABELS", "RETURNS", "SIGNAL", "has_returns", "strongest_per_beam", "layout",
           "is_ouster", "is_velodyne", "device_of", "first_column", "velodyne_stamp", "xyzirt",
           "xyzirt_intensity", "unit_intensity", "pixel_shifts", "column_times", "ouster_cloud"]
