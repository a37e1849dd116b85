"""A ROS 2 bag (rosbag2, MCAP by default or sqlite3) through the ``rosbags`` library.

Folder ``rosbag2/`` (written under a temporary name, renamed when the run ends; a
cancelled run's bag holds its finished frames). REP-103 axes throughout. Frames (names
are options): ``odom`` (Blender's world, ENU) -> ``base_link`` (the vehicle; option
``base_to_sensor`` places the sensor on it, identity by default) -> ``blensor_sensor``
(the sensor, x ahead, y left, z up) -> ``blensor_optical``. Every stamp (message headers,
``/clock``, the bag's log times) is the run's time base (``--start-time``, default
2020-01-01T00:00:00Z: :mod:`blensor_addon.core.timebase`) plus simulated time (scene frame x
frame time), to the nanosecond; never 0, which tf2 reads as "latest" and rosbags 0.9.23's
MCAP reader skipped. Topics:

- ``/clock`` ``rosgraph_msgs/Clock``: the simulated time, once per frame (and at the
  last packet's end), for ``use_sim_time`` nodes (``ros2 bag play`` replays it).
- ``/tf_static`` ``tf2_msgs/TFMessage``: base_link -> sensor and sensor -> optical,
  once, offered with tf2_ros's static QoS (reliable, transient local, keep last 1: in
  ``metadata.yaml``'s ``offered_qos_profiles``), so ``ros2 bag play`` offers it to late
  subscribers as a static broadcaster does.
- ``/tf``: odom -> base_link at every frame's start, and at the last packet's end.
- ``/blensor/points`` ``sensor_msgs/PointCloud2`` as the unit's driver publishes it
  (:mod:`._layouts`): an Ouster unit's in ouster-ros's ``ouster_ros::Point`` layout
  (x, y, z, intensity float32 (the packets' signal), t uint32 ns, reflectivity, ring,
  ambient uint16, range uint32 mm; 48 bytes), organized (height = beams, width = columns, NaN where nothing
  returned), stamped at the packet's start, ``t`` from it; every other sensor in
  velodyne_pointcloud's XYZIRT (x, y, z, intensity float32: a Velodyne unit's calibrated
  reflectivity byte, the one in its packets, others' 0..1 intensity x 255,
  ring uint16, time float32 s; 22 bytes), where a Velodyne unit's message is stamped at
  the first firing of its last data packet and ``time`` is relative to that (negative
  for the earlier packets), as velodyne_pointcloud does; other sensors' at the packet's
  start, ``time`` >= 0. Option ``labels``: the per-point labels object_id, instancer_id,
  instance_id (uint32) and semantic (uint16) appended to each point. Option
  ``points``: ``noisy`` (default) or ``clean``. Several returns per beam (the
  settings ``returns`` dual, dual_ouster, all): a sensor that is not a Velodyne or Ouster
  unit gets ``return_number`` and ``number_of_returns`` (uint8, offsets 22 and 23, 24 bytes a
  point; the labels follow at 24); a Velodyne unit's XYZIRT stays velodyne_pointcloud's 22
  bytes with every return a point of its own (the driver publishes both blocks of a dual
  pair as points and has no return field); an Ouster unit's organized cloud holds each
  beam's strongest return, and ``/blensor/points2`` (the same layout, NaN where a beam has
  none) its second strongest, as ouster-ros publishes ``points`` and ``points2`` with the
  dual-return profile.
- ``/blensor/scan`` ``sensor_msgs/LaserScan`` for sensors with one scan plane whose
  capabilities give its column angles (planar scanners with one plane, a rotating LiDAR
  with one laser at elevation 0 over a whole turn; seed 004's "Laser-Scan Output"): one
  message per sweep (or part of a sweep) in the frame, ranges over every angle step with
  +inf where nothing returned (REP-117), angle and time increments from the sweep,
  ``range_min`` / ``range_max`` the sensor's ``min_range`` / ``max_range``
  (:mod:`blensor_addon.io.laserscan_msg`).
- ``/blensor/depth/image`` ``sensor_msgs/Image`` (32FC1, planar depth z in m, NaN where
  nothing returned) and ``/blensor/depth/camera_info`` ``sensor_msgs/CameraInfo`` for
  image sensors (organized results with intrinsics: ToF, Kinect, depth camera), frame
  ``blensor_optical`` (x right, y down, z ahead).
- ``/blensor/odom`` ``nav_msgs/Odometry``: the ground-truth pose of base_link in odom,
  with the twist (in base_link) from the pose change since the previous frame (the first
  message: over its own packet, in continuous time).

A rig (several sensors in one run) writes one bag for all its
sensors (:class:`RigBag`): each sensor's messages on its own topics
``/blensor/<name>/points`` (``points2``, ``scan``, ``depth/image``,
``depth/camera_info``) in its frame ``<name>`` (an image sensor's depth in
``<name>_optical``), ``/tf_static`` once with base_link -> every sensor (its extrinsics)
and sensor -> optical, and ``/clock``, ``/tf`` (odom -> base_link) and ``/blensor/odom``
once per packet start newer than the last written, the base's pose from whichever sensor's
packet starts then (``base = sensor_to_world @ inverse(base_to_sensor)``; the sensors of
a rig report the same).
"""
from __future__ import annotations

