"""A ROS 2 bag (rosbag2, MCAP by default or sqlite3) through the ``rosbags`` library.

Folder ``rosbag2/`` (written under a temporary name, renamed when the run ends; a
cancelled run's bag holds its finished frames). REP-103 axes throughout. Frames (names
are options): ``odom`` (Blender's world, ENU) -> ``base_link`` (the vehicle; option
``base_to_sensor`` places the sensor on it, identity by default) -> ``blensor_sensor``
(the sensor, x ahead, y left, z up) -> ``blensor_optical``. The clock starts at 0 and
runs in simulated time (scene frame x frame time). Topics:

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
  ``points``: ``noisy`` (default) or ``clean``. Several returns per beam (issue 22,
  settings ``returns`` dual, dual_ouster, all): a sensor that is not a Velodyne or Ouster
  unit gets ``return_number`` and ``number_of_returns`` (uint8, offsets 22 and 23, 24 bytes a
  point; the labels follow at 24); a Velodyne unit's XYZIRT stays velodyne_pointcloud's 22
  bytes with every return a point of its own (the driver publishes both blocks of a dual
  pair as points and has no return field); an Ouster unit's organized cloud holds each
  beam's strongest return, and ``/blensor/points2`` (the same layout, NaN where a beam has
  none) its second strongest, as ouster-ros publishes ``points`` and ``points2`` with the
  dual-return profile.
- ``/blensor/scan`` ``sensor_msgs/LaserScan`` for sensors with one scan plane whose
  capabilities give its column angles (planar scanners with one plane; seed 004's 2D lidar
  output): one message per sweep (or part of a sweep) in the frame, ranges over every
  angle step with +inf where nothing returned, angle and time increments from the sweep.
- ``/blensor/depth/image`` ``sensor_msgs/Image`` (32FC1, planar depth z in m, NaN where
  nothing returned) and ``/blensor/depth/camera_info`` ``sensor_msgs/CameraInfo`` for
  image sensors (organized results with intrinsics: ToF, Kinect, depth camera), frame
  ``blensor_optical`` (x right, y down, z ahead).
- ``/blensor/odom`` ``nav_msgs/Odometry``: the ground-truth pose of base_link in odom,
  with the twist (in base_link) from the pose change since the previous frame (the first
  message: over its own packet, in continuous time).
"""
from __future__ import annotations

import functools
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.axes import (ROS_FROM_BLENSOR, quaternion_xyzw, ros_pose, ros_sensor_pose, rotation_vector,
                          sensor_points)
from ...core.errors import SettingsError
from ...core.settings import setting
from ._base import Writer, capabilities_of
from ..packets import has_returns, second_strongest
from ._layouts import is_ouster, ouster_cloud, velodyne_stamp, xyzirt

SENSOR_FRAME = "blensor_sensor"
OPTICAL_FRAME = "blensor_optical"
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"
#: optical frame (x right, y down, z ahead) in the REP-103 sensor frame
ROS_FROM_OPTICAL = ROS_FROM_BLENSOR @ np.diag([1.0, -1.0, -1.0])


@functools.lru_cache(maxsize=None)
def typestore():
    """The ROS 2 Humble type store of every bag of this process. ``rosbags`` generates a
    message type's serializer on its first use in a store and keeps it there; one store
    per bag generated them again for every bag (13 ms of a one-frame bag's 30 ms)."""
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_HUMBLE)


def _frame_name_ok(name: str) -> bool:
    """A tf2 frame id: non-empty, no whitespace, no leading ``/`` (tf2 refuses it)."""
    return bool(name) and not name.startswith("/") and not any(c.isspace() for c in name)


