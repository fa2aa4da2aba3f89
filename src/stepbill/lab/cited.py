"""Published figures and framework defaults the seeds quote, kept as cited reference values with their sources.

Nothing here is computed from first principles: each value is copied from the source named beside it (a paper, a
journal's page range, a framework's source file at a pinned commit). What stepbill adds is the arithmetic the seed
does on them (a difference of years, a page count, a ratio) and, where the project computes the same quantity,
that computation beside the cited value (a chain of 1,000 local rates, Adam's default β₁ in `lab adam`, the
clip threshold of `lab clip`, stepbill's own recompute-module vocabulary). The papers' figures are as seed 000
quotes them (catalog: ../shared/spec/seed-facts.yaml), with the reference each comes from; the Megatron-LM defaults
were read in its source at the commit named below.
"""

from __future__ import annotations

from dataclasses import dataclass

# Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22), read with the project's source tools.
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_REPO = "https://github.com/NVIDIA/Megatron-LM"


@dataclass(frozen=True)
class FrameworkDefault:
    """One default of a framework, as its source states it (`quoted`: the source text, trimmed)."""

    name: str
    value: object
    file: str
    lines: str  # line numbers in `file` at MEGATRON_COMMIT
    quoted: str


MEGATRON_CLIP_GRAD = FrameworkDefault(
    "--clip-grad", 1.0, "megatron/training/arguments.py", "2615–2616",
    "group.add_argument('--clip-grad', type=float, default=1.0, help='Gradient clipping based on global L2 norm.')")
MEGATRON_RECOMPUTE_MODULES = FrameworkDefault(
    "--recompute-modules (TransformerConfig.recompute_modules)", ("core_attn",),
    "megatron/core/transformer/transformer_config.py", "560–563, 1940–1941",
    'recompute_modules: Optional[List[str]] = None  """... default: ["core_attn"]."""; in __post_init__: '
    'if self.recompute_modules is None: self.recompute_modules = ["core_attn"]')
# The choices that docstring lists (lines 561–563); stepbill models the first seven (spec/recompute_policy).
MEGATRON_RECOMPUTE_CHOICES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
                              "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


@dataclass(frozen=True)
class Citation:
    """A published figure the seed quotes: the values as the source prints them, and the source."""

    claim: str  # catalog id (../shared/spec/seed-facts.yaml)
    short: str  # the source in a few words, for a table cell
    source: str


VANISHING_HISTORY = Citation(
    "vg-history-years", "Hochreiter 1991; Bengio et al. 1994; Hochreiter et al. 2001",
    "S. Hochreiter, Diploma thesis, TU München, 1991; Y. Bengio, P. Simard, P. Frasconi, IEEE Trans. Neural Networks "
    "5(2):157–166, 1994; S. Hochreiter, Y. Bengio, P. Frasconi, J. Schmidhuber, in A Field Guide to Dynamical "
    "Recurrent Networks, IEEE Press, 2001")
VANISHING_YEARS = (1991, 1994, 2001)
RNN_STEPS = 1000  # the papers' RNN experiments: an RNN unrolled over 1,000 steps is a 1,000-layer chain

POLYAK = Citation(
    "polyak-rho-range", "Polyak 1964; Rumelhart et al. 1986",
    "B. T. Polyak, USSR Comput. Math. Math. Phys. 4(5):1–17, 1964; D. E. Rumelhart, G. E. Hinton, R. J. Williams, "
    "Nature 323:533–536, 1986")
POLYAK_RHO = (0.8, 0.99)
POLYAK_YEAR, BACKPROP_YEAR = 1964, 1986

ADAGRAD = Citation("adagrad-jmlr-39-pages", "Duchi et al., JMLR 2011",
                   "J. Duchi, E. Hazan, Y. Singer, JMLR 12(61):2121–2159, 2011")
ADAGRAD_PAGES = (2121, 2159)

V3_BATCH_RAMP = Citation(
    "v3-batch-ramp", "DeepSeek-V3 report §4.2",
    "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv 2412.19437, §4.2 (pre-training sequence length 4K)")
V3_BATCH_SEQUENCES = (3072, 15360)
V3_RAMP_TOKENS = 469e9
V3_PRETRAIN_SEQ = 4096

ST_MOE = Citation(
    "stmoe-table4", "ST-MoE (Zoph et al. 2022) Table 4",
    "B. Zoph et al., ST-MoE: Designing Stable and Transferable Sparse Expert Models, arXiv 2202.08906, Table 4")
# method → (stable runs, runs, quality as the table prints it: negative log perplexity)
ST_MOE_TABLE4 = {"baseline": (4, 6, -1.755), "update clipping (0.1)": (3, 3, -4.206), "router z-loss": (3, 3, -1.741)}


def page_count(first: int, last: int) -> int:
    """Pages of an inclusive page range: last − first + 1."""
    return last - first + 1


def crashed_runs(stable: int, runs: int) -> int:
    """Runs that did not finish stably."""
    return runs - stable
