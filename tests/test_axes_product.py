"""core/axes.py ``axes_product``: a sensor-frame result's points and normals taken to the
other axes convention in float32, bit for bit the float64 product ``v @ M.T`` rounded to
float32 that ``to_axes`` computed before (every sign of zero, subnormals, the largest
float32, and rows that are not finite)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from blensor_addon.core.axes import ROS_FROM_BLENSOR, axes_product

VALUES = np.array([0.0, -0.0, 1.5, -2.25, 3e-39, -3e-39, 3.4e38, -3.4e38, 1e-7], np.float32)


def float64_product(v, M):
    return (np.asarray(v, np.float32).astype(np.float64) @ M.T).astype(np.float32)


@pytest.mark.parametrize("M", [ROS_FROM_BLENSOR, ROS_FROM_BLENSOR.T, np.eye(3), np.diag([1.0, -1.0, -1.0])],
                         ids=["ros", "blensor", "identity", "flip"])
def test_axes_product_is_the_float64_product_bit_for_bit(M):
    rows = np.array(list(itertools.product(VALUES, repeat=3)), np.float32)
    v = np.tile(rows, (50, 1))  # BLAS takes another path for many rows than for a few
    for part in (v, v[:1], v[:7], v[::3]):
        got = axes_product(part, M)
        want = float64_product(part, M)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.signbit(axes_product(np.array([[-0.0, -0.0, -0.0]], np.float32), M)).any()


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning")  # 0 * inf
def test_rows_that_are_not_finite_take_the_float64_product():
    v = np.array([[np.inf, 1.0, 2.0], [np.nan, 0.0, -0.0], [1.0, 2.0, 3.0]], np.float32)
    got = axes_product(v, ROS_FROM_BLENSOR)
    want = float64_product(v, ROS_FROM_BLENSOR)
    assert np.isnan(got[0]).sum() == np.isnan(want[0]).sum() == 2  # 0 * inf in two columns
    assert np.array_equal(got, want, equal_nan=True)


def test_a_float64_input_is_rounded_to_float32_first():
    v = np.array([[0.1, -1e-50, 1e30]])
    got = axes_product(v, ROS_FROM_BLENSOR)
    assert np.array_equal(got.view(np.uint32), float64_product(v.astype(np.float32), ROS_FROM_BLENSOR)
                          .view(np.uint32))
