"""The engine's vocabulary as types: identities are enum members, never display strings.

- `Phase`: the part of the step a moment belongs to.
- `Part`: what a moment is, inside its phase (a layer's end, the LM head, a buffer event, ...); with the layer
  index it identifies a moment, so nothing matches moments by their printed labels.
- `Split`: how a kept tensor divides across the ranks of a layout (tensor, sequence, context, expert
  parallelism): one tag per activation row, set where the row is built.
"""

from __future__ import annotations

from enum import Enum


class _Word(str, Enum):
    """A str enum that prints as its value (JSON and f-strings show "forward", not "Phase.FORWARD")."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Phase(_Word):
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


class Part(_Word):
    """What a moment is. Layer parts carry the layer index on the Moment; the others have none."""

    LAYER_INNER = "inside layer"  # forward: a checkpointed layer at its largest op
    LAYER = "layer"  # forward: the layer's end; backward: while its backward runs (FFN part under eager)
    LAYER_NORM = "layer FFN input norm"  # eager backward: the FFN's input norm
    HEAD = "LM head and loss"  # forward end
    LOSS = "loss (log-softmax gradient)"  # eager backward
    HEAD_BACKWARD = "LM head"  # backward
    EMBEDDING = "embedding"  # backward end
    STEP = "optimizer step"
    # buffer events of a sharded layout (FSDP2): they sit between the timeline's own moments
    GATHER = "all-gather"
    COPY_OUT = "copy-out"
    POST_BACKWARD = "post-backward"
    ROOT_GATHER = "root all-gather"
    ROOT_POST_BACKWARD = "embedding and root post-backward"
    TEMPORARIES = "optimizer temporaries"


class Split(_Word):
    """How one kept tensor is divided on a rank (always ÷ cp: context parallelism splits every token-wise tensor).

    SEQ: residual-stream wide (hidden size, norm statistics, per-token ids): replicated across tp, split by tp only
         under sequence parallelism (Korthikanti et al. 2022 §4.2.2).
    TP: head-, FFN- or vocab-wide, inside a column→row parallel pair: ÷ tp (Megatron-LM, Shoeybi et al. 2019).
    EXPERT: a routed expert's FFN-wide rows: as SEQ (balanced routing: a rank's experts see as many token-expert
            pairs as its own tokens make) and ÷ etp (expert tensor parallelism splits the expert width).
    """

    SEQ = "seq"
    TP = "tp"
    EXPERT = "expert"
