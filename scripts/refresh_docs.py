"""Regenerate the real command output shown in README.md and docs/json.md (between <!-- out:NAME --> markers)
and docs/json.md's key tables from the JSON Schemas (between <!-- schema:COMMAND --> and <!-- /schema:COMMAND -->).

Run after changing what the bill prints: python scripts/refresh_docs.py
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from stepbill.cli import main
from stepbill.report.schema import SCHEMAS
from stepbill.report.schema_docs import key_table

ROOT = Path(__file__).resolve().parent.parent


def run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(argv)
    return out.getvalue().rstrip()


def short_json(argv: list[str]) -> str:
    """The bill's JSON with long lists and maps cut to their first entries, so the doc stays readable."""
    data = json.loads(run(argv))
    data["model"]["spec"] = "{…}"
    data["lines"] = {k: data["lines"][k] for k in list(data["lines"])[:2]}
    for key in ("items", "activation_items"):
        data["memory"][key] = data["memory"][key][:2]
    data["timeline"] = data["timeline"][:2]
    data["activations"]["layer_rows"] = {k: v[:2] for k, v in data["activations"]["layer_rows"].items()}
    data["checkpoint"]["items"] = data["checkpoint"]["items"][:1]
    data["ranks"] = data["ranks"][:1]
    return json.dumps(data, indent=2, ensure_ascii=False)


PARALLEL = ["bill", "llama2-7b", "--seq", "4096", "--dp", "2", "--tp", "2", "--sp", "--pp", "2", "--micro-batches", "4",
            "--zero", "1", "--gpus", "8", "--gpu", "h100-sxm"]
MIXTRAL_DP64 = ["bill", "mixtral-8x7b", "--seq", "4096", "--dp", "64", "--zero", "3", "--convention", "eager"]
MIXTRAL_FIT = ["bill", "mixtral-8x7b", "--seq", "4096", "--dp", "16", "--ep", "8", "--zero", "1", "--gpus", "16",
               "--gpu", "h100-sxm"]


def after_global_bill(argv: list[str]) -> str:
    """The per-GPU part of a bill's terminal output (from the layout line on)."""
    lines = run(argv).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("dp "))
    return "\n".join(lines[start:])


def fit_part(argv: list[str]) -> str:
    """The per-GPU rank and fit tables with their lines (from the layout line to the communication table)."""
    lines = after_global_bill(argv).splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("Communication per GPU"))
    return "\n".join(lines[:end])


def parallel_json(argv: list[str]) -> str:
    """The parallel keys of the bill's JSON, first rows only."""
    data = json.loads(run([*argv, "--json"]))
    out = {key: data[key] for key in ("parallel", "ranks", "worst_rank", "comm", "time", "gpu", "fit")}
    if out["fit"]:
        out["fit"]["reserve_items"] = [*out["fit"]["reserve_items"][:1], "... cut"]
        out["fit"]["lines"] = {k: out["fit"]["lines"][k] for k in list(out["fit"]["lines"])[:1]}
    first = out["ranks"][0]
    first["items"] = [*first["items"][:1], "... cut"]
    out["ranks"] = [first] + ([f"... {len(data['ranks']) - 1} more classes"] if len(data["ranks"]) > 1 else [])
    out["comm"]["collectives"] = [*out["comm"]["collectives"][:1], "... cut"]
    if out["time"]:
        out["time"] = {k: out["time"][k] for k in ("step", "mfu")}
    return json.dumps(out, indent=2, ensure_ascii=False)


def readme_api() -> str:
    """What the README's Python API snippet prints (the snippet is run from the README itself)."""
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Python API.*?```python\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    return out.getvalue().rstrip()


BLOCKS = {
    "parallel": ("text", lambda: after_global_bill(PARALLEL)),
    "parallel-json": ("json", lambda: parallel_json(PARALLEL)),
    "mixtral-dp64": ("text", lambda: after_global_bill(MIXTRAL_DP64)),
    "mixtral-fit": ("text", lambda: fit_part(MIXTRAL_FIT)),
    "default": ("text", lambda: run([])),
    "api": ("text", readme_api),
    "v3": ("text", lambda: run(["bill", "deepseek-v3", "--seq", "131072", "--gpu-mem", "80"])),
    "json": ("json", lambda: short_json(["bill", "gpt3-125m", "--micro-batch", "8", "--seq", "1024", "--json"])),
    "fit-qwen": ("text", lambda: run(["fit", "examples/configs/qwen2.5-7b/config.json", "--max", "micro-batch", "--seq",
                                      "4096", "--gpu", "h100", "--lora-rank", "16", "--recompute", "full"])),
    "fit-llama-seq": ("text", lambda: run(["fit", "llama3-8b", "--max", "seq", "--gpu", "h100", "--lora-rank", "16"])),
    "fit-pp": ("text", lambda: run(["fit", "llama3-70b", "--max", "seq", "--gpu", "h100", "--tp", "8", "--sp", "--pp",
                                    "4", "--dp", "2", "--zero", "1", "--micro-batches", "8", "--recompute", "full",
                                    "--multiple-of", "1024"])),
}


def refresh(path: Path) -> None:
    text = path.read_text()
    for name, (lang, make) in BLOCKS.items():
        pattern = re.compile(rf"(<!-- out:{name} -->\n```{lang}\n).*?(\n```)", re.S)
        if pattern.search(text):
            text = pattern.sub(lambda m, make=make: m.group(1) + make() + m.group(2), text)
    for command in SCHEMAS:
        pattern = re.compile(rf"(<!-- schema:{command} -->\n)(?:.*?\n)?(<!-- /schema:{command} -->)", re.S)
        text = pattern.sub(lambda m, command=command: m.group(1) + key_table(command) + "\n" + m.group(2), text)
    path.write_text(text)


if __name__ == "__main__":
    for doc in ("README.md", "docs/json.md", "docs/parallel.md"):
        refresh(ROOT / doc)
        print(f"refreshed {doc}")
