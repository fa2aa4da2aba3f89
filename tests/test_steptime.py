"""Step time, MFU and HFU conventions (issue 10): PaLM's model FLOPs, nanoGPT's estimate_mfu, recompute charged
for every policy, per-dtype peaks, offload and cross-node traffic that cost time."""

from __future__ import annotations

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.params import param_inventory
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe

H100 = load_gpu("h100-sxm")
POLICIES = ("none", "selective:core_attn", "selective:core_attn,mlp", "every:1", "every:4", "every:auto", "full",
            "budget:10GiB")


def test_model_flops_match_nanogpt_estimate_mfu() -> None:
    """nanoGPT's model.py estimate_mfu: N = get_num_params() (all parameters but the position table `wpe`; the
    token table is the tied LM head), flops_per_token = 6N + 12·L·H·Q·T, × T per sequence."""
    spec = load_preset("gpt3-125m")
    inv = param_inventory(spec)
    wpe = next(t for t in inv.tensors if t.name == "embed_positions.weight")
    n = inv.total - wpe.shape[0] * wpe.shape[1]
    L, H, Q, T = spec.n_layers, spec.attention.n_heads, spec.hidden_size // spec.attention.n_heads, 1024
    bill = make_bill(spec, make_recipe(seq_len=T, micro_batch=2))
    assert bill["flops.model"].value == (6 * n + 12 * L * H * Q * T) * T * 2
    assert bill["flops.model_causal"].value == (6 * n + 6 * L * H * Q * T) * T * 2


def test_model_flops_palm_appendix_b_llama2_7b() -> None:
    """PaLM appendix B by hand for llama2-7b at 4,096: N = 6,738,415,616 − 131,072,000 embedding lookups,
    12·L·H·Q·T = 12 × 32 × 32 × 128 × 4096."""
    bill = make_bill(load_preset("llama2-7b"), make_recipe(seq_len=4096))
    per_token = 6 * (6_738_415_616 - 131_072_000) + 12 * 32 * 32 * 128 * 4096
    assert bill["flops.model"].value == per_token * 4096
    assert "2204.02311" in bill["flops.model"].provenance


@pytest.mark.parametrize("policy", POLICIES)
def test_full_square_never_below_causal(policy: str) -> None:
    """W5: every full-square figure ≥ its causal twin, for every policy (gpt3-175b under full was 2.71 < 2.90)."""
    spec = load_preset("gpt3-1.3b")
    bill = make_bill(spec, make_recipe(seq_len=2048, recompute=policy))
    assert bill["flops.step_full_square"].value >= bill["flops.step"].value
    assert bill["flops.recompute_full_square"].value >= bill["flops.recompute"].value
    assert bill["flops.model"].value >= bill["flops.model_causal"].value


def test_gpt3_175b_full_recompute_w5() -> None:
    """W5's reproduction: gpt3-175b at 2,048 under full recompute, full square 2.94 ≥ causal 2.90 PFLOP."""
    bill = make_bill(load_preset("gpt3-175b"), make_recipe(seq_len=2048, recompute="full"))
    assert round(bill["flops.step"].value / 1e15, 2) == 2.90
    assert round(bill["flops.step_full_square"].value / 1e15, 2) == 2.94


@pytest.mark.parametrize("policy", POLICIES)
def test_recompute_charged_for_every_policy(policy: str) -> None:
    """W4, --efficiency override: the step's compute time grows by exactly the policy's recompute FLOPs at that
    efficiency, and HFU > MFU whenever they are > 0 (HFU = MFU without recompute)."""
    spec = load_preset("llama3-8b")
    base = make_bill(spec, make_recipe(seq_len=4096), gpu=H100, efficiency=0.5)
    bill = make_bill(spec, make_recipe(seq_len=4096, recompute=policy), gpu=H100, efficiency=0.5)
    assert base.time is not None and bill.time is not None
    rc = bill.plan.recompute_flops()
    assert bill.time["time.recompute_flops"].value == rc
    extra = bill.time["time.compute"].value - base.time["time.compute"].value
    assert extra == pytest.approx(rc / (H100.bf16_flops * 0.5), rel=1e-9, abs=1e-12)
    if rc > 0:
        assert bill.time["time.step"].value > base.time["time.step"].value
        assert bill.time["time.hfu"].value > bill.time["time.mfu"].value
    else:
        assert bill.time["time.hfu"].value == pytest.approx(bill.time["time.mfu"].value)


