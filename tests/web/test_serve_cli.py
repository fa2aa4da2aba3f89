"""`stepbill serve` as a user starts it: loopback by default, says so; a wider --host is announced as such."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

httpx = pytest.importorskip("httpx", reason="the web extra's tests need httpx")
pytest.importorskip("uvicorn", reason="the web extra is not installed: pip install 'stepbill[web]'")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(*args: str) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stepbill", "serve", "--port", str(port), *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/choices", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail(f"stepbill serve did not answer within 30 s: {proc.communicate()[1]}")


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err


@pytest.mark.slow
def test_serve_binds_loopback_and_serves_the_page_and_api() -> None:
    proc, port = _serve()
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert page.status_code == 200 and "stepbill" in page.text
        bill = httpx.get(f"http://127.0.0.1:{port}/api/bill", params={"model": "gpt3-125m"}, timeout=10).json()
        assert bill["schema"] == "stepbill.bill/1"
    finally:
        err = _stop(proc)
    assert f"http://127.0.0.1:{port}/ (this machine only" in err


@pytest.mark.slow
def test_serve_says_when_it_listens_beyond_this_machine() -> None:
    proc, _ = _serve("--host", "0.0.0.0")
    err = _stop(proc)
    assert "listening on 0.0.0.0" in err and "reachable from other machines" in err


def test_serve_rejects_a_bad_port_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, _, err = run_cli(["serve", "--port", "70000"], capsys)
    assert code == 2 and err == "stepbill: error: --port must lie in 0..65535, got 70000\n"
