"""Length buckets (kernel_select.buckets) and the gemm_dynamic_buckets knob: pure arithmetic."""

from __future__ import annotations

import pytest

from kernel_select import options
from kernel_select.buckets import Bucket, bucket_of, buckets, check_edges, edges_of_ranges
from kernel_select.errors import OptionError


def test_edges_make_buckets_from_two_up_the_last_unbounded():
    assert buckets((560, 1024, 8193)) == (Bucket(2, 559), Bucket(560, 1023), Bucket(1024, 8192),
                                          Bucket(8193, None))
    assert buckets(()) == (Bucket(2, None),)  # no edges: one graph for every length


@pytest.mark.parametrize("size, expected", [(2, Bucket(2, 559)), (559, Bucket(2, 559)),
                                            (560, Bucket(560, 1023)), (1023, Bucket(560, 1023)),
                                            (8192, Bucket(1024, 8192)), (10**6, Bucket(8193, None))])
def test_every_length_from_two_falls_in_exactly_one_bucket(size: int, expected: Bucket):
    assert bucket_of((560, 1024, 8193), size) == expected
    assert sum(size in b for b in buckets((560, 1024, 8193))) == 1


def test_zero_and_one_belong_to_no_bucket_as_dynamo_specializes_them():
    assert bucket_of((560,), 0) is None and bucket_of((560,), 1) is None


def test_only_buckets_between_two_edges_have_a_middle_to_tune_at():
    first, inner, last = Bucket(2, 559), Bucket(1024, 4095), Bucket(8193, None)
    assert not first.bounded and inner.bounded and not last.bounded
    assert inner.middle() == 2048 and Bucket(560, 1023).middle() == 757
    with pytest.raises(ValueError, match="no upper bound"):
        last.middle()


def test_edges_are_sorted_unique_and_above_two():
    assert check_edges([4096, 1024, 1024]) == (1024, 4096)
    for bad in ([2], [0], [True], [1.5]):
        with pytest.raises(OptionError, match="above 2"):
            check_edges(bad)


def test_ranges_give_every_range_buckets_of_its_own():
    # A LUT's per-bucket entries of one GEMM, and a second GEMM over the whole range: the edges
    # are the union, so every graph lies inside one entry of each GEMM.
    ranges = [(560, 1810), (1811, 8192), (560, 8192), (1280, 1280)]  # an exact size adds no edge
    assert edges_of_ranges(ranges) == (560, 1811, 8193)
    assert edges_of_ranges([(1, 64)]) == (65,)  # an edge at 1 or 2 would leave an empty bucket


@pytest.mark.parametrize("value, parsed", [(None, None), ("", None), ("off", ()), ("None", ()), ([], ()),
                                           ("4096, 1024", (1024, 4096)), ([2048, 512], (512, 2048)),
                                           ((1024,), (1024,))])
def test_the_knob_takes_edges_off_or_none(value: object, parsed: object):
    assert options.parse("gemm_dynamic_buckets", value) == parsed
    if parsed is not None:  # a parsed value parses to itself (knob values are parsed on every read)
        assert options.parse("gemm_dynamic_buckets", parsed) == parsed


@pytest.mark.parametrize("value", ["1024..4096", "a,b", "2", [1024, "x"], 4096, [True], [2**31]])
def test_the_knob_refuses_anything_else_naming_itself(value: object):
    with pytest.raises(OptionError, match="^gemm_dynamic_buckets: expected the lengths where a bucket"):
        options.parse("gemm_dynamic_buckets", value)
