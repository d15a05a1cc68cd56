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

With --versus guidellm (issue 11, point 4), in the same run: the side-by-side with guidellm on
one server and one load. The server is tests/unit/sse_server.py as a program (its own process)
with an engine's pace: TTFT 20 ms, 5 ms between tokens, one token per chunk, ignore_eos accepted.
Each tool runs chat completions at fixed concurrency 4, 200 requests (32 input words, 16 output
tokens), twice, interleaved (orch A, guidellm A, orch B, guidellm B): A-against-A gives each
tool's own spread. guidellm runs from its own venv (--guidellm-python) with a word-level
tokenizer built here from faker text (no model hub: its synthetic data needs a tokenizer); its
TTFT and ITL p50 are read from its JSON report. Its ITL is per request (last - first token) /
(tokens - 1), weighted by tokens: it spaces the tokens evenly, so orch's ITL is printed both
pooled (its own definition) and as guidellm computes it. Agreement: |orch - guidellm| / guidellm
within max(10 %, orch's A/A spread, guidellm's A/A spread), spread = |A - B| / mean(A, B).

Usage: .venv/bin/python bench/serving_client.py [--quick] [--versus guidellm --guidellm-python P]
Never part of the pass/fail run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.metrics.percentiles import label, summarize
from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, Target

ROOT = Path(__file__).resolve().parents[1]
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


VS_TTFT_S, VS_ITL_S, VS_C, VS_N, VS_IN, VS_OUT = 0.020, 0.005, 4, 200, 32, 16

# Run with guidellm's python: a word-level tokenizer over faker's words (what guidellm's synthetic
# data draws its text from), so that a prompt of k tokens is k words, as orch's are.
_TOKENIZER = """
import sys
from faker import Faker
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
f = Faker()
f.seed_instance(0)
tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.train_from_iterator((f.text(max_nb_chars=2000) for _ in range(3000)),
                        trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
fast.save_pretrained(sys.argv[1])
"""


class Engine:
    """tests/unit/sse_server.py as a program, paced like an engine; stopped by close()."""

    def __init__(self, ttft_s: float, itl_s: float) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, str(ROOT / "tests/unit/sse_server.py"), "serve", "m", "--host", "127.0.0.1",
               "--port", str(port), "--ttft", str(ttft_s), "--itl", str(itl_s)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("stand-in engine did not answer /health")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _orch_run(url: str) -> dict[str, float]:
    recs = level(url, concurrency=VS_C, requests=VS_N, input_tokens=[VS_IN], output_tokens=[VS_OUT],
                 api="chat", ignore_eos=True)  # fmt: skip
    ok = [r for r in recs if r.status == "ok" and r.first_token is not None]
    ttft = [((r.first_token or 0.0) - r.send) * 1e3 for r in ok]
    gaps = [(b - a) * 1e3 for r in ok for a, b in itertools.pairwise(r.token_times)]
    # guidellm's ITL: (last - first token) / (tokens - 1) per request, one value per gap
    even = [
        (r.token_times[-1] - r.token_times[0]) * 1e3 / (len(r.token_times) - 1)
        for r in ok
        if len(r.token_times) > 1
        for _ in range(len(r.token_times) - 1)
    ]
    return {"ok": len(ok), "failed": len(recs) - len(ok), "ttft": statistics.median(ttft),
            "itl": statistics.median(gaps), "itl_even": statistics.median(even), "n_itl": len(gaps),
            "out": statistics.median(r.output_tokens or 0 for r in ok),
            "in": statistics.median(r.input_tokens or 0 for r in ok)}  # fmt: skip


