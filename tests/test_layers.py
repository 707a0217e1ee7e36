"""Batch-invariant matmul rows: `layers.linear` gives a row the same floats whatever shares the call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from omni_core.models.layers import MAX_ROWS, MIN_ROWS, linear

SHAPES = [(64, 192), (32, 2048), (1024, 3072), (3072, 1024)]  # tiny projections, a codec head, real-size FFN


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_is_the_same_alone_and_in_any_batch_at_any_position(shape, dtype):
    K, N = shape
    g = torch.Generator().manual_seed(K + N)
    weight = torch.randn(N, K, generator=g).to(dtype)
    x = torch.randn(130, K, generator=g).to(dtype)
    alone = torch.cat([linear(x[i:i + 1], weight) for i in range(len(x))])  # each row alone
    for rows in (2, 3, 4, 5, 8, 15, 16, 17, 32, 33, 40, 100, 130):
        together = linear(x[:rows], weight)
        assert torch.equal(together, alone[:rows]), f"{rows} rows differ from the same rows alone"
    for position in (1, 7, 20):  # the same vector among others, somewhere else in the batch
        moved = x.clone()
        moved[position] = x[0]
        assert torch.equal(linear(moved, weight)[position], alone[0])


def test_padding_keeps_shapes_and_the_values_of_f_linear():
    weight, bias = torch.randn(10, 64), torch.randn(10)
    for x in (torch.randn(2, 3, 64), torch.randn(5, 17, 64)):  # padded; split into blocks
        assert x.shape[0] * x.shape[1] < MIN_ROWS or x.shape[0] * x.shape[1] > MAX_ROWS
        torch.testing.assert_close(linear(x, weight, bias), F.linear(x, weight, bias))
    assert linear(torch.randn(0, 64), weight).shape == (0, 10)
