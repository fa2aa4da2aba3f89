"""Communication of one training step per rank: every collective of every parallel axis, its volume over the
rank's busiest link, the link class it runs on, its time at that link's bandwidth, and whether it can hide
behind compute (the seed's "can it hide" column).

Volumes use engine/comm.py's ring formulas (all-reduce 2(N−1)/N·M, reduce-scatter / all-gather (N−1)/N·M,
all-to-all (N−1)/N·S). Counts per step: DP all-reduce once per step (gradient accumulation syncs only at the
last micro-batch, the seed's no_sync()); ZeRO-1 reduce-scatter + all-gather once; ZeRO-2 reduce-scatter every
micro-batch; ZeRO-3 all-gathers weights in forward and backward and reduce-scatters grads every micro-batch
(ZeRO §7.2: 2Ψ / 2Ψ / 3Ψ at one micro-batch); TP 4 all-reduces per layer per micro-batch (Megatron f/g pairs),
or 4 all-gathers + 4 reduce-scatters with SP (same volume); PP one activation forward and one gradient backward
per micro-batch per chunk; CP ring attention passes K/V cp−1 times in forward and K/V + dK/dV in backward; EP
4 all-to-alls (dispatch + combine, forward and backward) per MoE layer per micro-batch, balanced routing.

Recompute reruns forward collectives (engine/recompute/plan.Rerun): a checkpointed layer (full / every-K) runs its
whole forward again inside its backward — Megatron-LM's tensor_parallel.CheckpointFunction.backward calls the
wrapped forward, its TP all-reduces (or SP all-gather + reduce-scatter) and EP dispatch + combine included: 2 more
TP calls of each kind and 2 more all-to-alls per rebuilt layer per micro-batch. A rebuilt attention core (full,
every-K, selective core_attn, a budget that drops its output) passes its K/V ring once more: cp−1 more hops.
Selective / budget drop sets are taken to rerun no TP or EP collective (the ops they rebuild sit between them).

Placement (Megatron order tp, cp, dp, pp; experts etp, ep): a group of n ranks at stride k spans n·k
consecutive ranks and stays inside a node when n·k ≤ GPUs per node. Bytes are per rank, per step. A group that
spans nodes with l ≥ 2 of its ranks in each runs in two levels where the op allows: DP / ZeRO all-reduce,
reduce-scatter and all-gather hierarchically (`hierarchical_seconds`), an EP all-to-all on both links at once
(`all_to_all_seconds`: the node peers' share over NVLink, the rest over the network); TP, CP and PP groups that span
nodes run flat at the network's bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from stepbill.engine import comm
from stepbill.engine.line import Line
from stepbill.engine.memo import Memo, fields_except
from stepbill.engine.parallel.holdings import ResidentRecipe, row_item_elements
from stepbill.engine.parallel.layout import representative_stage, row_slice, stage_fractions, stage_layer_kinds
from stepbill.engine.params import ParamInventory, ParamTensor, param_inventory
from stepbill.engine.recompute.plan import NO_RERUN, Rerun
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe
from stepbill.spec.schema import hash_once

DEFAULT_GPUS_PER_NODE = 8
#: A GPU with no InfiniBand in the catalog (rtx-4090) still talks across nodes: over Ethernet, assumed one
#: 100 Gb/s NIC (12.5 GB/s per direction) carrying the ring's inter-node hop. An assumption, not a catalog figure.
ETHERNET_BYTES_PER_S = 12.5e9
ETHERNET_NOTE = "no InfiniBand: assumed 100 Gb/s Ethernet (12.5 GB/s per direction) across nodes"
HIDE = {
    "yes": "overlaps compute by construction (bucketed / prefetched / pipelined behind the next block)",
    "partly": "overlaps only with a schedule built for it; counted as exposed",
    "no": "on the critical path between dependent ops",
}


@hash_once
@dataclass(frozen=True)
class Collective:
    """One collective of the step on one rank: `bytes` over its busiest link per step, `seconds` at the link's
    per-direction bandwidth (None without a GPU, or when the link is absent), `overlap` yes / partly / no."""

    name: str
    axis: str
    op: str
    group: int
    scope: str
    link: str | None
    calls: int
    bytes: float
    seconds: float | None
    overlap: str
    line: Line
    local: int = 1  # ranks of its group inside one node when it runs in two levels (link "intra+inter"); else 1

    def __hash__(self) -> int:
        """Hashed without its line (made from the other fields; its inputs are a dict), once (hash_once): a timing
        memo's key (timing/comm_time.py)."""
        return hash((self.name, self.axis, self.op, self.group, self.scope, self.link, self.calls, self.bytes,
                     self.seconds, self.overlap, self.local))


