"""The `eager` convention's rows now live in the package `stepbill.engine.eager` (one module per block kind:
norms, attention, ffn, moe, outside); this module keeps the old import path working."""

from __future__ import annotations

from stepbill.engine.eager import (  # noqa: F401
    BLOCKS,
    EagerBytes,
    from_precision,
    outside_bytes,
    outside_rows,
    saved_bytes,
)
from stepbill.engine.eager.dtypes import INT64  # noqa: F401

_mha_eager = BLOCKS["mha"]
_swiglu_eager = BLOCKS["swiglu"]
