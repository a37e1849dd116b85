"""Array type names for annotations (``mypy --strict``; pyproject.toml, ``[tool.mypy]``).

One name per dtype the package's arrays use, so that a signature says what it takes:
``def ranges(d: F64, n: I64) -> F32``. The names are aliases of
:data:`numpy.typing.NDArray` and carry no shape (numpy 1.26's stubs type the dtype only);
shapes stay in the docstrings. :data:`Array` is an array of any dtype, for functions that
pass one through whatever it holds.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
F32 = NDArray[np.float32]
I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I16 = NDArray[np.int16]
U64 = NDArray[np.uint64]
U32 = NDArray[np.uint32]
U16 = NDArray[np.uint16]
U8 = NDArray[np.uint8]
Bool = NDArray[np.bool_]
Floating = NDArray[np.floating[Any]]
Integer = NDArray[np.integer[Any]]
Array = NDArray[Any]

__all__ = ["F64", "F32", "I64", "I32", "I16", "U64", "U32", "U16", "U8", "Bool", "Floating", "Integer", "Array"]
