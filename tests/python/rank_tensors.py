"""Deterministic inputs of every rank, and the results the collectives must produce from them.

Each rank can regenerate any other rank's input, so the expected result of a
collective is computed locally, exactly, in float64 (the values are small
integers, or halves, that every dtype holds exactly).
"""

import torch

import collective.torch as hvd

# Every dtype the daemon reduces on CPU (uint16 has no torch dtype in 1.13).
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
NUMERIC_DTYPES = [d for d in DTYPES if d is not torch.bool]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def rank_input(rank, shape, dtype, op=hvd.Sum, seed=0):
    """Rank `rank`'s input: small non-negative integers (0 and 1 for bool; 1 and 2 for Product)."""
    count = 1
    for d in shape:
        count *= d
    index = torch.arange(count, dtype=torch.int64).reshape(shape)
    if dtype is torch.bool:
        return ((index + rank + seed) % 2 == 0)
    if op == hvd.Product:
        return (1 + (index + rank + seed) % 2).to(dtype)
    return ((index * 3 + rank * 5 + seed) % 7).to(dtype)


def expected_reduction(ranks, shape, dtype, op, prescale=1.0, postscale=1.0):
    """What an allreduce of the inputs of `ranks` must give, as the daemon computes it."""
    inputs = torch.stack([rank_input(r, shape, dtype, op).double() * prescale for r in ranks])
    if op in (hvd.Sum, hvd.Average):
        result = inputs.sum(0)
    elif op == hvd.Min:
        result = inputs.min(0).values
    elif op == hvd.Max:
        result = inputs.max(0).values
    else:
        result = inputs.prod(0)
    # The final factor, postscale / ranks for Average, is computed in double
    # and applied as one multiplication in the accumulation type (float32
    # for every float narrower than float64), as the daemon's kernels do.
    factor = postscale / (len(ranks) if op == hvd.Average else 1)
    if dtype is torch.bool:
        return result.to(dtype)
    if dtype.is_floating_point:
        accumulate = torch.float64 if dtype is torch.float64 else torch.float32
        if factor != 1.0:
            result = result.to(accumulate) * torch.tensor(factor, dtype=accumulate)
        return result.to(accumulate).to(dtype)
    return torch.trunc(result * factor).to(dtype)  # integers: truncated toward zero


def expected_rows(rows, size, rank):
    """The rows a reducescatter gives rank `rank` of `size`: the first (rows mod size) get one more."""
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)
