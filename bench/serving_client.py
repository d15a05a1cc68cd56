"""bench/serving_client.py — how fast orch's load generator can send, and how true its timestamps are.

Method: a streaming OpenAI-compatible stand-in (http.server, one thread per request, in its own
process so that it does not share the client's interpreter lock) answers every request on
127.0.0.1; it is not an engine. Two measurements, each with orchestrator.workloads.loadgen as the
scheduler runs it (threads, http.client, one JSON line per record):

  * highest sustained rate: open-loop Poisson arrivals at rising rates, 400 requests each (8
    output tokens, no delay at the server). A rate is sustained when every request succeeded and
    the achieved send rate, (n - 1) / (last send - first send), is at least 95% of the target.
    The figure is the highest sustained rate; the server shares the same cores, so it is a lower
    bound of the client's own limit.
  * timestamp error: the server sleeps TTFT_S before the first token and ITL_S between tokens
    (monotonic deadlines from the request's arrival, so its own jitter does not accumulate); at
    concurrency 1 and 4, 200 requests of 16 tokens, the client's TTFT - TTFT_S and ITL - ITL_S
    are its error (request send and parse overhead, scheduling of its threads) plus the stand-in's
    own lateness. Printed as p50 / p99 with n.

Usage: .venv/bin/python bench/serving_client.py [--quick]
Never part of the pass/fail run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.metrics.percentiles import label, summarize
from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, Target

TTFT_S = 0.020
ITL_S = 0.005
RATES = (50, 100, 200, 400, 800, 1000, 1200, 1600)


def _serve(port_q: multiprocessing.Queue, ttft_s: float, itl_s: float) -> None:  # type: ignore[type-arg]
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            t0 = time.monotonic()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(int(body["max_tokens"])):
                wait = t0 + ttft_s + i * itl_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.wfile.write(b'data: {"choices": [{"index": 0, "text": " x"}]}\n\n')
                self.wfile.flush()
            self.wfile.write(b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}\n\n')
            self.wfile.write(b"data: [DONE]\n\n")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.request_queue_size = 1024
    port_q.put(srv.server_address[1])
    srv.serve_forever()


class StandIn:
    def __init__(self, ttft_s: float = 0.0, itl_s: float = 0.0) -> None:
        q: multiprocessing.Queue[int] = multiprocessing.Queue()
        self.proc = multiprocessing.Process(target=_serve, args=(q, ttft_s, itl_s), daemon=True)
        self.proc.start()
        self.url = f"http://127.0.0.1:{q.get(timeout=30)}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.join(10)


def level(url: str, **kw: object) -> list[RequestRecord]:
    spec: dict[str, object] = {"targets": [Target("stand-in", url)], "model": "m", "input_tokens": [8],
                               "output_tokens": [8], "timeout_s": 30.0, "max_in_flight": 4096}  # fmt: skip
    spec.update(kw)
    out: list[RequestRecord] = []
    LoadGenerator(LoadSpec(**spec), out.append).run()  # type: ignore[arg-type]
    return out


def max_rate(n: int) -> list[tuple[float, float, int, bool]]:
    srv = StandIn()
    rows = []
    try:
        level(srv.url, concurrency=4, requests=50)  # warm the server's and the client's paths
        for rate in RATES:
            recs = level(srv.url, rate=float(rate), requests=n, seed=1)
            sends = sorted(r.send for r in recs)
            achieved = (len(sends) - 1) / (sends[-1] - sends[0])
            failed = sum(r.status != "ok" for r in recs)
            ok = failed == 0 and achieved >= 0.95 * rate
            rows.append((float(rate), achieved, failed, ok))
            errors = sorted({(r.error or "")[:60] for r in recs if r.status != "ok"})
            verdict = "sustained" if ok else f"NOT ({'; '.join(errors) or 'too slow'})"
            print(f"  rate {rate:5d}/s: achieved {achieved:7.1f}/s, failed {failed}, {verdict}")
            if not ok:
                break
    finally:
        srv.close()
    return rows


def timestamp_error(n: int) -> None:
    srv = StandIn(TTFT_S, ITL_S)
    try:
        level(srv.url, concurrency=1, requests=10)
        for c in (1, 4):
            recs = [
                r for r in level(srv.url, concurrency=c, requests=n, output_tokens=[16]) if r.status == "ok"
            ]
            ttft = [((r.first_token or r.send) - r.send - TTFT_S) * 1e3 for r in recs]
            itl = [((b - a) - ITL_S) * 1e3 for r in recs for a, b in itertools.pairwise(r.token_times)]
            ttft_label = label(summarize(ttft), "ms", ".3g")
            print(f"  c{c}: TTFT - {TTFT_S * 1e3:g} ms: {ttft_label}; min {min(ttft):.3g} ms")
            print(f"      ITL - {ITL_S * 1e3:g} ms:  {label(summarize(itl), 'ms', '.3g')}; "
                  f"median |error| {statistics.median(abs(x) for x in itl):.3g} ms")  # fmt: skip
    finally:
        srv.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer requests (100 per rate, 100 per level)")
    a = ap.parse_args()
    print(f"serving_client: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print("highest sustained open-loop rate against a zero-latency stand-in (8 tokens per answer):")
    rows = max_rate(100 if a.quick else 400)
    sustained = [r for r, _, _, ok in rows if ok]
    print(f"  => highest sustained: {max(sustained) if sustained else 0:g} requests/s "
          f"({8 * (max(sustained) if sustained else 0):g} token arrivals/s)")  # fmt: skip
    print(f"timestamp error against a stand-in with TTFT {TTFT_S * 1e3:g} ms and ITL {ITL_S * 1e3:g} ms:")
    timestamp_error(100 if a.quick else 200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
