"""Who holds what: how a parallel layout slices parameters (`layout`), what a rank holds (`holdings`), the layout's
buffers (`buffers`), each rank class's timeline and memory
(`ranks`, built on `rank_class` and a rank's share of the one-GPU bill, `rank_share`; the worst class alone: `worst_stage`), the measured FSDP2 / ZeRO-1 rules (`fsdp2`, `fsdp2_moments`, `fsdp2_ranks`)
and the step's collectives (`collectives`)."""

from stepbill.engine.parallel.buffers import DDP_BUCKET_BYTES
from stepbill.engine.parallel.holdings import item_bytes_per_element, row_item_elements
from stepbill.engine.parallel.rank_class import (
    APPROXIMATE,
    IDEAL,
    MEASURED_EXACT,
    MEMORY_KEYS,
    RankClass,
    SingleRank,
)
from stepbill.engine.parallel.rank_share import in_flight_microbatches, row_divisor
from stepbill.engine.parallel.ranks import one_gpu_timeline, rank_classes, worst_rank

__all__ = ["APPROXIMATE", "DDP_BUCKET_BYTES", "IDEAL", "MEASURED_EXACT", "MEMORY_KEYS", "RankClass", "SingleRank",
           "in_flight_microbatches", "item_bytes_per_element", "one_gpu_timeline", "rank_classes", "row_divisor",
           "row_item_elements", "worst_rank"]
