"""`stepbill check --launch N`: start N local ranks under torchrun and relay rank 0's output, or the failing
rank's own error in one line.

Every rank's stderr goes to its own file (torchrun ``--log-dir`` and ``--redirects 2``); rank 0's stdout (the
table or the JSON) stays on torchrun's stdout. When a rank fails, torchrun's summary names the first failure
("Root Cause": its rank and exit code or signal) but not why; the why is the last line of that rank's stderr
that names a cause (a Python exception, a C++ ``what():``, gloo's ``enforce fail``). ``PYTHONFAULTHANDLER`` is set
for the ranks, so a rank killed by a signal (SIGABRT from a C++ exception on a gloo thread, SIGSEGV) leaves its
Python stack in that file, which is kept and named in the error.

torchrun runs ``--standalone`` (its rendezvous store binds a port of its own choosing: nothing picks a free port
that another process could take first), in an environment without a parent launcher's MASTER_ADDR / RANK / ...;
a launch whose ranks never met is tried once more, said in the output, and nothing else is retried.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stepbill.errors import StepbillError

#: What the ranks add to the environment this command runs in: one OpenMP thread each unless asked (N ranks share
#: the machine's cores), and the Python stack of a rank killed by a signal on its stderr.
RANK_ENV_DEFAULTS = {"OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}

#: What a launcher sets to say where a process group is: torchrun sets its own for the ranks.
LAUNCHER_VARIABLES = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME"})

#: What the message of a launch that failed before its ranks met says (torchrun's store, c10d's rendezvous, gloo's
#: connect); only such a launch is retried.
RENDEZVOUS_FAILURES = ("Address already in use", "failed to listen", "RendezvousTimeoutError",
                       "RendezvousConnectionError", "RendezvousClosedError", "connectFullMesh", "Connection refused")
RETRIED = "the first torchrun failed to rendezvous and was started once more"

#: Lines that say why a rank failed, the specific before the generic (a C++ exception's ``what():``, then
#: "terminate called ...", before the "Fatal Python error: Aborted" that faulthandler prints after them).
_CAUSES = (re.compile(r"^[\w.]*(Error|Exception)\b.*:|.*\bwhat\(\):|.*enforce fail"),
           re.compile(r"^terminate called"), re.compile(r"^Fatal Python error:"))


@dataclass(frozen=True)
class RankFailure:
    """The first failed rank of a launched run, as torchrun's summary names it ("Root Cause")."""

    rank: int
    local_rank: int
    exit_code: int  # negative: killed by signal -exit_code (torchrun's convention)

    def how(self) -> str:
        """'exited with code 1' or 'was killed by SIGABRT'."""
        if self.exit_code >= 0:
            return f"exited with code {self.exit_code}"
        try:
            return f"was killed by {signal.Signals(-self.exit_code).name}"
        except ValueError:
            return f"was killed by signal {-self.exit_code}"


def launch_command(nproc: int, check_args: list[str], log_dir: str) -> list[str]:
    """``python -m torch.distributed.run`` starting `nproc` local ranks of ``stepbill check <check_args>``, each
    rank's stderr in its own file under `log_dir`.

    ``--standalone``: torchrun's own rendezvous store binds port 0 on 127.0.0.1 and hands the port it got to the
    ranks (MASTER_PORT), so no port is picked, released and bound later by another process (a port picked free
    here could be taken before torchrun binds it)."""
    if nproc < 1:
        raise StepbillError(f"--launch needs at least 1 process, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--nnodes", "1",
            "--standalone", "--local-addr", "127.0.0.1",
            "--log-dir", log_dir, "--redirects", "2", "-m", "stepbill", "check", *check_args]


def rank_env(parent: dict[str, str]) -> dict[str, str]:
    """The environment of the launched ranks: the parent's without what says where a process group is (torchrun
    sets those itself; a stray one from an outer launcher must not leak in), plus RANK_ENV_DEFAULTS unless set."""
    env = {k: v for k, v in parent.items() if k not in LAUNCHER_VARIABLES and not k.startswith("TORCHELASTIC_")}
    return {**env, **{k: parent.get(k, v) for k, v in RANK_ENV_DEFAULTS.items()}}


