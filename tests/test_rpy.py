"""One roll-pitch-yaw pair and one NED/FRD <-> REP-103 flip (core/axes.py),
used by rosbag2's base_to_sensor, the extrinsics files, the config formats and the rosette's
scan_orientation."""
from __future__ import annotations

import math

import numpy as np
import pytest

from blensor_addon.core.axes import NED_FROM_ROS, ROS_FROM_BLENSOR, blensor_from_frd, matrix_rpy, rpy_matrix
from blensor_addon.core.sensors.rosette import beam_directions, scan_rotation
from blensor_addon.io.configs import _common, airsim
from blensor_addon.io.extrinsics import rpy_deg
from blensor_addon.io.formats.rosbag2 import mount_matrix


def test_rpy_matrix_is_rz_ry_rx_about_fixed_axes():
    # yaw 90 deg turns x ahead to y left (REP-103); pitch 90 deg turns x to -z; roll 90 deg turns y to z
    np.testing.assert_allclose(rpy_matrix(0.0, 0.0, math.pi / 2) @ [1, 0, 0], [0, 1, 0], atol=1e-15)
    np.testing.assert_allclose(rpy_matrix(0.0, math.pi / 2, 0.0) @ [1, 0, 0], [0, 0, -1], atol=1e-15)
    np.testing.assert_allclose(rpy_matrix(math.pi / 2, 0.0, 0.0) @ [0, 1, 0], [0, 0, 1], atol=1e-15)
    r, p, y = 0.3, -0.4, 2.0
    Rx = rpy_matrix(r, 0.0, 0.0)
    Ry = rpy_matrix(0.0, p, 0.0)
    Rz = rpy_matrix(0.0, 0.0, y)
    np.testing.assert_allclose(rpy_matrix(r, p, y), Rz @ Ry @ Rx, atol=1e-15)


def test_every_user_computes_the_same_bits():
    # issue 23 review: three copies of the forward rotation and two inverses with different gimbal-lock
    # formulas; now the same function: bitwise the same matrices and angles
    assert _common.rpy_matrix is rpy_matrix and _common.matrix_rpy is matrix_rpy
    assert airsim.F is NED_FROM_ROS
    rng = np.random.default_rng(5)
    for deg in rng.uniform(-180.0, 180.0, (200, 3)):
        R = rpy_matrix(*np.radians(deg))
        assert np.array_equal(mount_matrix((0, 0, 0, *deg))[:3, :3], R)
        assert np.array_equal(scan_rotation(deg), R)
        assert rpy_deg(R) == tuple(math.degrees(a) for a in matrix_rpy(R))
        np.testing.assert_allclose(rpy_matrix(*matrix_rpy(R)), R, atol=1e-14)
        assert abs(matrix_rpy(R)[1]) <= math.pi / 2


@pytest.mark.parametrize("pitch", [math.pi / 2, -math.pi / 2])
def test_matrix_rpy_at_gimbal_lock_puts_the_turn_in_yaw(pitch):
    R = rpy_matrix(0.4, pitch, 0.1)
    r, p, y = matrix_rpy(R)
    assert r == 0.0 and p == pytest.approx(pitch, abs=1e-12)
    np.testing.assert_allclose(rpy_matrix(r, p, y), R, atol=1e-12)


def test_ned_flip_and_frd_to_blensor():
    np.testing.assert_array_equal(NED_FROM_ROS @ NED_FROM_ROS, np.eye(3))
    v = np.random.default_rng(2).normal(size=(50, 3))
    np.testing.assert_array_equal(blensor_from_frd(v), v @ (ROS_FROM_BLENSOR.T @ NED_FROM_ROS).T)
    # the rosette's beam ahead (h = 0, e = 0) looks down BlenSor's -Z; e > 0 is up (+Y)
    d = beam_directions(np.array([0.0, 0.0]), np.array([0.0, 0.3]))
    np.testing.assert_allclose(d, [[0, 0, -1], [0, math.sin(0.3), -math.cos(0.3)]], atol=1e-15)