@pytest.mark.parametrize("policy", POLICIES)
def test_recompute_charged_per_op(policy: str) -> None:
    """W4 under the per-op model (the default): recompute FLOPs > 0 cost GEMM, attention and memory-bound time, the
    step grows and HFU > MFU; a policy that rebuilds nothing changes nothing."""
    spec = load_preset("llama3-8b")
    base = make_bill(spec, make_recipe(seq_len=4096), gpu=H100)
    bill = make_bill(spec, make_recipe(seq_len=4096, recompute=policy), gpu=H100)
    assert base.time is not None and bill.time is not None
    rc = bill.plan.recompute_flops()
    if rc > 0:
        assert bill.time["time.compute"].value > base.time["time.compute"].value
        assert bill.time["time.memory_bound"].value > base.time["time.memory_bound"].value
        assert bill.time["time.step"].value > base.time["time.step"].value
        assert bill.time["time.hfu"].value > bill.time["time.mfu"].value
    else:
        assert bill.time["time.step"].value == pytest.approx(base.time["time.step"].value)
        assert bill.time["time.hfu"].value == pytest.approx(bill.time["time.mfu"].value)


def test_fp32_recipe_timed_at_fp32_peak() -> None:
    """--recipe fp32 runs true-fp32 GEMMs (PyTorch keeps TF32 off for matmuls): H100 SXM's 66.9 TFLOPS, not bf16."""
    spec = load_preset("gpt3-125m")
    fp32 = make_bill(spec, make_recipe("fp32", seq_len=1024), gpu=H100, efficiency=0.5)
    bf16 = make_bill(spec, make_recipe("mixed-bf16", seq_len=1024), gpu=H100, efficiency=0.5)
    assert fp32.time is not None and bf16.time is not None
    assert fp32.time["time.peak"].value == pytest.approx(66.9e12)
    assert bf16.time["time.peak"].value == pytest.approx(989.4e12)
    assert "TF32" in fp32.time["time.peak"].convention
    assert fp32.time["time.compute"].value == pytest.approx(bf16.time["time.compute"].value * 989.4 / 66.9)
    fp32_op = make_bill(spec, make_recipe("fp32", seq_len=1024), gpu=H100)  # per-op: GEMMs at the FP32 peak too
    bf16_op = make_bill(spec, make_recipe("mixed-bf16", seq_len=1024), gpu=H100)
    assert fp32_op.time is not None and bf16_op.time is not None
    assert fp32_op.time["time.gemm"].value > 10 * bf16_op.time["time.gemm"].value


def test_optimizer_offload_costs_time() -> None:
    """W10: llama3-70b, 8 × H100, ZeRO-3, full recompute: offloading the optimizer adds the CPU Adam step and the
    weights' copy back up (exposed), and streams the gradients down (hideable)."""
    spec = load_preset("llama3-70b")

    def bill(offload: bool):  # type: ignore[no-untyped-def]
        par = Parallel(dp=8, zero=3, offload_optimizer=offload)
        return make_bill(spec, make_recipe(seq_len=8192, recompute="full", parallel=par), gpu=H100)

    on, off = bill(True), bill(False)
    assert on.time is not None and off.time is not None
    owned = param_inventory(spec).total / 8
    cpu = on.time["time.offload_cpu_optimizer"].value
    assert cpu == pytest.approx(owned * 8 / 4e9, rel=1e-6)
    # PCIe Gen5 x16, 64 GB/s, at the 0.8 a copy moves (an H100 measures 52.8 GB/s device → host)
    assert on.time["time.offload_weights_up"].value == pytest.approx(owned * 2 / (0.8 * 64e9), rel=1e-6)
    assert on.time["time.step"].value >= off.time["time.step"].value + cpu
    assert "time.offload_cpu_optimizer" not in off.time.lines


