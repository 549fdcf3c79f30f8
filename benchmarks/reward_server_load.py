"""A bounded loopback load test of ``rlxf serve-reward``: N concurrent clients for a fixed time.

    python benchmarks/reward_server_load.py [--reward arithmetic|code] [--clients 8] [--seconds 10]
        [--batch 8] [--rss-every 0]

Starts the server as its own process on 127.0.0.1 (``rlxf serve-reward reward.function=...``), then N
client threads each send requests of ``--batch`` samples back to back, on a kept-alive connection, for
``--seconds``. Prints JSON: requests/s and samples/s, latency p50/p90/p99 as the clients saw it, errors
by status, the server's resident memory before and after (and every ``--rss-every`` seconds: a soak
shows whether it grows), and the server's own /metrics (``reward_calls`` below ``requests`` is the
merging of concurrent requests at work). Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import httpx  # noqa: E402

from common import emit  # noqa: E402

PROGRAM_RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
PROGRAM_WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"


def arithmetic_request(batch: int, i: int) -> dict:
    answers = [str(100 + i + k) for k in range(batch)]
    responses = [a if k % 2 == 0 else "7" for k, a in enumerate(answers)]
    return {"prompts": [f"{100 + i}+{k}=" for k in range(batch)], "responses": responses,
            "metadata": [{"answer": a, "stopped": True} for a in answers]}


def code_request(batch: int, i: int) -> dict:
    tests = [{"input": f"{i} 2\n", "output": f"{i + 2}\n"}]
    return {"prompts": ["Add two numbers."] * batch,
            "responses": [PROGRAM_RIGHT if k % 2 == 0 else PROGRAM_WRONG for k in range(batch)],
            "metadata": [{"tests": tests}] * batch}


REQUESTS = {"arithmetic": (arithmetic_request, "arithmetic"), "code": (code_request, "code_tests")}


def percentile(ordered: list[float], q: int) -> float:
    """Nearest-rank percentile of an ascending list (kept here: the reference server's tree lacks one)."""
    return ordered[max(0, -(-len(ordered) * q // 100) - 1)] if ordered else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start_server(function: str, port: int, src: str | None) -> subprocess.Popen:
    command = [sys.executable, "-m", "rlxf.cli", "serve-reward", f"reward.function={function}", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": src} if src else None
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.1)
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {server.stderr.read()}")
    server.terminate()
    raise RuntimeError("the server did not answer /health within 120 s")


def run_clients(url: str, make_request, clients: int, seconds: float, batch: int) -> dict:
    latencies: list[float] = []
    statuses: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    host, port = url.removeprefix("http://").split(":")

    def client(index: int) -> None:
        # http.client sends headers and a bytes body in one write; a client that writes them apart
        # (httpx does) waits ~40 ms per request on Nagle's algorithm and delayed ACKs.
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        i = index
        while time.monotonic() < stop_at:
            body = json.dumps(make_request(batch, i)).encode()
            start = time.perf_counter()
            try:
                connection.request("POST", "/score", body, {"Content-Type": "application/json"})
                reply = connection.getresponse()
                reply.read()
                status = str(reply.status)
            except (OSError, http.client.HTTPException) as err:
                status = type(err).__name__
                connection.close()
                connection = http.client.HTTPConnection(host, int(port), timeout=60)
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                statuses[status] += 1
            i += clients
        connection.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    ok = statuses.get("200", 0)
    return {"wall_seconds": round(wall, 3), "requests": len(ordered), "requests_per_s": round(len(ordered) / wall, 1),
            "samples_per_s": round(ok * batch / wall, 1), "errors": len(ordered) - ok, "statuses": dict(statuses),
            "latency_ms": {f"p{q}": round(percentile(ordered, q) * 1e3, 2) for q in (50, 90, 99)}}


def load_test(ns: argparse.Namespace, src: str | None) -> dict:
    """Start a server (from the source tree ``src``, default: this one), load it, stop it."""
    make_request, function = REQUESTS[ns.reward]
    port = free_port()
    server = start_server(function, port, src)
    url = f"http://127.0.0.1:{port}"
    try:
        httpx.post(f"{url}/score", json=make_request(ns.batch, 0), timeout=60)  # warm-up: imports, pools
        rss_before = rss_bytes(server.pid)
        rss_trace: list[tuple[float, float]] = []
        sampling = threading.Event()

        def sample_rss() -> None:
            start = time.monotonic()
            while not sampling.wait(ns.rss_every):
                rss_trace.append((round(time.monotonic() - start, 1), round(rss_bytes(server.pid) / 2**20, 1)))

        if ns.rss_every > 0:
            threading.Thread(target=sample_rss, daemon=True).start()
        load = run_clients(url, make_request, ns.clients, ns.seconds, ns.batch)
        sampling.set()
        rss_after = rss_bytes(server.pid)
        reply = httpx.get(f"{url}/metrics", timeout=10)
        metrics = reply.json() if reply.status_code == 200 else {}
    finally:
        server.terminate()  # SIGTERM: a graceful stop
        server.wait(timeout=60)
    result = {**load, "server_rss_mb": {"before": round(rss_before / 2**20, 1), "after": round(rss_after / 2**20, 1)},
              "server_metrics": {k: metrics[k] for k in ("requests", "reward_calls", "errors", "latency_ms") if k in metrics}}
    if rss_trace:
        result["server_rss_mb_trace"] = rss_trace
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward", choices=sorted(REQUESTS), default="arithmetic")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=8, help="samples per request")
    parser.add_argument("--rss-every", type=float, default=0.0, help="soak: also sample server RSS this often")
    parser.add_argument("--reference-src", help="also load a server from this source tree (e.g. an older "
                                                "checkout's src/) and print the ratios")
    ns = parser.parse_args()
    result = {"reward": ns.reward, "clients": ns.clients, "batch": ns.batch, "seconds": ns.seconds,
              "cpu_count": os.cpu_count(), "server": load_test(ns, None)}
    if ns.reference_src:
        reference = result["reference_server"] = load_test(ns, ns.reference_src)
        ours = result["server"]
        result["ratios"] = {
            "requests_per_s": round(ours["requests_per_s"] / max(reference["requests_per_s"], 1e-9), 2),
            "p50_latency": round(ours["latency_ms"]["p50"] / max(reference["latency_ms"]["p50"], 1e-9), 2),
            "p99_latency": round(ours["latency_ms"]["p99"] / max(reference["latency_ms"]["p99"], 1e-9), 2),
        }
    emit(result)


if __name__ == "__main__":
    main()