def _scope(n: int, stride: int, per_node: int) -> str:
    return "intra-node" if n * stride <= per_node else "inter-node"


def _ranks_per_node(stride: int, per_node: int) -> int:
    """Ranks of a group at `stride` inside one node (at least 1): the `local` of a two-level collective (`_timed`
    caps it at the group and runs two levels only when it divides the group)."""
    return max(1, per_node // stride)


def rank_param_elements(spec: ModelSpec, recipe: Recipe | ResidentRecipe, inv: ParamInventory) -> dict[str, float]:
    """Pre-ZeRO elements one rank of the largest stage holds: {dense_grads, dense_weights, expert_*}. Memoised on
    what it reads when `inv` is the model's own inventory: the model, the precision, optimizer and LoRA (each row's
    elements) and what a row's fraction reads of the layout (layout.stage_fractions: the stage split pp / vpp /
    pp_layers, tp and ep·etp) — so a planner's layouts that differ in dp, cp, ZeRO, the schedule, sp, offload or
    micro-batches share one entry."""
    if inv is not param_inventory(spec):
        return _rank_param_elements(spec, recipe, inv)
    par = recipe.parallel
    key = (spec, recipe.precision, recipe.optimizer, recipe.lora, par.pp, par.vpp, par.pp_layers, par.tp,
           par.ep * par.expert_tp)
    return dict(_HELD_ELEMENTS.get(key, _rank_param_elements, spec, recipe, inv))


_HELD_ELEMENTS = Memo(4096)


def _rank_param_elements(spec: ModelSpec, recipe: Recipe | ResidentRecipe, inv: ParamInventory) -> dict[str, float]:
    kinds = stage_layer_kinds(spec, recipe.parallel)
    own = inv is param_inventory(spec)
    rows = _own_row_elements(spec, ResidentRecipe(recipe.precision, recipe.optimizer, recipe.lora, None)) if own \
        else _row_elements(inv.tensors, recipe)
    best: dict[str, float] = {}
    for stage in range(recipe.parallel.pp):
        if representative_stage(spec, recipe.parallel, stage) != stage:
            continue  # holds what an earlier stage holds: the same totals, never strictly larger
        tot = {"dense_grads": 0.0, "dense_weights": 0.0, "expert_grads": 0.0, "expert_weights": 0.0}
        fractions = stage_fractions(spec, recipe.parallel, stage) if own else \
            [row_slice(spec, recipe.parallel, t, stage, kinds).fraction for t in inv.tensors]
        for (grads_key, weights_key, grads, weights), fraction in zip(rows, fractions, strict=True):
            tot[grads_key] += grads * fraction
            tot[weights_key] += weights * fraction
        if sum(tot.values()) > sum(best.values()):
            best = tot
    return best


def _row_elements(tensors: tuple[ParamTensor, ...], recipe: Recipe | ResidentRecipe
                  ) -> tuple[tuple[str, str, float, float], ...]:
    """Per row: (its grads key, its weights key, grad elements, weight elements with the frozen base) over all its
    copies — what one rank's slice fraction multiplies."""
    out = []
    for t in tensors:
        items = row_item_elements(t, recipe)
        side = "expert" if t.component == "experts" else "dense"
        out.append((f"{side}_grads", f"{side}_weights", items["grads"],
                    items["weights"] + items.get("weights.frozen", 0.0)))
    return tuple(out)


@lru_cache(maxsize=256)
def _own_row_elements(spec: ModelSpec, recipe: ResidentRecipe) -> tuple[tuple[str, str, float, float], ...]:
    """_row_elements of the model's own inventory, once per model, precision, optimizer and LoRA (`recipe` carries
    no layout): shared, read it only."""
    return _row_elements(param_inventory(spec).tensors, recipe)


@lru_cache(maxsize=8192)
def _data_parallel(side: str, zero: int, shard_group: int | None, m: int, group: int, stride: int, g_bytes: float,
                   w_bytes: float, per_node: int, gpu: GPU | None) -> tuple[Collective, ...]:
    """The DP / ZeRO collectives of one side (dense or expert parameters) of a rank: `group` ranks at `stride`
    replicate them, `g_bytes` / `w_bytes` its gradient and weight bytes. Memoised on these numbers (a planner's
    layouts share a side's across the other side's axes)."""
    rows: list[tuple] = []
    io = {"grad_bytes": g_bytes, "weight_bytes": w_bytes}
    shard = min(shard_group or group, group)
    if group == 1:
        return ()
    sc = _scope(shard, stride, per_node)
    local = _ranks_per_node(stride, per_node)  # hierarchical DP / ZeRO collectives
    if zero == 0:
        rows.append((f"{side}.grad_allreduce", "dp", "all-reduce", group, _scope(group, stride, per_node), 1,
                     comm.ring_allreduce_link_bytes(group, g_bytes), "yes", "2(N−1)/N × {grad_bytes} B", io, local))
        return _timed(rows, gpu)
    if shard > 1:
        rs_calls = 1 if zero == 1 else m
        rows.append((f"{side}.zero_reduce_scatter", "zero", "reduce-scatter", shard, sc, rs_calls,
                     comm.ring_half_link_bytes(shard, g_bytes), "yes", "(N−1)/N × {grad_bytes} B", io, local))
        if zero == 3:
            rows.append((f"{side}.zero3_allgather_fwd", "zero", "all-gather", shard, sc, m,
                         comm.ring_half_link_bytes(shard, w_bytes), "yes", "(N−1)/N × {weight_bytes} B, prefetched", io,
                         local))
            rows.append((f"{side}.zero3_allgather_bwd", "zero", "all-gather", shard, sc, m,
                         comm.ring_half_link_bytes(shard, w_bytes), "yes", "(N−1)/N × {weight_bytes} B, prefetched", io,
                         local))
        else:
            rows.append((f"{side}.zero_allgather_weights", "zero", "all-gather", shard, sc, 1,
                         comm.ring_half_link_bytes(shard, w_bytes), "partly",
                         "(N−1)/N × {weight_bytes} B after the optimizer step", io, local))
    replicas = group // shard
    if replicas > 1:  # hybrid sharding: each shard all-reduced across the replica groups
        rows.append((f"{side}.hybrid_replica_allreduce", "dp", "all-reduce", replicas,
                     _scope(replicas, stride * shard, per_node), 1,
                     comm.ring_allreduce_link_bytes(replicas, g_bytes / shard), "yes", "2(N−1)/N × {grad_bytes} B / g", {**io, "g": shard}))
    return _timed(rows, gpu)


def step_collectives(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, gpu: GPU | None = None,
                     rerun: Rerun = NO_RERUN) -> list[Collective]:
    """Every collective of one step on one rank of the largest pipeline stage; `rerun` (the recompute plan's
    RecomputePlan.rerun) adds the forward collectives its backward runs again. Memoised when `inv` is the model's
    own inventory, in two parts, each on the fields it reads: the gradient syncs (`grad_sync_key`: not the tokens,
    the recompute or sp) and the activation traffic (`activation_key` and `rerun`: not ZeRO, the optimizer or
    offload), so a planner's micro-batch, sp and recompute variants of a layout share its gradient syncs and its
    ZeRO and offload variants share the activation traffic; the list is new (the Collectives are frozen)."""
    if inv is not param_inventory(spec):
        return _step_collectives(spec, recipe, inv, gpu, rerun)
    if recipe.parallel.world == 1:
        return []
    return [*_GRAD_SYNCS.get((spec, grad_sync_key(recipe), gpu), _grad_syncs, spec, recipe, inv, gpu),
            *_ACTIVATION_TRAFFIC.get((spec, activation_key(recipe), gpu, rerun), _activation_traffic, spec, recipe,
                                     gpu, rerun)]


#: What the gradient syncs (_grad_syncs) never read: the tokens, the recompute policy (its reruns are activation
#: traffic), the optimizer implementation, the device; sp and offload of the layout. Every other field is in the key
#: (tests/test_comm_step.py checks both halves of the split on recipes that differ only in the unread fields).
_GRAD_SYNC_RECIPE = fields_except(Recipe, {"micro_batch", "seq_len", "recompute", "optimizer_impl", "device",
                                           "parallel"})
_GRAD_SYNC_LAYOUT = fields_except(Parallel, {"sp", "offload_optimizer", "offload_activations"})
#: What the activation traffic (_activation_traffic) never reads: the optimizer, LoRA, the recompute policy (it
#: comes as `rerun`), the optimizer implementation, the device; ZeRO, its shard group and offload of the layout.
_ACTIVATION_RECIPE = fields_except(Recipe, {"optimizer", "lora", "recompute", "optimizer_impl", "device", "parallel"})
_ACTIVATION_LAYOUT = fields_except(Parallel, {"zero", "shard_group", "offload_optimizer", "offload_activations"})


def grad_sync_key(recipe: Recipe) -> tuple:
    """The fields of `recipe` its DP / ZeRO collectives read (with the model and the GPU: their memo key)."""
    return _GRAD_SYNC_RECIPE(recipe), _GRAD_SYNC_LAYOUT(recipe.parallel)


def activation_key(recipe: Recipe) -> tuple:
    """The fields of `recipe` its TP / PP / CP / EP collectives read (with the model, the GPU and the rerun: their
    memo key)."""
    return _ACTIVATION_RECIPE(recipe), _ACTIVATION_LAYOUT(recipe.parallel)


_GRAD_SYNCS = Memo(4096)
#: small tuples of the per-axis memos' shared Collectives: DeepSeek-V3 × 64 holds ~29,000 keys, × 2,048 ~150,000
_ACTIVATION_TRAFFIC = Memo(1 << 18)


def _step_collectives(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, gpu: GPU | None,
                      rerun: Rerun) -> list[Collective]:
    if recipe.parallel.world == 1:  # one GPU talks to nobody (offload traffic is PCIe to the host, not a collective)
        return []
    return [*_grad_syncs(spec, recipe, inv, gpu), *_activation_traffic(spec, recipe, gpu, rerun)]


def _grad_syncs(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, gpu: GPU | None) -> tuple[Collective, ...]:
    """The DP / ZeRO collectives of the dense and the expert parameters (_data_parallel's rows)."""
    par, p = recipe.parallel, recipe.precision
    per_node = gpu.gpus_per_node if gpu else DEFAULT_GPUS_PER_NODE
    elems = rank_param_elements(spec, recipe, inv)
    zero, shard_group, m = par.zero, par.shard_group, par.micro_batches
    out = _data_parallel("dense", zero, shard_group, m, par.dp * par.cp, par.tp, elems["dense_grads"] * p.grads,
                         elems["dense_weights"] * p.weights, per_node, gpu)
    if spec.moe is not None:
        out += _data_parallel("expert", zero, shard_group, m, par.edp, par.expert_tp * par.ep,
                              elems["expert_grads"] * p.grads, elems["expert_weights"] * p.weights, per_node, gpu)
    return out


def _activation_traffic(spec: ModelSpec, recipe: Recipe, gpu: GPU | None, rerun: Rerun) -> tuple[Collective, ...]:
    """The collectives that move activations: TP, PP, CP, EP (with what the recompute reruns). Each axis's are
    memoised on the numbers they read (a planner's layouts share them across the other axes)."""
    par, p = recipe.parallel, recipe.precision
    per_node = gpu.gpus_per_node if gpu else DEFAULT_GPUS_PER_NODE
    m, h = par.micro_batches, spec.hidden_size
    # the stages' layer kinds read the layout's pp, vpp and pp_layers only (parallel/layout._stage_layers)
    layers, moe_layers, rebuilt, rebuilt_moe, rebuilt_attn = _STAGE_COUNTS.get(
        (spec, par.pp, par.vpp, par.pp_layers, rerun), _stage_counts, spec, par, rerun)
    local_tokens = recipe.tokens / par.cp
    act = local_tokens * h * p.activation
    out: tuple[Collective, ...] = ()
    if par.tp > 1:
        out += _tp_traffic(par.tp, par.sp, act, layers, rebuilt, m, per_node, gpu)
    if par.pp > 1:
        out += _pp_traffic(act / (par.tp if par.sp else 1), par.tp * par.cp * par.dp, m, par.vpp, per_node, gpu)
    if par.cp > 1:
        a = spec.attention
        kv = local_tokens * a.kv_heads / par.tp * (a.qk_head_dim + a.v_dim) * p.activation
        out += _cp_traffic(par.cp, par.tp, kv, layers, rebuilt_attn, m, per_node, gpu)
    if par.ep > 1 and moe_layers:
        assert spec.moe is not None
        send = local_tokens / (par.tp if par.sp else 1) * spec.moe.top_k * h * p.activation
        out += _ep_traffic(par.ep, par.expert_tp, send, moe_layers, rebuilt_moe, m, per_node, gpu)
    return out


_STAGE_COUNTS = Memo(4096)


def _stage_counts(spec: ModelSpec, par: Parallel, rerun: Rerun) -> tuple[int, int, int, int, int]:
    """(layers, MoE layers, layers whose forward the backward reruns (TP, EP), rerun MoE layers, layers whose
    attention core it reruns (CP)), each the most over the pipeline's stages."""
    kinds = stage_layer_kinds(spec, par)
    layers = max(sum(k.values()) for k in kinds)
    moe_layers = max(k.get("moe", 0) for k in kinds)
    rebuilt = max(sum(n for kind, n in k.items() if kind in rerun.forward) for k in kinds)
    rebuilt_moe = max(k.get("moe", 0) for k in kinds) if "moe" in rerun.forward else 0
    rebuilt_attn = max(sum(n for kind, n in k.items() if kind in rerun.attention_core) for k in kinds)
    return layers, moe_layers, rebuilt, rebuilt_moe, rebuilt_attn


@lru_cache(maxsize=4096)
def _tp_traffic(tp: int, sp: bool, act: float, layers: int, rebuilt: int, m: int, per_node: int,
                gpu: GPU | None) -> tuple[Collective, ...]:
    """TP: 4 all-reduces per layer per micro-batch (or all-gather + reduce-scatter under SP), 2 more per rebuilt
    layer; `act` the activation bytes of a micro-batch on the rank."""
    sc = _scope(tp, 1, per_node)
    calls = (4 * layers + 2 * rebuilt) * m
    per = "4 per layer" + (" + 2 per rebuilt layer (recompute)" if rebuilt else "") + " per micro-batch"
    if sp:
        return _timed([(f"tp.{op}", "tp", op, tp, sc, calls, comm.ring_half_link_bytes(tp, act), "no",
                        "(t−1)/t × {act_bytes} B, " + per, {"act_bytes": act})
                       for op in ("all-gather", "reduce-scatter")], gpu)
    return _timed([("tp.allreduce", "tp", "all-reduce", tp, sc, calls, comm.ring_allreduce_link_bytes(tp, act), "no",
                    "2(t−1)/t × {act_bytes} B, " + per, {"act_bytes": act})], gpu)


@lru_cache(maxsize=4096)
def _pp_traffic(msg: float, stride: int, m: int, vpp: int, per_node: int, gpu: GPU | None) -> tuple[Collective, ...]:
    """PP: one activation forward and one gradient backward per micro-batch per chunk (`stride`: tp·cp·dp)."""
    return _timed([("pp.p2p", "pp", "send/recv", 2, _scope(2, stride, per_node), 2 * m * vpp, msg, "partly",
                    "activation forward + gradient backward: {act_bytes} B each", {"act_bytes": msg})], gpu)


@lru_cache(maxsize=4096)
def _cp_traffic(cp: int, tp: int, kv: float, layers: int, rebuilt_attn: int, m: int, per_node: int,
                gpu: GPU | None) -> tuple[Collective, ...]:
    """CP: the K/V ring, cp−1 hops per layer forward, K/V + dK/dV backward, forward again per rebuilt core."""
    return _timed([("cp.kv_ring", "cp", "send/recv", cp, _scope(cp, tp, per_node), (3 * layers + rebuilt_attn) * (cp - 1) * m,
                    kv, "yes", "local K/V block {kv_bytes} B, cp−1 hops forward, K/V + dK/dV backward"
                    + (", forward again in each rebuilt attention core (recompute)" if rebuilt_attn else ""),
                    {"kv_bytes": kv})], gpu)


@lru_cache(maxsize=4096)
def _ep_traffic(ep: int, etp: int, send: float, moe_layers: int, rebuilt_moe: int, m: int, per_node: int,
                gpu: GPU | None) -> tuple[Collective, ...]:
    """EP: dispatch + combine all-to-alls, forward and backward, per MoE layer per micro-batch (2 more per rebuilt
    MoE layer); `send` the bytes a rank sends per all-to-all (top-k copies of its tokens)."""
    local = _ranks_per_node(etp, per_node)  # the EP group's ranks sit at stride etp
    return _timed([("ep.all_to_all", "ep", "all-to-all", ep, _scope(ep, etp, per_node),
                    (4 * moe_layers + 2 * rebuilt_moe) * m, comm.all_to_all_link_bytes(ep, send), "partly",
                    "(ep−1)/ep × {send_bytes} B (top-k × tokens × h), dispatch + combine, forward + backward"
                    + (", forward again in each rebuilt MoE layer (recompute)" if rebuilt_moe else ""),
                    {"send_bytes": send}, local)], gpu)


def _timed(rows: list[tuple], gpu: GPU | None) -> tuple[Collective, ...]:
    """The Collectives of (name, axis, op, group, scope, calls, bytes_per_call, overlap, formula, inputs[, local])
    rows: each on its link at its bandwidth (hierarchical across nodes when `local` ranks of it share a node)."""
    out = []
    for name, axis, op, group, scope, calls, per_call, overlap, formula, inputs, *extra in rows:
        link, bw = _link(gpu, scope)
        total = calls * float(per_call)
        seconds = total / bw if bw else None
        note = ETHERNET_NOTE if link == "ethernet" else ""
        local = min(extra[0], group) if extra else 1
        two_levels = op in _LEVELS or op == "all-to-all"
        if gpu is not None and scope == "inter-node" and local >= 2 and group % local == 0 and two_levels:
            # InfiniBand: one NIC per GPU; the assumed Ethernet NIC is one per node, shared by its `local` ranks
            inter_bw = bw / local if link == "ethernet" else bw
            intra_bw = gpu.link_bytes_per_s(gpu.intra_node_link)
            if op == "all-to-all":
                per_call_s = all_to_all_seconds(float(per_call), group, local, intra_bw, inter_bw)
                how = (f"two links at once: the {local - 1} peers in its node over {gpu.intra_node_link}, the "
                       f"{group - local} in other nodes over {link}; ")
            else:
                per_call_s = hierarchical_seconds(op, float(per_call), group, local, intra_bw, inter_bw)
                how = (f"hierarchical: {local} ranks per node over {gpu.intra_node_link}, {group // local} nodes "
                       f"over {link}; ")
            seconds, link = calls * per_call_s, f"{gpu.intra_node_link}+{link}"
            note = (how + note).rstrip("; ")
        else:
            local = 1
        line = Line(f"comm.{name}", total, "bytes", "{calls} calls × " + formula,
                    {"calls": calls, **inputs, "per_call_bytes": float(per_call)}, convention=note)
        out.append(Collective(name, axis, op, group, scope, link, calls, total, seconds, overlap, line, local))
    return tuple(out)


#: ring volume per rank as a multiple of the message M, for a group of n: all-reduce 2(n−1)/n, the others (n−1)/n
_LEVELS = {"all-reduce": 2.0, "reduce-scatter": 1.0, "all-gather": 1.0}


def hierarchical_seconds(op: str, ring_bytes: float, group: int, local: int, intra_bw: float, inter_bw: float) -> float:
    """Seconds of one all-reduce / reduce-scatter / all-gather over `group` ranks, `local` of them in each node, run
    hierarchically (Jia et al. 2018, arXiv 1807.11205 §4.2; NCCL's multi-node rings do the same in effect): the
    node's `local` ranks work over the intra-node link on the whole message M, and each rank carries 1/local of
    it across nodes on its own NIC. `ring_bytes` is the flat ring's per-rank volume, k(N−1)/N · M (k = 2 for
    all-reduce, 1 otherwise).

        t = k(l−1)/l · M / intra_bw + k(n−1)/n · (M / l) / inter_bw,   n = group / local nodes
    """
    k = _LEVELS[op]
    message = ring_bytes / (k * (group - 1) / group)
    nodes = group // local
    intra = k * (local - 1) / local * message / intra_bw
    inter = k * (nodes - 1) / nodes * (message / local) / inter_bw if nodes > 1 else 0.0
    return intra + inter


def all_to_all_seconds(sent_bytes: float, group: int, local: int, intra_bw: float, inter_bw: float) -> float:
    """Seconds of one all-to-all over `group` ranks, `local` of them in each node: a rank sends S/group to each peer
    (`sent_bytes` = (group−1)/group · S, what it sends off itself), to its local − 1 node peers over the intra-node
    link and to the group − local others over its network link, both at once — NCCL runs an all-to-all as one group
    of point-to-point sends and receives to every peer (nccl-tests src/alltoall.cu: ncclGroupStart, ncclSend /
    ncclRecv per peer, ncclGroupEnd), each on the link to that peer:

        t = max((local − 1)/group · S / intra_bw, (group − local)/group · S / inter_bw)
    """
    message = sent_bytes * group / (group - 1)
    return max((local - 1) / group * message / intra_bw, (group - local) / group * message / inter_bw)


def _link(gpu: GPU | None, scope: str) -> tuple[str | None, float]:
    """The link class a collective of `scope` runs on and its per-direction bandwidth (B/s): NVLink (or PCIe
    without it) inside a node; InfiniBand across nodes, or the assumed Ethernet NIC on parts without one. A ring
    that spans nodes runs at its slowest hop, the inter-node one."""
    if gpu is None:
        return None, 0.0
    if scope == "intra-node":
        return gpu.intra_node_link, gpu.link_bytes_per_s(gpu.intra_node_link)
    if gpu.infiniband_bytes_per_s > 0:
        return "infiniband", gpu.infiniband_bytes_per_s
    return "ethernet", ETHERNET_BYTES_PER_S