def test_activation_offload_costs_pcie_time() -> None:
    """Kept activations go down in the forward and come back in the backward: 2 × kept bytes over PCIe, hideable
    behind compute; when PCIe is slower than compute the excess is on the step."""
    spec = load_preset("llama2-7b")
    par = Parallel(dp=2, offload_activations=True)
    bill = make_bill(spec, make_recipe(seq_len=4096, micro_batch=8, parallel=par), gpu=load_gpu("l40s"))
    assert bill.time is not None
    t = bill.time["time.offload_activations"].value
    assert t > 0 and bill.time["time.offload_hideable"].value == t
    spill = bill.time["time.comm_spill"]  # per-op: the network's unhidden part or PCIe's excess over the kernels
    assert spill.value == pytest.approx(max(spill.inputs["h"], t - bill.time["time.roofline"].value))
    assert spill.value >= t - bill.time["time.roofline"].value


def test_activation_offload_moves_what_autograd_saves_in_every_convention() -> None:
    """The PCIe traffic of activation offload is the eager convention's kept bytes (every tensor autograd saves, as
    save_on_cpu moves it), so the step time does not depend on the convention the bill is shown in: Llama-3-8B at
    seq 8K, micro-batch 32 over cp 8 on 8 H100 — the ideal convention's 128 GiB a micro-batch made it 17.37 s, fully
    hidden; the eager one's 196 GiB spill over the kernels (at PCIe's 0.8 a copy moves)."""
    spec = load_preset("llama3-8b")
    par = Parallel(dp=1, cp=8, zero=3, micro_batches=4, offload_activations=True)
    recipe = make_recipe(seq_len=8192, micro_batch=32, parallel=par)
    bills = {c: make_bill(spec, recipe, convention=c, gpu=load_gpu("h100-sxm")) for c in ("ideal", "eager")}
    eager_worst = max(bills["eager"].ranks, key=lambda c: c.memory["peak"])
    kept = eager_worst.cpu["activations"] / eager_worst.in_flight
    for bill in bills.values():
        assert bill.time is not None
        line = bill.time["time.offload_activations"]
        assert line.inputs["kept"] == kept and "eager convention" in line.convention
        assert line.value == pytest.approx(2 * kept * 4 / (0.8 * 64e9), rel=1e-12)
        # (the kernels' time differs by ~1e-10 between conventions: a memory-bound term reads the shown rank)
        eager_step = bills["eager"].time["time.step"].value  # type: ignore[index]
        assert bill.time["time.step"].value == pytest.approx(eager_step, rel=1e-9)
    ideal_worst = max(bills["ideal"].ranks, key=lambda c: c.memory["peak"])
    assert ideal_worst.cpu["activations"] < 0.7 * kept  # the ideal convention leaves saved tensors out


def test_cross_node_without_infiniband_is_not_free() -> None:
    """rtx-4090 has no InfiniBand: dp 16 spans two 8-GPU nodes, so the all-reduce runs over the assumed 100 Gb/s
    Ethernet and costs time (it used to be free: MFU 50 %)."""
    spec = load_preset("gpt3-1.3b")
    gpu = load_gpu("rtx-4090")
    one = make_bill(spec, make_recipe(seq_len=2048, parallel=Parallel(dp=8, zero=1)), gpu=gpu)
    two = make_bill(spec, make_recipe(seq_len=2048, parallel=Parallel(dp=16, zero=1)), gpu=gpu)
    assert two.time is not None and one.time is not None
    assert all(c.seconds is not None for c in two.collectives)
    cross = [c for c in two.collectives if c.scope == "inter-node"]
    assert cross and all(c.link == "pcie+ethernet" for c in cross)
    # hierarchical: 8 ranks per node over PCIe on the whole message, then 1/8 of it each across the one shared NIC
    (rs,) = [c for c in cross if c.op == "reduce-scatter"]
    message = rs.bytes / (15 / 16)
    assert rs.seconds == pytest.approx(7 / 8 * message / 32e9 + 1 / 2 * (message / 8) / (12.5e9 / 8))
    assert two.time["time.mfu"].value < 0.3 < one.time["time.mfu"].value