def static_qos():
    """tf2_ros's static broadcaster QoS (``StaticBroadcasterQoS``: keep last 1, reliable,
    transient local; deadline, lifespan and lease infinite, as rosbag2 records them) as
    a ``rosbags`` Qos."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
    forever = QosTime(9223372036, 854775807)
    return Qos(QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, forever,
               forever, QosLiveliness.AUTOMATIC, forever, False)


def mount_matrix(xyzrpy) -> np.ndarray:
    """(4, 4) float64 pose of the sensor in base_link from (x, y, z m, roll, pitch, yaw
    deg): ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (REP-103 fixed-axis roll, pitch, yaw)."""
    x, y, z, r, p, w = (float(v) for v in xyzrpy)
    r, p, w = np.deg2rad([r, p, w])
    cr, sr, cp, sp, cw, sw = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(w), np.sin(w)
    T = np.eye(4)
    Rz = np.array([[cw, -sw, 0], [sw, cw, 0], [0, 0, 1]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    T[:3, :3] = Rz @ Ry @ np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
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
    base_to_sensor: tuple = setting((0.0, 0.0, 0.0, 0.0, 0.0, 0.0), "Sensor mount",
                                    "The sensor's pose on the base frame: x, y, z (m), roll, pitch, yaw (deg)",
                                    lo=-1e4, hi=1e4, count=(6, 6))

    def __post_init__(self):
        names = {}
        for opt in ("odom_frame", "base_frame", "sensor_frame"):
            v = getattr(self, opt)
            if not _frame_name_ok(v) or v in names or v == OPTICAL_FRAME:
                raise SettingsError(f"rosbag2.{opt}", "a tf frame id: not empty, no spaces, no leading '/', "
                                    f"other than the other frames' ({', '.join(names) or OPTICAL_FRAME})", v)
            names[v] = opt


class Rosbag2Writer(Writer):
    """The ROS 2 bag (see the module docstring)."""

    name = "rosbag2"
    description = ("ROS 2 bag (rosbags; MCAP or sqlite3): PointCloud2 in the driver's layout, LaserScan, "
                   "Image, TF, Odometry, clock")
    files = "rosbag2/ (metadata.yaml, rosbag2.mcap or rosbag2.db3)"
    outputs = (r"rosbag2/metadata\.yaml", r"rosbag2/rosbag2\.(mcap|db3)")
    Options = Rosbag2Options
    multi_frame = True
    requires = ("rosbags",)

    @classmethod
    def check_folder(cls, folder) -> None:
        """Refuse a symlink or a file at ``rosbag2/`` now, not after the scan."""
        final = Path(folder) / "rosbag2"
        if final.is_symlink() or final.exists() and not final.is_dir():
            raise SettingsError("out", "a folder whose rosbag2 is a plain folder or absent (a link is never "
                                "followed)", str(final))

    def __init__(self, folder, options=None, run=None) -> None:
        super().__init__(folder, options, run)
        from rosbags.rosbag2 import StoragePlugin
        from rosbags.rosbag2 import Writer as BagWriter
        self.ts = typestore()
        self.T = self.ts.types
        self.tmp = self.folder / f".rosbag2.{os.getpid()}.{secrets.token_hex(8)}.part"
        self.tmp.mkdir()
        plugin = StoragePlugin.MCAP if self.options.storage == "mcap" else StoragePlugin.SQLITE3
        self.threaded = self.options.storage == "mcap"  # a sqlite3 connection stays in its thread
        self.bag = BagWriter(self.tmp / "rosbag2", version=8, storage_plugin=plugin)
        self.bag.open()
        self._conns: dict = {}
        self._prev = None  # (stamp, ROS pose) of the previous frame
        self._end = None  # (stamp, base pose) at the last packet's end (continuous time)
        self._base_to_sensor = mount_matrix(self.options.base_to_sensor)
        self._sensor_to_base = np.linalg.inv(self._base_to_sensor)
        self.frames = 0

    # -- messages -------------------------------------------------------------------------
    def _conn(self, topic: str, msgtype: str):
        if topic not in self._conns:
            qos = [static_qos()] if topic == "/tf_static" else []
            self._conns[topic] = self.bag.add_connection(topic, msgtype, typestore=self.ts,
                                                         offered_qos_profiles=qos)
        return self._conns[topic]

    def _put(self, topic: str, msg, stamp: float) -> None:
        msgtype = msg.__msgtype__
        self.bag.write(self._conn(topic, msgtype), int(round(stamp * 1e9)), self.ts.serialize_cdr(msg, msgtype))

    def _header(self, stamp: float, frame_id: str):
        ns = int(round(stamp * 1e9))
        return self.T["std_msgs/msg/Header"](stamp=self.T["builtin_interfaces/msg/Time"](
            sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id=frame_id)

    def _transform(self, T: np.ndarray, stamp: float, parent: str, child: str):
        G = self.T
        x, y, z, w = quaternion_xyzw(T[:3, :3])
        tr = G["geometry_msgs/msg/Transform"](
            translation=G["geometry_msgs/msg/Vector3"](x=float(T[0, 3]), y=float(T[1, 3]), z=float(T[2, 3])),
            rotation=G["geometry_msgs/msg/Quaternion"](x=x, y=y, z=z, w=w))
        return G["geometry_msgs/msg/TransformStamped"](header=self._header(stamp, parent), child_frame_id=child,
                                                      transform=tr)

    def _points(self, result, stamp, pick=None):
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
            header=self._header(stamp, self.options.sensor_frame), height=height, width=width,
            fields=[PF(name=n, offset=o, datatype=d, count=1) for n, o, d in fields], is_bigendian=False,
            point_step=step, row_step=step * width, data=rec.view(np.uint8), is_dense=dense)

    def _clock(self, stamp: float) -> None:
        ns = int(round(stamp * 1e9))
        self._put("/clock", self.T["rosgraph_msgs/msg/Clock"](clock=self.T["builtin_interfaces/msg/Time"](
            sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)), stamp)

    def _laser_scans(self, result):
        """LaserScan messages of a one-plane swept sensor (see the module docstring),
        from its capabilities: ``grid`` (1, columns a sweep), ``timing.period``,
        ``column_angles``, ``max_range``; [] for other sensors."""
        caps = capabilities_of(result)
        if (caps.column_angles is None or caps.grid is None or caps.grid[0] != 1
                or caps.timing.kind != "sweep" or not result.has_grid):
            return []
        count, period = int(caps.grid[1]), float(caps.timing.period)
        cols = result.grid_shape[1]  # the packet's columns, in firing order
        if not cols or not count:
            return []
        first_g = caps.timing.first_column(count, result.frame * result.frame_time)
        g = first_g + np.arange(cols, dtype=np.int64)
        col, stamps = g % count, g / (count / period)
        ranges = np.full(cols, np.inf, np.float32)
        inten = np.zeros(cols, np.float32)
        local = result.ray_index.astype(np.int64) % cols
        ranges[local] = result.range_noisy if self.options.points == "noisy" else result.range
        inten[local] = np.round(np.clip(result.intensity, 0, 1) * 255)
        cut = np.flatnonzero(np.diff(col) < 0) + 1  # a new sweep starts
        first, step = caps.column_angles
        range_max = float(caps.max_range) if caps.max_range is not None else float("inf")
        out = []
        for seg in np.split(np.arange(cols), cut):
            a0 = first + col[seg[0]] * step
            out.append((float(stamps[seg[0]]), self.T["sensor_msgs/msg/LaserScan"](
                header=self._header(float(stamps[seg[0]]), self.options.sensor_frame), angle_min=float(a0),
                angle_max=float(a0 + step * (seg.size - 1)), angle_increment=float(step),
                time_increment=float(period / count), scan_time=float(period),
                range_min=0.0, range_max=range_max, ranges=ranges[seg], intensities=inten[seg])))
        return out

    def _image(self, result, stamp):
        from .depthmaps import depth_images
        z = depth_images(result, self.options.points == "noisy")["z"]
        h, w = z.shape
        G = self.T
        img = G["sensor_msgs/msg/Image"](header=self._header(stamp, OPTICAL_FRAME), height=h, width=w,
                                         encoding="32FC1", is_bigendian=0, step=4 * w,
                                         data=np.frombuffer(z.astype("<f4").tobytes(), np.uint8))
        fx, fy, cx, cy = result.intrinsics
        info = G["sensor_msgs/msg/CameraInfo"](
            header=self._header(stamp, OPTICAL_FRAME), height=h, width=w, distortion_model="plumb_bob",
            d=np.zeros(5), k=np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], float), r=np.eye(3).ravel(),
            p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], float), binning_x=0, binning_y=0,
            roi=G["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
        return img, info

    def _odometry(self, T, stamp, end=None):
        """``end``: (stamp, pose) at the packet's end (continuous time), for the first
        message's twist, which has no message before it."""
        G = self.T
        lin = np.zeros(3)
        ang = np.zeros(3)
        if self._prev is not None and stamp > self._prev[0]:
            dt = stamp - self._prev[0]
            Tp = self._prev[1]
            lin = T[:3, :3].T @ (T[:3, 3] - Tp[:3, 3]) / dt
            ang = rotation_vector(Tp[:3, :3].T @ T[:3, :3]) / dt
        elif self._prev is None and end is not None and end[0] > stamp:  # over its own packet
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
            header=self._header(stamp, self.options.odom_frame), child_frame_id=self.options.base_frame,
            pose=G["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
            twist=G["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))

    # -- life cycle ---------------------------------------------------------------------------
    def append(self, result):
        o = self.options
        stamp = float(result.frame * result.frame_time)
        # odom -> base_link = (odom -> sensor) (base_link -> sensor)^-1
        T = ros_sensor_pose(result) @ self._sensor_to_base
        if self.frames == 0:
            opt = np.eye(4)
            opt[:3, :3] = ROS_FROM_OPTICAL
            self._put("/tf_static", self.T["tf2_msgs/msg/TFMessage"](transforms=[
                self._transform(self._base_to_sensor, stamp, o.base_frame, o.sensor_frame),
                self._transform(opt, stamp, o.sensor_frame, OPTICAL_FRAME)]), stamp)
        self._clock(stamp)
        self._put("/tf", self.T["tf2_msgs/msg/TFMessage"](
            transforms=[self._transform(T, stamp, o.odom_frame, o.base_frame)]), stamp)
        end = None
        if result.sensor_to_world_end is not None:
            Te = np.array(result.sensor_to_world_end, dtype=np.float64)
            end = (stamp + float(result.frame_time), (ros_pose(Te) if result.axes == "blensor" else Te)
                   @ self._sensor_to_base)
        self._end = end
        self._put("/blensor/odom", self._odometry(T, stamp, end), stamp)
        t_points, points = self._points(result, stamp)
        self._put("/blensor/points", points, t_points)
        if is_ouster(result) and has_returns(result):  # ouster-ros's second cloud of a dual profile
            t_points, points = self._points(result, stamp, second_strongest(result))
            self._put("/blensor/points2", points, t_points)
        for t, msg in self._laser_scans(result):
            self._put("/blensor/scan", msg, t)
        if result.is_organized and len(result.intrinsics) == 4:
            img, info = self._image(result, stamp)
            self._put("/blensor/depth/image", img, stamp)
            self._put("/blensor/depth/camera_info", info, stamp)
        self._prev = (stamp, T)
        self.frames += 1

    def close(self, status):
        if self._end is not None:  # tf at the last packet's end: its points' times reach it
            t, T = self._end
            self._clock(t)
            self._put("/tf", self.T["tf2_msgs/msg/TFMessage"](
                transforms=[self._transform(T, t, self.options.odom_frame, self.options.base_frame)]), t)
        self.bag.close()
        final = self.folder / "rosbag2"
        if final.exists():  # an earlier run's bag (overwrite/resume): replaced whole
            shutil.rmtree(final)
        os.replace(self.tmp / "rosbag2", final)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def discard(self):
        try:
            self.bag.close()
        except Exception:  # noqa: BLE001 - closing a half-written bag may fail; it is deleted anyway
            pass
        # a close that failed (a full disk) leaves rosbags' file open, and a deleted file
        # keeps its space while it is open: close it, so the manifest can still be written
        storage = getattr(self.bag, "storage", None)
        for name in ("bio", "conn", "dbconn"):
            f = getattr(storage, name, None)
            if f is not None:
                try:
                    f.close()
                except Exception:  # noqa: BLE001 - unflushed bytes of a bag being deleted
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


WRITER = Rosbag2Writer
