"""Bounds on what a model may declare, each with an environment override (docs: reference/environment, from environment.py).

A SavedModel or AOT config from elsewhere could otherwise ask for anything: an input of
[batch, 2147483648] float64 makes the compile worker allocate 16 GiB for its reference inputs, and
65,536 batch sizes are 65,536 compiles. The defaults are far above what CMS models need (a few
thousand inputs per row, a handful of batch sizes) and far below what hurts a 2 GB job slot.

    TFAOT_DIST_MAX_BATCH_SIZES    batch sizes per model               default 64
    TFAOT_DIST_MAX_ROW_ELEMENTS   elements of one input per row       default 16,777,216 (2^24)
    TFAOT_DIST_MAX_BATCH_BYTES    bytes of all inputs at the largest  default 1 GiB
                                  batch size compiled or verified
"""

import os

from tfaot_dist.errors import InvalidInput

BATCH_SIZES_ENV = "TFAOT_DIST_MAX_BATCH_SIZES"
ROW_ELEMENTS_ENV = "TFAOT_DIST_MAX_ROW_ELEMENTS"
BATCH_BYTES_ENV = "TFAOT_DIST_MAX_BATCH_BYTES"
DEFAULT_BATCH_SIZES = 64
DEFAULT_ROW_ELEMENTS = 1 << 24
DEFAULT_BATCH_BYTES = 1 << 30
# The largest verification tolerance an aot config may set (config.tolerance) and a manifest record
# (documents.py); no override.
MAX_TOLERANCE = 1e-2


def _limit(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0 or len(text) > 20:
        raise InvalidInput(f"{name}: expected a positive integer, got {text[:40]!r}")
    return int(text)


def max_batch_sizes() -> int:
    return _limit(BATCH_SIZES_ENV, DEFAULT_BATCH_SIZES)


def max_row_elements() -> int:
    return _limit(ROW_ELEMENTS_ENV, DEFAULT_ROW_ELEMENTS)


def max_batch_bytes() -> int:
    return _limit(BATCH_BYTES_ENV, DEFAULT_BATCH_BYTES)