def test_hierarchical_allreduce_on_infiniband() -> None:
    """dp 64 of llama3-8b on H100 nodes: 8 ranks per node over NVLink on the whole gradient, 1/8 of it per rank over
    its own InfiniBand NIC across 8 nodes (Jia et al. 2018): far faster than a flat ring at the NIC's 50 GB/s."""
    spec = load_preset("llama3-8b")
    bill = make_bill(spec, make_recipe(seq_len=8192, parallel=Parallel(dp=64)), gpu=H100)
    (ar,) = bill.collectives
    grads = param_inventory(spec).total * 2
    assert ar.link == "nvlink+infiniband" and "hierarchical" in ar.line.convention
    assert ar.seconds == pytest.approx(2 * 7 / 8 * grads / 450e9 + 2 * 7 / 8 * grads / 8 / 50e9)
    assert ar.seconds < ar.bytes / 50e9


@pytest.mark.parametrize(("model", "lora", "policy"), [("llama2-7b", None, "none"), ("llama2-7b", 16, "selective:core_attn"),
                                                       ("deepseek-v3", None, "full"), ("mixtral-8x7b", 8, "every:2")])
def test_stage_flops_sum_to_the_step(model: str, lora: int | None, policy: str) -> None:
    """The per-stage FLOPs the step time reads add up to flops.step over all the layers, head and LoRA terms."""
    from stepbill.engine.flops import layer_counts, stage_step_flops

    spec = load_preset(model)
    recipe = make_recipe(seq_len=1024, lora_rank=lora, recompute=policy)
    bill = make_bill(spec, recipe)
    assert bill.plan is not None
    per_token = {k: lp.recompute_flops for k, lp in bill.plan.layers.items()}
    whole = stage_step_flops(spec, bill.inventory, 1024, 1, layer_counts(spec), True, True, per_token, recipe.lora,
                             bill.plan.policy.kind in ("full", "every"))  # checkpointing: layer 0 computes its dgrad
    assert whole == pytest.approx(bill["flops.step"].value, rel=1e-12)


def test_uneven_stages_time_the_busiest_stage() -> None:
    """pp 2 with 24 + 8 layers: the compute time is the 24-layer stage's, not the average (16 + head)."""
    spec = load_preset("llama2-7b")

    def bill(layers: str | None):  # type: ignore[no-untyped-def]
        par = Parallel(pp=2, micro_batches=8, pp_layers=None if layers is None else tuple(map(int, layers.split(","))))
        return make_bill(spec, make_recipe(seq_len=2048, parallel=par), gpu=H100)

    even, uneven = bill(None), bill("24,8")
    assert even.time is not None and uneven.time is not None
    assert uneven.time["time.rank_flops"].inputs["stage"] == 0
    assert even.time["time.rank_flops"].inputs["stage"] == 1  # 16 layers + the LM head
    layer = 3 * 2048 * (2 * (4 * 4096 * 4096 + 3 * 4096 * 11008)) + 3 * 2048 * 2048 * 32 * 256  # fwd×3, causal attn
    assert uneven.time["time.rank_flops"].value == pytest.approx(8 * 24 * layer, rel=1e-9)
    assert uneven.time["time.step"].value > even.time["time.step"].value
    assert uneven.time["time.mfu"].value < even.time["time.mfu"].value


