"""Regenerate the real `stepbill plan` output in docs/plan.md (between <!-- out:NAME --> markers): each example runs
the command written above its block. Slow (the DeepSeek-V3 example bills dozens of candidates); run it after
changing what the planner prints: python scripts/refresh_plan_docs.py [NAME ...]
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from refresh_docs import run  # type: ignore[import-not-found]  # scripts/ is on the path when run as a script

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plan.md"

COMMANDS = {
    "plan-llama3-8b": "plan llama3-8b --gpu h100 --gpus 1 --seq 8192 --global-batch-tokens 64Ki --top 5",
    "plan-mixtral": "plan mixtral-8x7b --gpu h100 --max-gpus 16 --seq 4096 --global-batch-tokens 1Mi --objective gpus "
                    "--top 3 --fix schedule=1f1b,offload_activations=off,offload_optimizer=off,sp=on,recompute=full,"
                    "micro_batch=1,cp=1",
    "plan-deepseek": "plan deepseek-v3 --gpu h800 --gpus 2048 --seq 4096 --global-batch-tokens 62914560 --cross-node "
                     "--top 3 --fix tp=1,pp=16,ep=64,cp=1,micro_batch=1,offload_optimizer=off,offload_activations=off,"
                     "schedule=1f1b",
}
JSON_COMMAND = ("plan gpt3-1.3b --gpu rtx-4090 --gpus 2 --seq 2048 --global-batch-tokens 16Ki --top 3 "
                "--fix schedule=1f1b,offload_activations=off --jobs 1 --json")


def plan_json() -> str:
    """One row and the search block of the JSON example."""
    data = json.loads(run(shlex.split(JSON_COMMAND)))
    return json.dumps({"top[0]": data["top"][0], "search": data["search"]}, indent=2, ensure_ascii=False)


def main(names: list[str]) -> None:
    text = DOC.read_text()
    makers = {name: (lambda c=command: run(shlex.split(c))) for name, command in COMMANDS.items()}
    makers["plan-json"] = plan_json
    for name, make in makers.items():
        if names and name not in names:
            continue
        pattern = re.compile(rf"(<!-- out:{name} -->\n```\n).*?(\n```)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"docs/plan.md has no <!-- out:{name} --> block")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + m.group(2), text)
        print(f"refreshed {name}")
    DOC.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