import functools
import math
import os
import re
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ...core.axes import (ROS_FROM_BLENSOR, quaternion_xyzw, ros_pose, ros_sensor_pose, rotation_vector,
                          rpy_matrix, sensor_points)
from ...core.errors import SettingsError
from ...core.ndtypes import F64, Floating, Integer
from ...core.result import ScanResult
from ...core.settings import setting
from ...core.timebase import parse_start_time, stamp_ns
from ..extrinsics import check_extrinsics
from ..laserscan_msg import laser_scans
from ._base import RunInfo, Writer, capabilities_of
from ..packets import has_returns, second_strongest
from ._layouts import is_ouster, ouster_cloud, velodyne_stamp, xyzirt

if TYPE_CHECKING:  # rosbags is imported when a bag is written
    from rosbags.interfaces import Connection, Qos
    from rosbags.rosbag2 import Writer as BagWriter
    from rosbags.typesys.store import MsgType, Typestore

SENSOR_FRAME = "blensor_sensor"
OPTICAL_FRAME = "blensor_optical"
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"
#: optical frame (x right, y down, z ahead) in the REP-103 sensor frame
ROS_FROM_OPTICAL = ROS_FROM_BLENSOR @ np.diag([1.0, -1.0, -1.0])


#: (stamp s, (4, 4) float64 base pose in odom)
StampedPose = tuple[float, F64]


@functools.lru_cache(maxsize=None)
def typestore() -> Typestore:
    """The ROS 2 Humble type store of every bag of this process. ``rosbags`` generates a
    message type's serializer on its first use in a store and keeps it there; one store
    per bag generated them again for every bag (13 ms of a one-frame bag's 30 ms)."""
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_HUMBLE)


def _frame_name_ok(name: str) -> bool:
    """A tf2 frame id: non-empty, no whitespace, no leading ``/`` (tf2 refuses it)."""
    return bool(name) and not name.startswith("/") and not any(c.isspace() for c in name)