@pytest.mark.parametrize("layers", [None, (14, 16, 16, 15), (16, 14, 16, 15)])
def test_busiest_stage_memo_is_the_stage_by_stage_scan(layers: tuple[int, ...] | None) -> None:
    """slowest_stage (memoised with the model's own inventory, identical stages costed once) names the stage a
    plain scan of every stage names, with its FLOPs — first of the busiest on a tie; uneven stages included."""
    from stepbill.engine.flops import stage_step_flops
    from stepbill.engine.parallel.layout import stage_layer_kinds
    from stepbill.engine.steptime import slowest_stage

    spec = load_preset("deepseek-v3")
    par = Parallel(pp=4, micro_batches=8, pp_layers=layers)
    recipe = make_recipe(seq_len=2048, recompute="full", parallel=par)
    bill = make_bill(spec, recipe)
    assert bill.plan is not None
    per_token = {k: lp.recompute_flops for k, lp in bill.plan.layers.items()}
    works = [stage_step_flops(spec, bill.inventory, 2048, 1, kinds, s == 0, s == 3, per_token, None, True)
             for s, kinds in enumerate(stage_layer_kinds(spec, par))]
    busiest = works.index(max(works))
    assert slowest_stage(spec, bill.inventory, recipe, bill.plan)[:2] == (busiest, works[busiest])
    copy = type(bill.inventory)(tuple(bill.inventory.tensors))  # not the model's own: the unmemoised path
    assert slowest_stage(spec, copy, recipe, bill.plan) == slowest_stage(spec, bill.inventory, recipe, bill.plan)


def test_all_to_all_spanning_nodes_runs_on_both_links() -> None:
    """mixtral-8x7b, ep 8 at etp 2 (16 ranks: two H100 nodes, 4 of the EP group in each): a rank sends S/8 to each
    peer, 3 of them over NVLink and 4 over its InfiniBand NIC, both at once (NCCL's all-to-all: a send to every peer);
    the network's share sets the time, 4/8 of S instead of the flat ring's 7/8. Latency: one send per peer, 3 at
    NVLink's per-step latency, 4 at the network's."""
    from stepbill.engine.timing.comm_time import latency_per_call

    spec = load_preset("mixtral-8x7b")
    par = Parallel(dp=16, ep=8, etp=2, micro_batches=2)
    bill = make_bill(spec, make_recipe(seq_len=4096, parallel=par), gpu=H100)
    (a2a,) = [c for c in bill.collectives if c.axis == "ep"]
    assert a2a.scope == "inter-node" and a2a.link == "nvlink+infiniband" and a2a.local == 4
    sent = a2a.bytes / a2a.calls  # (ep − 1)/ep × S: what a rank sends off itself, as a flat all-to-all counts it
    message = sent * 8 / 7
    assert sent == pytest.approx(7 / 8 * 4096 * 2 * 4096 * 2)  # 4,096 tokens × top-2 × hidden × bf16
    assert a2a.seconds == pytest.approx(a2a.calls * max(3 / 8 * message / 450e9, 4 / 8 * message / 50e9))
    assert latency_per_call(a2a) == pytest.approx(8.4e-6 + 3 * 3.4e-6 + 4 * 14e-6)
    inside = make_bill(spec, make_recipe(seq_len=4096, parallel=Parallel(dp=8, ep=8, micro_batches=2)), gpu=H100)
    (flat,) = [c for c in inside.collectives if c.axis == "ep"]
    assert flat.scope == "intra-node" and flat.local == 1 and flat.seconds == pytest.approx(flat.bytes / 450e9)


def test_hierarchical_latency_reads_the_group_ranks_in_a_node() -> None:
    """dp 16 at tp 2 (stride 2): 4 ranks of each DP group share a node, so the hierarchical all-reduce's latency has
    2·3 NVLink steps and 2·3 network steps (4 nodes), not the 8 ranks a node holds."""
    from stepbill.engine.timing.comm_time import latency_per_call

    bill = make_bill(load_preset("llama3-8b"), make_recipe(seq_len=4096, parallel=Parallel(dp=16, tp=2)), gpu=H100)
    (ar,) = [c for c in bill.collectives if c.axis == "dp"]
    assert ar.link == "nvlink+infiniband" and ar.local == 4
    assert latency_per_call(ar) == pytest.approx(8.4e-6 + 2 * 3 * 3.4e-6 + 2 * 3 * 14e-6)
