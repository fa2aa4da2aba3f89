"""Latency of `stepbill serve` seen by a real HTTP client: p50/p95 of a bill request, and the page's load time.

Starts `python -m stepbill serve` on 127.0.0.1 (a free port), sends a bounded number of requests over one
keep-alive connection (httpx), and — where Debian's chromium and playwright are installed — loads the page in
headless Chromium until its first bill is drawn. Targets: bill p95 < 20 ms, page load < 1 s.

Run: python benchmarks/serve_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

import httpx

# The page's own states: a small dense model, a 70B model on 64 GPUs with a GPU (comm, step time), a MoE model.
QUERIES = [
    {"model": "gpt3-125m", "seq": "1024", "micro-batch": "8"},
    {"model": "llama3-70b", "seq": "8192", "dp": "8", "tp": "8", "zero": "1", "gpu": "h100-sxm"},
    {"model": "deepseek-v3", "seq": "4096", "tp": "8", "ep": "8", "dp": "8", "zero": "1", "micro-batches": "16",
     "gpu": "h100-sxm", "recompute": "full"},
    {"model": "llama3-8b", "seq": "4096", "micro-batch": "2", "recompute": "selective:core_attn"},
]
MAX_REQUESTS = 5000  # bounded, whatever --requests says


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/api/choices", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"server at {url} did not answer within {seconds:g} s")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bill_latency(url: str, requests: int) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for q in QUERIES:  # warm caches (parameter inventories, imports), as a running server would be
            client.get("/api/bill", params=q).raise_for_status()
        print(f"{'request':<58} {'n':>5} {'p50 (ms)':>9} {'p95 (ms)':>9} {'max (ms)':>9} {'app p50':>8}")
        everything: list[float] = []
        for route in ("/api/bill", "/api/view"):
            for q in QUERIES:
                samples, app = [], []
                for _ in range(max(1, requests // len(QUERIES))):
                    start = time.perf_counter()
                    response = client.get(route, params=q).raise_for_status()
                    samples.append((time.perf_counter() - start) * 1e3)
                    app.append(float(response.headers["server-timing"].split("dur=")[1]))
                if route == "/api/bill":
                    everything += samples
                label = f"{route} {q['model']} " + " ".join(f"{k}={v}" for k, v in q.items() if k != "model")
                print(f"{label[:58]:<58} {len(samples):>5} {statistics.median(samples):>9.2f} "
                      f"{percentile(samples, 0.95):>9.2f} {max(samples):>9.2f} {statistics.median(app):>8.2f}")
        p95 = percentile(everything, 0.95)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs while measuring")
        print(f"bill, all states: p50 {statistics.median(everything):.2f} ms, p95 {p95:.2f} ms "
              f"({'within' if p95 < 20 else 'OVER'} the 20 ms target)")


def page_load(url: str, repeats: int = 5) -> None:
    chromium = os.environ.get("STEPBILL_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("page load: skipped (playwright not installed)")
        return
    if not shutil.which(chromium):
        print(f"page load: skipped (no chromium at {chromium})")
        return
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        samples, changes, draws = [], [], []
        for i in range(repeats + 1):
            page = browser.new_page()
            start = time.perf_counter()
            page.goto(url + "/?model=llama3-70b&seq=8192&dp=8&tp=8&zero=1&gpu=h100-sxm")
            page.wait_for_function("Number(document.body.dataset.renders || 0) >= 1", timeout=30_000)
            elapsed = (time.perf_counter() - start) * 1e3
            page.fill("[data-testid=micro-batch]", "2")
            page.wait_for_function("Number(document.body.dataset.renders || 0) >= 2", timeout=30_000)
            change = float(page.evaluate("document.body.dataset.latencyMs"))
            draw = float(page.evaluate("document.body.dataset.drawMs"))
            if i:  # the first load starts the browser's caches
                samples.append(elapsed)
                changes.append(change)
                draws.append(draw)
            page.close()
        browser.close()
    print(f"page load to first bill drawn (headless Chromium, {repeats} loads): median {statistics.median(samples):.0f} ms, "
          f"max {max(samples):.0f} ms ({'within' if max(samples) < 1000 else 'OVER'} the 1 s target)")
    print(f"control change to charts redrawn: median {statistics.median(changes):.1f} ms, max {max(changes):.1f} ms "
          f"({'within' if max(changes) < 100 else 'OVER'} the 100 ms target); of which drawing the SVG: median "
          f"{statistics.median(draws):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help=f"bill requests per route (at most {MAX_REQUESTS})")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "stepbill", "serve", "--host", "127.0.0.1", "--port", str(port)],
                              stderr=subprocess.DEVNULL)
    try:
        wait_up(url)
        bill_latency(url, min(args.requests, MAX_REQUESTS))
        page_load(url)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