def static_qos() -> Qos:
    """tf2_ros's static broadcaster QoS (``StaticBroadcasterQoS``: keep last 1, reliable,
    transient local; deadline, lifespan and lease infinite, as rosbag2 records them) as
    a ``rosbags`` Qos."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
    forever = QosTime(9223372036, 854775807)
    return Qos(QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, forever,
               forever, QosLiveliness.AUTOMATIC, forever, False)


def mount_matrix(xyzrpy: Iterable[float]) -> F64:
    """(4, 4) float64 pose of the sensor in base_link from (x, y, z m, roll, pitch, yaw
    deg): ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (REP-103 fixed-axis roll, pitch, yaw)."""
    x, y, z, r, p, w = (float(v) for v in xyzrpy)
    T = np.eye(4)
    T[:3, :3] = rpy_matrix(math.radians(r), math.radians(p), math.radians(w))  # (core/axes.py)
    T[:3, 3] = (x, y, z)
    return T


@dataclass(frozen=True)
class Rosbag2Options:
    """Options of the rosbag2 writer: ``storage`` (``mcap`` or ``sqlite3``), ``points``
    (``noisy`` or ``clean``), ``labels`` (per-point labels in PointCloud2), the frame
    names ``odom_frame``, ``base_frame``, ``sensor_frame`` and ``base_to_sensor`` (x, y,
    z m, roll, pitch, yaw deg: the sensor's pose on base_link, the static transform).

    Raises (constructor): SettingsError (``rosbag2.<option>``) for a frame name that is
    empty, holds whitespace, starts with ``/`` or repeats another."""

    storage: str = setting("mcap", "Bag storage", "rosbag2 storage plugin", choices=("mcap", "sqlite3"))
    points: str = setting("noisy", "Bag points", "Which points go into PointCloud2", choices=("noisy", "clean"))
    labels: bool = setting(False, "Bag labels", "Per-point labels (object_id, instancer_id, instance_id, "
                           "semantic) in PointCloud2")
    odom_frame: str = setting(ODOM_FRAME, "Odometry frame", "tf frame of the world (the odometry origin)")
    base_frame: str = setting(BASE_FRAME, "Base frame", "tf frame of the vehicle carrying the sensor")
    sensor_frame: str = setting(SENSOR_FRAME, "Sensor frame", "tf frame of the sensor (the points' frame_id)")
    base_to_sensor: tuple[float, ...] = setting((0.0, 0.0, 0.0, 0.0, 0.0, 0.0), "Sensor mount",
                                                "The sensor's pose on the base frame: x, y, z (m), roll, "
                                                "pitch, yaw (deg)", lo=-1e4, hi=1e4, count=(6, 6))

    def __post_init__(self) -> None:
        names: dict[str, str] = {}
        for opt in ("odom_frame", "base_frame", "sensor_frame"):
            v = getattr(self, opt)
            if not _frame_name_ok(v) or v in names or v == OPTICAL_FRAME:
                raise SettingsError(f"rosbag2.{opt}", "a tf frame id: not empty, no spaces, no leading '/', "
                                    f"other than the other frames' ({', '.join(names) or OPTICAL_FRAME})", v)
            names[v] = opt


#: a ROS 2 name token (a topic's namespace part, a tf frame id of a rig's sensor): a letter
#: or ``_`` first, then letters, digits and ``_``, no ``__``, not ending in ``_`` (the
#: ROS 2 topic name rules: "must not start with a numeric character", "must not contain any
#: number of repeated underscores")
_ROS_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def ros_name_ok(name: object) -> bool:
    """Whether ``name`` is a ROS 2 name token (:data:`_ROS_TOKEN`): usable as a topic
    namespace ``/blensor/<name>/...`` and a tf frame id."""
    return (isinstance(name, str) and bool(_ROS_TOKEN.match(name)) and "__" not in name
            and not name.endswith("_"))


def ros_names(names: Iterable[object],
              reserved: Iterable[str] = (ODOM_FRAME, BASE_FRAME)) -> list[str]:
    """ROS 2 name tokens for ``names`` (Blender object names: ``"VLP-16 Left"`` ->
    ``"vlp_16_left"``), in order, all different and none in ``reserved``: lower case, each
    run of characters other than letters and digits one ``_``, no ``_`` at either end, a
    leading digit prefixed with ``sensor_``, ``sensor`` for an empty result; a name
    already given gets ``_2``, ``_3``, ... (deterministic: the same names give the same
    tokens)."""
    out: list[str] = []
    taken = set(reserved)
    for name in names:
        base = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_") or "sensor"
        if base[0].isdigit():
            base = "sensor_" + base
        token, k = base, 1
        while token in taken or token + "_optical" in taken:
            k += 1
            token = f"{base}_{k}"
        taken.update((token, token + "_optical"))
        out.append(token)
    return out


def base_pose(result: ScanResult, sensor_to_base: F64) -> F64:
    """(4, 4) float64 pose of the base (base_link) in odom at the packet's start: the
    sensor's REP-103 world pose times ``sensor_to_base`` (the inverse of the sensor's
    mount)."""
    return ros_sensor_pose(result) @ sensor_to_base


def base_pose_end(result: ScanResult, sensor_to_base: F64) -> StampedPose | None:
    """(stamp s, (4, 4) base pose) at the packet's end in continuous time, else None."""
    if result.sensor_to_world_end is None:
        return None
    Te = np.array(result.sensor_to_world_end, dtype=np.float64)
    return (float(result.frame * result.frame_time) + float(result.frame_time),
            (ros_pose(Te) if result.axes == "blensor" else Te) @ sensor_to_base)


