"""The result of one scan: one row per return, numpy arrays of equal length N."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .capabilities import Capabilities

#: field name -> (dtype, trailing shape); the order is the order of the npz file.
FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "timestamp": ("<f8", ()),
    "azimuth": ("<f4", ()),
    "elevation": ("<f4", ()),
    "range": ("<f4", ()),
    "range_noisy": ("<f4", ()),
    "xyz": ("<f4", (3,)),
    "xyz_noisy": ("<f4", (3,)),
    "object_id": ("<u4", ()),
    "semantic": ("<u2", ()),
    "instancer_id": ("<u4", ()),
    "instance_id": ("<u4", ()),
    "channel": ("<u2", ()),
    "ring": ("<u2", ()),
    "ray_index": ("<u4", ()),
    "reflectivity": ("<f4", ()),
    "intensity": ("<f4", ()),
    "color": ("u1", (3,)),
    "normal": ("<f4", (3,)),
}


@dataclass
class ScanResult:
    """Returns of one scan (seed 000 section 3.6: the 12 ground-truth fields, extended).

    Per-return arrays, N rows each:
        timestamp (N,) float64 s: absolute time of the column's firing
            (frame time + in-sweep offset).
        azimuth (N,) float32 rad in [0, 2 pi): column azimuth psi (0 = sensor -Z,
            counter-clockwise seen from +Y, as the original).
        elevation (N,) float32 rad: laser elevation.
        range (N,) float32 m: accumulated path length (through mirrors), clean.
        range_noisy (N,) float32 m: range + laser bias + N(mu, sigma) (seed 000 Eq. 2).
        xyz, xyz_noisy (N, 3) float32 m: unit(original ray) * range, in ``frame_of_reference``.
        object_id (N,) uint32: id of the object whose surface returned (1..; see
            ``objects``; the ids derive from the file, see
            :class:`blensor_addon.scene.extract.ObjectTable`).
        semantic (N,) uint16: semantic class id of the returning object (its
            ``blensor_label``, else its instancer's; SemanticKITTI's ids,
            :mod:`blensor_addon.core.classes`), 0 = unlabeled.
        instancer_id (N,) uint32: id of the object that instanced it (collection
            instance, Geometry Nodes, particles), 0 if it is drawn directly.
        instance_id (N,) uint32: index of that instance within its instancer + 1, 0 if
            drawn directly. (object_id, instancer_id, instance_id) is unique per instance.
        channel (N,) uint16: laser index (row of the elevation table; 0 for pixel sensors).
        ring (N,) uint16: the laser's elevation rank, 0 = lowest (what ROS drivers call
            ``ring``; the channel is the calibration index).
        ray_index (N,) uint32: the ray's cell in the sensor's grid, ``row * cols + col``
            with ``(rows, cols) = grid_shape`` (laser x column, or image row x column
            with row 0 at the top).
        reflectivity (N,) float32: material reflectivity in [0, 1].
        intensity (N,) float32: reflectivity * |cos(incidence)| (seed 002 Eq. 4).
        color (N, 3) uint8: material base colour, sRGB-encoded 0..255.
        normal (N, 3) float32: unit geometric normal of the returning surface, turned
            to face the incoming ray, in ``frame_of_reference``.
    Metadata:
        frame: scene frame number; frame_time: seconds per frame.
        frame_of_reference: ``"sensor"`` (camera-local: +X right, +Y up, looking down -Z)
            or ``"world"``.
        sensor_to_world: (4, 4) float64 rigid pose of the sensor at the scan (scale removed).
        sensor: settings dict; objects: the object table, list of {"id", "name",
            "label", "type"} (label: the object property ``blensor_label``).
        num_rays: rays cast (returns + misses).
        grid_shape: (rows, cols) of the sensor's grid (see ``ray_index``); () if none.
        sensor_type: the sensor type's name (``"rotating"``, ``"tof"``, ...).
        organized: the sensor is an image sensor (ToF, depth camera): organized
            outputs (PCD) hold every pixel of ``grid_shape``.
        axes: ``"blensor"`` (sensor frame +X right, +Y up, -Z ahead) or ``"ros"``
            (REP-103: x ahead, y left, z up) for sensor-frame points, normals and the
            pose's rotation (:mod:`blensor_addon.core.axes`).
        intrinsics: (fx, fy, cx, cy) in pixels of an image sensor's pinhole (ROS
            CameraInfo convention: pixel centres at integer coordinates, row 0 at the
            top, optical frame x right, y down, z ahead); () for other sensors.
        extra: further per-return arrays by name, N rows each, e.g. ``xyz_deskewed``
            and ``xyz_noisy_deskewed`` (N, 3) float32 m: the points in the sensor frame
            at the packet's start (setting ``deskew``); ``xyz_sensor`` and
            ``xyz_noisy_sensor`` (N, 3) float32 m: a world-frame scan's points in the
            sensor frame at each ray's time, when the sensor moved during the packet
            (what KITTI and ROS outputs hold, as for a sensor-frame scan); empty by
            default.
        sensor_to_world_end: (4, 4) float64 pose of the sensor at the end of the packet
            (continuous time), or None.
        capabilities: the :class:`~blensor_addon.core.capabilities.Capabilities` of the
            sensor that made the result (set by ``Sensor.scan``), or None.
    In continuous time a packet's ``sensor_to_world`` is the pose at its start
    (``frame * frame_time``) and every sensor-frame point is in the sensor frame at its
    own firing time (``timestamp``), as a real driver reports it.
    """

    timestamp: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    range: np.ndarray
    range_noisy: np.ndarray
    xyz: np.ndarray
    xyz_noisy: np.ndarray
    object_id: np.ndarray
    semantic: np.ndarray
    instancer_id: np.ndarray
    instance_id: np.ndarray
    channel: np.ndarray
    ring: np.ndarray
    ray_index: np.ndarray
    reflectivity: np.ndarray
    intensity: np.ndarray
    color: np.ndarray
    normal: np.ndarray
    frame: int = 0
    frame_time: float = 1.0 / 24.0
    frame_of_reference: str = "sensor"
    sensor_to_world: np.ndarray = field(default_factory=lambda: np.eye(4))
    sensor: dict = field(default_factory=dict)
    objects: list = field(default_factory=list)
    num_rays: int = 0
    grid_shape: tuple = ()
    sensor_type: str = "rotating"
    organized: bool = False
    axes: str = "blensor"
    intrinsics: tuple = ()
    extra: dict = field(default_factory=dict)
    sensor_to_world_end: np.ndarray | None = None
    capabilities: Capabilities | None = None

    def __post_init__(self) -> None:
        n = len(self.timestamp)
        for name, (dtype, shape) in FIELDS.items():
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if arr.shape != (n, *shape):
                raise ValueError(f"ScanResult.{name} has shape {arr.shape}, expected {(n, *shape)}")
            setattr(self, name, arr)
        for name, arr in self.extra.items():
            if np.shape(arr)[:1] != (n,):
                raise ValueError(f"ScanResult.extra[{name!r}] has {np.shape(arr)[:1]} rows, expected {n}")

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])

    @classmethod
    def empty(cls, **meta) -> "ScanResult":
        """A result with no returns."""
        arrays = {k: np.zeros((0, *s), dtype=d) for k, (d, s) in FIELDS.items()}
        return cls(**arrays, **meta)

    def image(self, name: str = "range", fill=np.nan) -> np.ndarray:
        """Field ``name`` scattered into the sensor's grid by ``ray_index``:
        (rows, cols) or (rows, cols, k) array of the field's dtype (float fields; other
        dtypes get ``fill`` cast to them), ``fill`` where no ray returned.

        Raises:
            ValueError: the result has no grid (``grid_shape`` is empty).
        """
        if len(self.grid_shape) != 2:
            raise ValueError("this result has no grid_shape")
        rows, cols = self.grid_shape
        src = getattr(self, name)
        out = np.full((rows * cols, *src.shape[1:]), fill, dtype=src.dtype)
        out[self.ray_index.astype(np.int64)] = src
        return out.reshape(rows, cols, *src.shape[1:])

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-return arrays by name, in :data:`FIELDS` order."""
        return {k: getattr(self, k) for k in FIELDS}
