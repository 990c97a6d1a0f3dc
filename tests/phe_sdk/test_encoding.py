"""Fixed-point encoding (unifl.phe_sdk.encoding.encode, and encode_array, its integers as an
array): every value and the bound max |v| equal exact rational arithmetic, on NumPy's fast paths
(int64 casts and products, the bound from NumPy extremes) and on the exact integer paths past them."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from unifl.core.errors import EncodingOverflowError, OperandError
from unifl.phe_sdk.encoding import MAX_SCALE_BITS, encode, encode_array

BIG = 1 << 4096


def _reference(values, scale_bits: int) -> list[int]:
    """round(x·2^s), halves to even, in exact rationals."""
    return [round(Fraction(v) * (1 << scale_bits)) for v in np.asarray(values).reshape(-1).tolist()]


def _check(values, scale_bits: int) -> None:
    enc = encode(values, scale_bits, BIG)
    want = _reference(values, scale_bits)
    assert enc.values == want and all(type(v) is int for v in enc.values)
    assert enc.bound == max((abs(v) for v in want), default=0)
    arr = encode_array(values, scale_bits, BIG)
    assert arr.shape == np.shape(values) and arr.reshape(-1).tolist() == want
    # int64 exactly where every integer fits one (and the scale keeps 2^s one), else Python ints
    fits = scale_bits <= 62 and all(abs(v) < 1 << 63 for v in want)
    assert arr.dtype == (np.int64 if fits else object)
    assert arr.dtype == np.int64 or all(type(v) is int for v in arr.reshape(-1))


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=6),
                  elements=st.floats(allow_nan=False, allow_infinity=False)),
       st.integers(0, 80))
def test_floats_equal_exact_rationals(values, scale_bits):
    _check(values, scale_bits)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(st.sampled_from([np.int64, np.int32, np.uint64, np.bool_]),
                  hnp.array_shapes(max_dims=2, max_side=6)),
       st.integers(0, 80))
def test_integers_equal_exact_rationals(values, scale_bits):
    _check(values, scale_bits)


@pytest.mark.parametrize("values", [
    np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]),    # |INT64_MIN| > INT64_MAX
    np.array([2.0 ** 62, -(2.0 ** 63), 0.5, -2.5]),                     # around the int64 cast
    np.array([1e308, -1e308, 3.5]),                                     # x·2^s overflows a float
    np.zeros((0,)), np.zeros((0, 3), np.int64),
    np.zeros(3, np.int64), np.array([0.0, 2.0 ** -70])])                # 2^s itself past int64
@pytest.mark.parametrize("scale_bits", [0, 1, 40, 62, 63, 70, MAX_SCALE_BITS])
def test_edges(values, scale_bits):
    _check(values, scale_bits)


def test_the_bound_refuses_what_does_not_fit():
    with pytest.raises(EncodingOverflowError):
        encode(np.array([0.0, -2.0 ** 20]), 40, (1 << 60) - 1)
    assert encode(np.array([0.0, -2.0 ** 20]), 40, 1 << 60).bound == 1 << 60


@pytest.mark.parametrize("values, scale_bits, max_int, error", [
    (np.array([0.0, -2.0 ** 20]), 40, (1 << 60) - 1, EncodingOverflowError),   # int64 path
    (np.array([3, -2 ** 40], np.int64), 30, (1 << 70) - 1, EncodingOverflowError),
    (np.array([1e300]), 24, BIG, None),                                  # past int64: Python ints
    (np.array([1.0, np.nan]), 24, BIG, OperandError),
    (np.array([np.inf]), 0, BIG, OperandError)])
def test_the_array_form_refuses_what_encode_refuses(values, scale_bits, max_int, error):
    if error is None:
        assert encode_array(values, scale_bits, max_int).tolist() == \
            encode(values, scale_bits, max_int).values
        return
    with pytest.raises(error) as direct:
        encode(values, scale_bits, max_int)
    with pytest.raises(error) as as_array:
        encode_array(values, scale_bits, max_int)
    assert str(as_array.value) == str(direct.value)
