"""The one table of batch buckets for the fixed-shape fast paths (compiled predictor frames,
CUDA graphs): a batch runs in the smallest bucket that holds it, padded with zero rows, so
a few graphs serve every batch size. Each compile costs a minute or more on 2 cores, so the
table is short; on a GPU padding 2 rows to 4 costs next to nothing. 8 is there because on a CPU
a frame's time grows with its rows: 8 rows padded to 16 spent half the KV frame on padding (the
tiny model's compiled KV frame: 25-28 ms at 16 rows, 12-13 at 4)."""

from __future__ import annotations

BUCKETS = (1, 4, 8, 16, 32)


def bucket(rows: int) -> int | None:
    """The smallest bucket that holds `rows`; None above the largest."""
    return next((b for b in BUCKETS if b >= rows), None)


def buckets_up_to(max_rows: int) -> tuple[int, ...]:
    """Every bucket a batch of 1..max_rows rows can use."""
    top = bucket(max_rows)
    return tuple(b for b in BUCKETS if b < max_rows) + ((top,) if top else ())


def chunks(rows: int) -> list[slice]:
    """Rows above the largest bucket run as chunks of the largest bucket (the last one padded to
    its own bucket), so no batch size outside the table ever reaches a graph or the compiler."""
    top = BUCKETS[-1]
    return [slice(start, min(start + top, rows)) for start in range(0, rows, top)] or [slice(0, 0)]
