"""The one bucket table (omni_core/fast/buckets.py): a batch runs in the smallest bucket that holds it."""

from __future__ import annotations

import pytest

from omni_core.fast.buckets import BUCKETS, bucket, buckets_up_to


@pytest.mark.parametrize("rows, want", [(1, 1), (2, 4), (4, 4), (5, 8), (8, 8), (9, 16), (16, 16), (17, 32), (32, 32), (33, None)])
def test_bucket_is_the_smallest_that_holds_the_rows(rows, want):
    assert bucket(rows) == want


@pytest.mark.parametrize("max_rows, want", [(1, (1,)), (2, (1, 4)), (4, (1, 4)), (5, (1, 4, 8)),
                                            (9, (1, 4, 8, 16)), (16, (1, 4, 8, 16)), (32, BUCKETS), (100, BUCKETS)])
def test_buckets_up_to_are_every_bucket_a_batch_can_use(max_rows, want):
    assert buckets_up_to(max_rows) == want
    assert all(bucket(rows) in buckets_up_to(max_rows) for rows in range(1, min(max_rows, BUCKETS[-1]) + 1))