def _guidellm_run(py: str, url: str, tokenizer: str, out: Path) -> dict[str, float]:
    cmd = [py, "-m", "guidellm", "run", "--backend", f"kind=openai_http,target={url},model=m",
           "--profile", f"kind=concurrent,streams={VS_C}", "--constraint", f"kind=max_requests,count={VS_N}",
           "--data", f"kind=synthetic_text,prompt_tokens={VS_IN},output_tokens={VS_OUT}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
           "--output", f"kind=json,path={out}", "--disable-console"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if p.returncode != 0 or not out.exists():
        raise RuntimeError(f"guidellm failed ({p.returncode}): {(p.stderr or p.stdout)[-800:]}")
    b = json.loads(out.read_text())["benchmarks"][0]
    m, reqs = b["metrics"], b["requests"]

    def p50(name: str) -> tuple[float, int]:
        s = m[name]["successful"]
        return float(s["percentiles"]["p50"]), int(s["count"])

    ttft, n = p50("time_to_first_token_ms")
    itl, n_itl = p50("inter_token_latency_ms")
    return {"ok": n, "failed": len(reqs.get("errored") or []) + len(reqs.get("incomplete") or []),
            "ttft": ttft, "itl": itl, "n_itl": n_itl, "out": p50("output_token_count")[0],
            "in": p50("prompt_token_count")[0]}  # fmt: skip


def _spread(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2)


def versus_guidellm(py: str) -> bool:
    ver = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('guidellm'))"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    print(f"side by side with guidellm {ver} ({py}): stand-in engine TTFT {VS_TTFT_S * 1e3:g} ms, "
          f"ITL {VS_ITL_S * 1e3:g} ms; chat, concurrency {VS_C}, {VS_N} requests, "
          f"{VS_IN} in / {VS_OUT} out")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="orch-vs-") as tmp:
        tok = Path(tmp) / "tokenizer"
        subprocess.run([py, "-c", _TOKENIZER, str(tok)], check=True, capture_output=True)
        eng = Engine(VS_TTFT_S, VS_ITL_S)
        try:
            level(eng.url, concurrency=VS_C, requests=20, api="chat", output_tokens=[VS_OUT])  # warm-up
            runs: dict[str, list[dict[str, float]]] = {"orch": [], "guidellm": []}
            for ab in "AB":
                runs["orch"].append(_orch_run(eng.url))
                runs["guidellm"].append(_guidellm_run(py, eng.url, str(tok), Path(tmp) / f"g{ab}.json"))
                for tool in ("orch", "guidellm"):
                    r = runs[tool][-1]
                    extra = f", ITL as guidellm spaces it {r['itl_even']:.3f} ms" if tool == "orch" else ""
                    print(f"  {tool:8s} {ab}: ok {r['ok']:g}, failed {r['failed']:g}, tokens p50 in "
                          f"{r['in']:g} / out {r['out']:g}; TTFT p50 {r['ttft']:.3f} ms; "
                          f"ITL p50 {r['itl']:.3f} ms (n={r['n_itl']:g}){extra}")  # fmt: skip
        finally:
            eng.close()
    agree = True
    for metric in ("ttft", "itl"):
        o = statistics.fmean(r[metric] for r in runs["orch"])
        g = statistics.fmean(r[metric] for r in runs["guidellm"])
        so = _spread(*(r[metric] for r in runs["orch"]))
        sg = _spread(*(r[metric] for r in runs["guidellm"]))
        band = max(0.10, so, sg)
        diff = abs(o - g) / g
        agree &= diff <= band
        print(f"  {metric.upper()} p50: orch {o:.3f} ms / guidellm {g:.3f} ms = {o / g:.3f}; |diff| "
              f"{diff:.1%}, A/A spread orch {so:.1%}, guidellm {sg:.1%}; band {band:.1%}: "
              f"{'AGREE' if diff <= band else 'DISAGREE'}")  # fmt: skip
    return agree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer requests (100 per rate, 100 per level)")
    ap.add_argument("--versus", choices=["guidellm"], help="also run the side-by-side with this generator")
    ap.add_argument("--guidellm-python", default="python3", help="the python of a venv that has guidellm")
    a = ap.parse_args()
    print(f"serving_client: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print("highest sustained open-loop rate against a zero-latency stand-in (8 tokens per answer):")
    rows = max_rate(100 if a.quick else 400)
    sustained = [r for r, _, _, ok in rows if ok]
    print(f"  => highest sustained: {max(sustained) if sustained else 0:g} requests/s "
          f"({8 * (max(sustained) if sustained else 0):g} token arrivals/s)")  # fmt: skip
    print(f"timestamp error against a stand-in with TTFT {TTFT_S * 1e3:g} ms and ITL {ITL_S * 1e3:g} ms:")
    timestamp_error(100 if a.quick else 200)
    if a.versus == "guidellm":
        return 0 if versus_guidellm(a.guidellm_python) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