def run_launched(nproc: int, check_args: list[str]) -> str:
    """Run ``stepbill check <check_args>`` on `nproc` local ranks; rank 0's stdout, or StepbillError naming the
    failing rank and its cause. A run that failed to rendezvous (a port taken, a store or peer not reached) is
    started once more, and its output says so; any other failure is not retried."""
    first = _run_once(nproc, check_args)
    if isinstance(first, str):
        return first
    if not is_rendezvous_failure(first.message):
        raise StepbillError(first.message)
    again = _run_once(nproc, check_args)
    if isinstance(again, str):
        return with_retry_note(again, f"{RETRIED}: {first.message}", as_json="--json" in check_args)
    raise StepbillError(f"{again.message} (second try; the first failed to rendezvous too: {first.message})")


@dataclass(frozen=True)
class _Failed:
    message: str


def _run_once(nproc: int, check_args: list[str]) -> str | _Failed:
    log_dir = tempfile.mkdtemp(prefix="stepbill-launch-")
    done = subprocess.run(launch_command(nproc, check_args, log_dir), capture_output=True, text=True,
                          env=rank_env(dict(os.environ)), check=False)
    if done.returncode == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
        return done.stdout
    message = failure_message(done.returncode, done.stderr, Path(log_dir))
    if "(its stderr: " not in message:  # no rank's log to keep
        shutil.rmtree(log_dir, ignore_errors=True)
    return _Failed(message)


def is_rendezvous_failure(message: str) -> bool:
    """Whether a failed launch's message says the ranks never met (worth one more try), not that a rank failed
    once they had."""
    return any(sign in message for sign in RENDEZVOUS_FAILURES)


def with_retry_note(stdout: str, note: str, *, as_json: bool) -> str:
    """Rank 0's output with `note` added: to the JSON's ``notes`` list, or as a last ``note:`` line."""
    if not as_json:
        return f"{stdout}note: {note}\n"
    data = json.loads(stdout)
    data["notes"] = [*data.get("notes", []), note]
    return json.dumps(data, indent=2) + "\n"


def failure_message(returncode: int, torchrun_stderr: str, log_dir: Path) -> str:
    """One line: the failing rank and the cause its stderr gives; else torchrun's own last word."""
    failure = root_cause(torchrun_stderr)
    if failure is None:
        return f"torchrun exited with code {returncode}: {cause_line(torchrun_stderr)}"
    log = rank_stderr(log_dir, failure.local_rank)
    text = log.read_text(errors="replace") if log is not None else ""
    said = [line.removeprefix("stepbill: error: ") for line in text.splitlines()
            if line.startswith("stepbill: error: ")]
    if said:  # stepbill's own one-line error (measure_launched's names the rank that failed)
        return said[0]
    where = f" (its stderr: {log})" if log is not None and text.strip() else ""
    return f"rank {failure.rank} {failure.how()}: {cause_line(text)}{where}"


def root_cause(torchrun_stderr: str) -> RankFailure | None:
    """The rank torchrun's failure summary names under "Root Cause (first observed failure)", if any."""
    _, found, block = torchrun_stderr.partition("Root Cause (first observed failure)")
    rank = re.search(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", block, re.MULTILINE)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", block, re.MULTILINE)
    if not found or rank is None or code is None:
        return None
    return RankFailure(int(rank[1]), int(rank[2]), int(code[1]))


def rank_stderr(log_dir: Path, local_rank: int) -> Path | None:
    """The stderr file torchrun ``--redirects`` wrote for `local_rank` (its last attempt), if any."""
    logs = sorted(log_dir.glob(f"*/attempt_*/{local_rank}/stderr.log"),
                  key=lambda p: int(p.parent.parent.name.removeprefix("attempt_")))
    return logs[-1] if logs else None


def cause_line(stderr: str) -> str:
    """The line of a stderr that says why: the last that names a cause (``SomeError: ...``, a C++ ``what():``,
    gloo's ``enforce fail``; else ``terminate called ...``; else ``Fatal Python error``), torchrun's own ChildFailedError
    excepted; else the last line that is not a '====' border."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().strip("=-")]
    for cause in _CAUSES:
        found = [line for line in lines if cause.match(line) and "ChildFailedError" not in line]
        if found:
            return found[-1]
    return (lines or ["no output"])[-1]