class BagFile:
    """One rosbag2 being written: ``folder/.rosbag2.<pid>.<random>.part/rosbag2`` until
    :meth:`finish` renames it to ``folder/rosbag2`` (an earlier run's bag there is
    replaced whole), and the messages of the module docstring, built with the Humble type
    store. Options: :class:`Rosbag2Options` (storage, points, labels, odom and base
    frames); ``start_ns``: the time base (UNIX ns of scene time 0; None: the default), added
    to every stamp given in scene seconds. Used by :class:`Rosbag2Writer` (one sensor) and
    :class:`RigBag` (several).

    Attributes:
        threaded: the bag may be written from another thread than the one that made it
            (MCAP: yes; sqlite3: no, a connection stays in its thread).
    """

    def __init__(self, folder: str | os.PathLike[str], options: Rosbag2Options,
                 start_ns: int | None = None) -> None:
        from rosbags.rosbag2 import StoragePlugin
        from rosbags.rosbag2 import Writer as BagWriter
        self.folder = Path(folder)
        self.options = options
        self.start_ns = parse_start_time(None) if start_ns is None else int(start_ns)
        self.ts = typestore()
        self.T = self.ts.types
        self.tmp = self.folder / f".rosbag2.{os.getpid()}.{secrets.token_hex(8)}.part"
        self.tmp.mkdir()
        plugin = StoragePlugin.MCAP if options.storage == "mcap" else StoragePlugin.SQLITE3
        self.threaded = options.storage == "mcap"  # a sqlite3 connection stays in its thread
        self.bag: BagWriter = BagWriter(self.tmp / "rosbag2", version=8, storage_plugin=plugin)
        self.bag.open()
        self._conns: dict[str, Connection] = {}

    # -- messages -------------------------------------------------------------------------
    def conn(self, topic: str, msgtype: str) -> Connection:
        """The bag's connection of ``topic`` (added on its first message; ``/tf_static``
        with tf2_ros's static QoS)."""
        if topic not in self._conns:
            qos = [static_qos()] if topic == "/tf_static" else []
            self._conns[topic] = self.bag.add_connection(topic, msgtype, typestore=self.ts,
                                                         offered_qos_profiles=qos)
        return self._conns[topic]

    def put(self, topic: str, msg: MsgType, stamp: float) -> None:
        """Write ``msg`` on ``topic`` at scene time ``stamp`` s (the log time: the time base
        plus ``stamp``, ns rounded)."""
        msgtype = msg.__msgtype__
        self.bag.write(self.conn(topic, msgtype), stamp_ns(self.start_ns, stamp),
                       self.ts.serialize_cdr(msg, msgtype))

    def header(self, stamp: float, frame_id: str) -> MsgType:
        """``std_msgs/Header`` at scene time ``stamp`` s (the time base plus it, ns rounded)
        in ``frame_id``."""
        ns = stamp_ns(self.start_ns, stamp)
        return self.T["std_msgs/msg/Header"](stamp=self.T["builtin_interfaces/msg/Time"](
            sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id=frame_id)

    def transform(self, T: Floating, stamp: float, parent: str, child: str) -> MsgType:
        """``geometry_msgs/TransformStamped`` of the (4, 4) pose ``T`` of ``child`` in ``parent``."""
        G = self.T
        x, y, z, w = quaternion_xyzw(T[:3, :3])
        tr = G["geometry_msgs/msg/Transform"](
            translation=G["geometry_msgs/msg/Vector3"](x=float(T[0, 3]), y=float(T[1, 3]), z=float(T[2, 3])),
            rotation=G["geometry_msgs/msg/Quaternion"](x=x, y=y, z=z, w=w))
        return G["geometry_msgs/msg/TransformStamped"](
            header=self.header(stamp, parent), child_frame_id=child, transform=tr
        )

    def tf(self, topic: str, transforms: list[MsgType], stamp: float) -> None:
        """A ``tf2_msgs/TFMessage`` of ``transforms`` on ``topic`` (``/tf``, ``/tf_static``)."""
        self.put(topic, self.T["tf2_msgs/msg/TFMessage"](transforms=transforms), stamp)

    def points(self, result: ScanResult, stamp: float, frame_id: str,
               pick: Integer | None = None) -> tuple[float, MsgType]:
        """``(stamp, PointCloud2)`` of the packet in its driver's layout (see the module
        docstring; ``stamp``: the packet's start, s; ``pick``: an Ouster cloud's rows, see
        :func:`._layouts.ouster_cloud`)."""
        noisy = self.options.points == "noisy"
        labels = self.options.labels
        PF = self.T["sensor_msgs/msg/PointField"]
        if is_ouster(result):
            pts = sensor_points(result, noisy, "ros")
            fields, rec, height, width = ouster_cloud(result, pts, stamp, noisy, labels, pick)
            dense = bool(np.isfinite(rec["x"]).all())  # a cell with no return holds NaN
        else:
            stamp = velodyne_stamp(result)
            fields, rec = xyzirt(result, noisy, stamp, labels)
            height, width, dense = 1, len(rec), True
        step = rec.dtype.itemsize
        return stamp, self.T["sensor_msgs/msg/PointCloud2"](
            header=self.header(stamp, frame_id), height=height, width=width,
            fields=[PF(name=n, offset=o, datatype=d, count=1) for n, o, d in fields], is_bigendian=False,
            point_step=step, row_step=step * width, data=rec.view(np.uint8), is_dense=dense)

    def clock(self, stamp: float) -> None:
        """``/clock`` at scene time ``stamp`` s (the time base plus it)."""
        ns = stamp_ns(self.start_ns, stamp)
        self.put("/clock", self.T["rosgraph_msgs/msg/Clock"](clock=self.T["builtin_interfaces/msg/Time"](
            sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)), stamp)

    def laser_scans(self, result: ScanResult, frame_id: str) -> list[tuple[float, MsgType]]:
        """``[(stamp, LaserScan message)]`` of the packet (:func:`blensor_addon.io.laserscan_msg.laser_scans`
        from its capabilities; [] for a sensor that gives none)."""
        out: list[tuple[float, MsgType]] = []
        for s in laser_scans(result, capabilities_of(result), self.options.points == "noisy"):
            out.append((s.stamp, self.T["sensor_msgs/msg/LaserScan"](
                header=self.header(s.stamp, frame_id), angle_min=s.angle_min, angle_max=s.angle_max,
                angle_increment=s.angle_increment, time_increment=s.time_increment, scan_time=s.scan_time,
                range_min=s.range_min, range_max=s.range_max, ranges=s.ranges, intensities=s.intensities)))
        return out

    def image(self, result: ScanResult, stamp: float, frame_id: str) -> tuple[MsgType, MsgType]:
        """``(Image, CameraInfo)`` of an image sensor's packet: 32FC1 planar depth (m, NaN
        where nothing returned) in the optical frame ``frame_id``."""
        from .depthmaps import depth_images
        z = depth_images(result, self.options.points == "noisy")["z"]
        h, w = z.shape
        G = self.T
        img = G["sensor_msgs/msg/Image"](header=self.header(stamp, frame_id), height=h, width=w,
                                         encoding="32FC1", is_bigendian=0, step=4 * w,
                                         data=np.frombuffer(z.astype("<f4").tobytes(), np.uint8))
        fx, fy, cx, cy = result.intrinsics
        info = G["sensor_msgs/msg/CameraInfo"](
            header=self.header(stamp, frame_id), height=h, width=w, distortion_model="plumb_bob",
            d=np.zeros(5), k=np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], float), r=np.eye(3).ravel(),
            p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], float), binning_x=0, binning_y=0,
            roi=G["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
        return img, info

    def sensor_messages(self, result: ScanResult, stamp: float, ns: str, frame_id: str,
                        optical: str) -> None:
        """One sensor's messages of a packet: ``<ns>/points`` (``<ns>/points2`` for an
        Ouster unit's second return), ``<ns>/scan``, ``<ns>/depth/image`` and
        ``<ns>/depth/camera_info``; points and scans in ``frame_id``, depth in ``optical``."""
        t_points, points = self.points(result, stamp, frame_id)
        self.put(f"{ns}/points", points, t_points)
        if is_ouster(result) and has_returns(result):  # ouster-ros's second cloud of a dual profile
            t_points, points = self.points(result, stamp, frame_id, second_strongest(result))
            self.put(f"{ns}/points2", points, t_points)
        for t, msg in self.laser_scans(result, frame_id):
            self.put(f"{ns}/scan", msg, t)
        if result.is_organized and len(result.intrinsics) == 4:
            img, info = self.image(result, stamp, optical)
            self.put(f"{ns}/depth/image", img, stamp)
            self.put(f"{ns}/depth/camera_info", info, stamp)

    def odometry(self, T: F64, stamp: float, prev: StampedPose | None = None,
                 end: StampedPose | None = None) -> MsgType:
        """``nav_msgs/Odometry`` of the base pose ``T`` at ``stamp`` s; the twist (in the
        base frame) from ``prev`` = (stamp, pose) of the previous message, or, for the
        first message, from ``end`` = (stamp, pose) at the packet's end (continuous time)."""
        G = self.T
        lin = np.zeros(3)
        ang = np.zeros(3)
        if prev is not None and stamp > prev[0]:
            dt = stamp - prev[0]
            Tp = prev[1]
            lin = T[:3, :3].T @ (T[:3, 3] - Tp[:3, 3]) / dt
            ang = rotation_vector(Tp[:3, :3].T @ T[:3, :3]) / dt
        elif prev is None and end is not None and end[0] > stamp:  # over its own packet
            dt = end[0] - stamp
            Te = end[1]
            lin = T[:3, :3].T @ (Te[:3, 3] - T[:3, 3]) / dt
            ang = rotation_vector(T[:3, :3].T @ Te[:3, :3]) / dt
        x, y, z, w = quaternion_xyzw(T[:3, :3])
        pose = G["geometry_msgs/msg/Pose"](position=G["geometry_msgs/msg/Point"](
            x=float(T[0, 3]), y=float(T[1, 3]), z=float(T[2, 3])), orientation=G["geometry_msgs/msg/Quaternion"](
            x=x, y=y, z=z, w=w))
        twist = G["geometry_msgs/msg/Twist"](linear=G["geometry_msgs/msg/Vector3"](x=lin[0], y=lin[1], z=lin[2]),
                                             angular=G["geometry_msgs/msg/Vector3"](x=ang[0], y=ang[1], z=ang[2]))
        return G["nav_msgs/msg/Odometry"](
            header=self.header(stamp, self.options.odom_frame), child_frame_id=self.options.base_frame,
            pose=G["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
            twist=G["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))

    def base_messages(self, T: F64, stamp: float, prev: StampedPose | None = None,
                      end: StampedPose | None = None) -> None:
        """``/clock``, ``/tf`` odom -> base and ``/blensor/odom`` at ``stamp`` s (base pose ``T``)."""
        o = self.options
        self.clock(stamp)
        self.tf("/tf", [self.transform(T, stamp, o.odom_frame, o.base_frame)], stamp)
        self.put("/blensor/odom", self.odometry(T, stamp, prev, end), stamp)

    def end_messages(self, end: StampedPose) -> None:
        """``/clock`` and ``/tf`` at ``end`` = (stamp, base pose): the last packet's end,
        which its points' times reach."""
        t, T = end
        self.clock(t)
        self.tf("/tf", [self.transform(T, t, self.options.odom_frame, self.options.base_frame)], t)

    # -- life cycle ---------------------------------------------------------------------------
    def finish(self) -> None:
        """Close the bag and rename it to ``folder/rosbag2`` (replacing an earlier one).

        Raises:
            OSError: closing or renaming failed (call :meth:`discard`)."""
        self.bag.close()
        final = self.folder / "rosbag2"
        if final.exists():  # an earlier run's bag (overwrite/resume): replaced whole
            shutil.rmtree(final)
        os.replace(self.tmp / "rosbag2", final)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def discard(self) -> None:
        """Close what can be closed and delete the unfinished bag."""
        try:
            self.bag.close()
        except Exception:  # noqa: BLE001 - closing a half-written bag may fail; it is deleted anyway
            pass
        # a close that failed (a full disk) leaves rosbags' file open, and a deleted file
        # keeps its space while it is open: close it, so the manifest can still be written
        storage = self.bag.storage  # rosbags' Writer: its storage plugin, None when not opened
        for name in ("bio", "conn", "dbconn"):
            f = getattr(storage, name, None)
            if f is not None:
                try:
                    f.close()
                except Exception:  # noqa: BLE001 - unflushed bytes of a bag being deleted
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def _check_folder(folder: str | os.PathLike[str]) -> None:
    final = Path(folder) / "rosbag2"
    if final.is_symlink() or final.exists() and not final.is_dir():
        raise SettingsError("out", "a folder whose rosbag2 is a plain folder or absent (a link is never "
                            "followed)", str(final))


def optical_pose() -> F64:
    """(4, 4) float64 pose of the optical frame (x right, y down, z ahead) in the REP-103
    sensor frame."""
    opt = np.eye(4)
    opt[:3, :3] = ROS_FROM_OPTICAL
    return opt


class Rosbag2Writer(Writer):
    """The ROS 2 bag (see the module docstring)."""

    name = "rosbag2"
    description = ("ROS 2 bag (rosbags; MCAP or sqlite3): PointCloud2 in the driver's layout, LaserScan, "
                   "Image, TF, Odometry, clock")
    files = "rosbag2/ (metadata.yaml, rosbag2.mcap or rosbag2.db3)"
    outputs = (r"rosbag2/metadata\.yaml", r"rosbag2/rosbag2\.(mcap|db3)")
    Options = Rosbag2Options
    options: Rosbag2Options
    multi_frame = True
    requires = ("rosbags",)

    @classmethod
    def check_folder(cls, folder: Path) -> None:
        """Refuse a symlink or a file at ``rosbag2/`` now, not after the scan."""
        _check_folder(folder)

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self.file = BagFile(self.folder, self.options, self.run.start_ns)
        self.threaded = self.file.threaded
        self._prev: StampedPose | None = None  # (stamp, ROS pose) of the previous frame
        #: (stamp, base pose) at the last packet's end (continuous time)
        self._end: StampedPose | None = None
        self._base_to_sensor = mount_matrix(self.options.base_to_sensor)
        self._sensor_to_base = np.linalg.inv(self._base_to_sensor)
        self.frames = 0

    def append(self, result: ScanResult) -> None:
        o = self.options
        f = self.file
        stamp = float(result.frame * result.frame_time)
        # odom -> base_link = (odom -> sensor) (base_link -> sensor)^-1
        T = base_pose(result, self._sensor_to_base)
        if self.frames == 0:
            f.tf("/tf_static", [f.transform(self._base_to_sensor, stamp, o.base_frame, o.sensor_frame),
                                f.transform(optical_pose(), stamp, o.sensor_frame, OPTICAL_FRAME)], stamp)
        end = base_pose_end(result, self._sensor_to_base)
        self._end = end
        f.base_messages(T, stamp, self._prev, end)
        f.sensor_messages(result, stamp, "/blensor", o.sensor_frame, OPTICAL_FRAME)
        self._prev = (stamp, T)
        self.frames += 1

    def close(self, status: str) -> None:
        if self._end is not None:  # tf at the last packet's end: its points' times reach it
            self.file.end_messages(self._end)
        self.file.finish()

    def discard(self) -> None:
        self.file.discard()


class RigSensorWriter(Writer):
    """One sensor of a :class:`RigBag`: a :class:`Writer` whose :meth:`append` writes the
    sensor's messages into the rig's bag; no files of its own (:meth:`frame_files` []),
    and :meth:`close` / :meth:`discard` do nothing (the rig closes the bag)."""

    name = "rosbag2"
    description = "one sensor's topics in a rig's ROS 2 bag"
    Options = Rosbag2Options
    options: Rosbag2Options
    multi_frame = True
    requires = ("rosbags",)

    def __init__(self, rig: "RigBag", sensor: str) -> None:
        super().__init__(rig.folder, rig.options, None)
        self.rig = rig
        self.sensor = sensor
        self.threaded = rig.threaded

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        return []

    def append(self, result: ScanResult) -> None:
        self.rig.append(self.sensor, result)

    def close(self, status: str) -> None:
        pass

    def discard(self) -> None:
        pass


class RigBag:
    """One ROS 2 bag for every sensor of a rig (see the module
    docstring): ``folder/rosbag2`` (written under a temporary name, renamed by
    :meth:`close`).

    Args:
        folder: the rig's output folder (exists).
        options: :class:`Rosbag2Options` (``storage``, ``points``, ``labels``,
            ``odom_frame``, ``base_frame``; ``sensor_frame`` and ``base_to_sensor`` are
            not used: each sensor's frame is its name, its mount the matrix given); None:
            the defaults.
        sensors: [(name, base_to_sensor)]: ``name`` a ROS 2 name token (:func:`ros_name_ok`;
            :func:`ros_names` makes them from object names), the sensor's tf frame id and
            topic namespace ``/blensor/<name>/``; ``base_to_sensor`` (4, 4) float64, the
            pose of the sensor's REP-103 frame in the base frame (maps points from the
            sensor frame to the base frame), a rigid transform.
        start_ns: the time base (UNIX ns of scene time 0; None: the default), as the
            members' runs have it.
    Raises:
        SettingsError: ``rig.sensors`` (no sensor), ``rig.<name>`` (a name that is not a
        ROS name token, repeats another, or is the odom or base frame or another
        sensor's optical frame), ``rig.<name>.base_to_sensor`` (not a finite rigid (4, 4)
        transform: :func:`blensor_addon.io.extrinsics.check_extrinsics`), ``out`` (a link or
        a file at ``folder/rosbag2``).

    Calls come from one thread (the rig's writer thread, or the main thread when
    :attr:`threaded` is False: a sqlite3 bag stays in the thread that made it) in a
    deterministic order, so the same run gives the same bytes.
    """

    outputs = Rosbag2Writer.outputs

    def __init__(self, folder: str | os.PathLike[str], options: Rosbag2Options | None,
                 sensors: Iterable[tuple[str, ArrayLike]], start_ns: int | None = None) -> None:
        self.folder = Path(folder)
        self.options = options if options is not None else Rosbag2Options()
        o = self.options
        given = list(sensors)
        if not given:
            raise SettingsError("rig.sensors", "at least one (name, base_to_sensor)", given)
        taken = {o.odom_frame: "the odometry frame", o.base_frame: "the base frame"}
        for name, _ in given:
            if not ros_name_ok(name):
                raise SettingsError(
                    f"rig.{name}",
                    "a ROS name: a letter or '_' first, then letters, digits "
                    "and '_', no '__', not ending in '_' (ros_names() makes one from any name)",
                    name,
                )
            for frame, what in ((name, "a sensor name"), (name + "_optical", "an optical frame")):
                if frame in taken:
                    raise SettingsError(f"rig.{name}", f"a name whose frame {frame} is not already "
                                        f"{taken[frame]}", name)
                taken[frame] = what if frame != name else "a sensor's frame"
        check_extrinsics(given, "rig")
        _check_folder(self.folder)
        mounts = [(n, np.array(T, dtype=np.float64)) for n, T in given]
        self._mount = {n: (T, np.linalg.inv(T)) for n, T in mounts}
        self._order = [n for n, _ in mounts]
        self.file = BagFile(self.folder, self.options, start_ns)
        self.threaded = self.file.threaded
        self._static = False
        self._last: float | None = None  # stamp (s) of the last /clock, /tf and /blensor/odom
        self._prev: StampedPose | None = None  # (stamp, base pose) written last
        #: (stamp, base pose) at the latest packet end (continuous time)
        self._end: StampedPose | None = None
        self._writers: dict[str, RigSensorWriter] = {}

    def writer(self, name: str) -> RigSensorWriter:
        """The :class:`Writer` of sensor ``name`` (one per name).

        Raises:
            SettingsError (``rig.sensor``): not a sensor of this rig."""
        if name not in self._mount:
            raise SettingsError("rig.sensor", "one of the rig's sensors (" + ", ".join(self._order) + ")",
                                name)
        if name not in self._writers:
            self._writers[name] = RigSensorWriter(self, name)
        return self._writers[name]

    def append(self, name: str, result: ScanResult) -> None:
        """Write sensor ``name``'s packet ``result``: ``/tf_static`` before the first,
        the base's ``/clock``, ``/tf`` and ``/blensor/odom`` when the packet starts after
        the last written, then the sensor's topics."""
        f, o = self.file, self.options
        base_to_sensor, sensor_to_base = self._mount[name]
        stamp = float(result.frame * result.frame_time)
        if not self._static:
            transforms = []
            for n in self._order:
                transforms.append(f.transform(self._mount[n][0], stamp, o.base_frame, n))
                transforms.append(f.transform(optical_pose(), stamp, n, n + "_optical"))
            f.tf("/tf_static", transforms, stamp)
            self._static = True
        end = base_pose_end(result, sensor_to_base)
        if self._last is None or stamp > self._last:
            T = base_pose(result, sensor_to_base)
            f.base_messages(T, stamp, self._prev, end)
            self._prev = (stamp, T)
            self._last = stamp
        if end is not None and (self._end is None or end[0] > self._end[0]):
            self._end = end
        f.sensor_messages(result, stamp, f"/blensor/{name}", name, name + "_optical")

    def close(self, status: str) -> None:
        """Finish the bag (a cancelled or failed run's bag keeps its packets): ``/clock``
        and ``/tf`` at the latest packet end if after the last written, then renamed to
        ``folder/rosbag2``.

        Raises:
            OSError: closing or renaming failed (:meth:`discard` then removes it)."""
        if self._end is not None and (self._last is None or self._end[0] > self._last):
            self.file.end_messages(self._end)
        self.file.finish()

    def discard(self) -> None:
        """Delete the unfinished bag."""
        self.file.discard()


WRITER = Rosbag2Writer
