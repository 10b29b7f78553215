"""`orch bench` and `vllm bench serve` against one vLLM-on-CPU server: the parts the test and the
benchmark share (tests/integration/loadgen/test_vllm_agreement.py asserts what cannot depend on machine load;
bench/vllm_agreement.py compares the timings and prints ratios).

Our client runs as `orch bench` inside the vLLM venv (PYTHONPATH = this checkout, `--tokenizer` for
its token counts). Both clients send the same prompts, a ShareGPT file of N prompts of exactly IN_LEN
tokens each (vLLM's random dataset would make prompts of other tokens, 32 to 34 long here), and ask
for OUT_LEN tokens with ignore_eos, at a constant RATE with one request in flight.

The comparison is made like for like, because three things made the two clients measure different
things on this model and this machine (numbers in the findings of issue 3, summed up in docs/bench.md):

- Empty chunks. The tiny model has random weights over a byte-level BPE, so about 40% of the tokens
  it samples are single bytes of an unfinished UTF-8 character; vLLM's detokenizer holds them back
  and streams a chunk with `"text": ""`. `vllm bench serve` counts every chunk that has a choice as
  a token arrival (TTFT, ITL); `orch bench` counts only chunks that carry text. So the server here
  gets a tokenizer whose decoder maps each token to its own surface string (the clients keep the
  original one: encoding, and so every prompt's token count, is unchanged): every token is then one
  non-empty chunk and both clients see the same events.
- Batching and starvation. Different arrival schedules give different overlaps, and on two cores
  vLLM's busy-polling engine and worker processes starve its API server when requests follow each
  other without a gap: whole streams then arrive in one read. Both clients therefore send at the
  same constant rate with at most one request in flight, leaving the engine idle between requests.
- Noise. The machine is shared: the benchmark interleaves rounds of the two clients (the order
  alternating) and compares medians of the per-run medians.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.cpu_vllm_helpers import build_tiny_model
from tests.support.paths import ROOT as REPO
from tests.support.ports import free_port
from tests.support.process_groups import stop_group

READY_TIMEOUT_S = 420.0
IN_LEN, OUT_LEN = 32, 32
N = 40  # requests per run
RATE = 5.0  # requests/s, constant arrivals: ~70 ms of work, then ~130 ms of idle engine
WARMUP_S = 8.0
#: Words of the tiny model's BPE training text: each is one token, with or without a leading space.
WORDS = ("alpha", "beta", "gamma", "delta", "serve", "layout", "tensor", "pipeline", "expert", "token")
Figures = dict[str, float]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _text_per_token_tokenizer(model: Path, out: Path) -> Path:
    """The model's tokenizer with a decoder that keeps each token's surface string (no byte decoding).

    Encoding (pre-tokenizer, BPE) is untouched, so the server counts every prompt's tokens exactly as
    the clients' tokenizer (the original, in `model`) does; only the streamed text differs.
    """
    out.mkdir(parents=True, exist_ok=True)
    for f in model.iterdir():
        if f.name.startswith("tokenizer") or f.name.endswith(".jinja"):
            (out / f.name).write_bytes(f.read_bytes())
    tok = json.loads((model / "tokenizer.json").read_text())
    assert tok["decoder"]["type"] == "ByteLevel", tok["decoder"]
    tok["decoder"] = {"type": "Fuse"}
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


def _prompts(out: Path, n: int) -> Path:
    """n ShareGPT conversations whose prompts are IN_LEN tokens: both clients send this same set."""
    rng = random.Random(0)
    convs = [{"id": str(i), "conversations": [
        {"from": "human", "value": " ".join(rng.choice(WORDS) for _ in range(IN_LEN))},
        # OUT_LEN tokens: `orch bench --workload sharegpt` takes the output length from the reply
        # (it does not apply --output-len to a ShareGPT file); vLLM gets --sharegpt-output-len.
        {"from": "gpt", "value": " ".join(rng.choice(WORDS) for _ in range(OUT_LEN))},
    ]} for i in range(n)]  # fmt: skip
    out.write_text(json.dumps(convs))
    return out


@contextmanager
def vllm_server(python: str, tmp: Path, n: int = N) -> Iterator[tuple[str, Path, Path]]:
    """`vllm serve` of the tiny model on a free port, warmed up; yields (url, model dir, prompts)."""
    model = build_tiny_model(tmp / "model")
    server_tok = _text_per_token_tokenizer(model, tmp / "server-tokenizer")
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    port = free_port()
    log_path = tmp / "vllm.log"
    log = log_path.open("w")
    argv = [str(Path(python).parent / "vllm"), "serve", str(model), "--tokenizer", str(server_tok),
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512", "--enforce-eager"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _healthy(url + "/health"):
            if proc.poll() is not None:
                raise RuntimeError(f"vllm exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm not healthy in {READY_TIMEOUT_S:.0f} s")
            time.sleep(2)
        # Warm-up (the first request is slow), with a prompt of the workload's length: a 2-token first
        # request ("alpha beta") killed this vLLM CPU worker with SIGILL (exit -4) more than once.
        # Then WARMUP_S of the workload's pace: the first round after start-up was the one that most
        # often found the server starved (whole streams in one read).
        prompt = " ".join(["alpha", "beta", "gamma", "delta"] * (IN_LEN // 4))
        body = json.dumps({"model": str(model), "prompt": prompt, "max_tokens": OUT_LEN, "stream": True})
        headers = {"content-type": "application/json"}
        end = time.monotonic() + WARMUP_S
        while True:
            req = urllib.request.Request(url + "/v1/completions", data=body.encode(), headers=headers)
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()
            if time.monotonic() >= end:
                break
            time.sleep(1 / RATE)
        yield url, model, _prompts(tmp / "prompts.json", n)
    finally:
        stop_group(proc, log)


class WireTap:
    """A TCP relay to the server, in its own thread, that notes per request the wire TTFT: from the
    arrival of the request's first bytes (a `POST `) to the first server read holding `data: {`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.ttfts_ms: list[float] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0

        def serve() -> None:
            server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()  # until close(); the relay's connections die with the thread
            server.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("wire tap did not start")

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        pending: list[float] = []  # request arrival time, until its first event came back

        async def up() -> None:
            while data := await creader.read(65536):
                if data.startswith(b"POST "):
                    pending.append(time.perf_counter())
                uwriter.write(data)
                await uwriter.drain()
            uwriter.close()

        async def down() -> None:
            while data := await ureader.read(65536):
                now = time.perf_counter()
                if pending and b"data: {" in data:
                    with self._lock:
                        self.ttfts_ms.append((now - pending.pop(0)) * 1e3)
                cwriter.write(data)
                await cwriter.drain()
            cwriter.close()

        await asyncio.gather(up(), down(), return_exceptions=True)

    def take(self) -> list[float]:
        with self._lock:
            out, self.ttfts_ms = self.ttfts_ms, []
        return out

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


SERVER_HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds"}


def scrape(url: str) -> dict[str, float]:
    """Sums and counts of the server's own latency histograms (Prometheus text)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and ("_sum{" in line or "_count{" in line):
            name = line.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def server_means(before: dict[str, float], after: dict[str, float]) -> tuple[Figures, Figures]:
    """The server's mean TTFT and E2E in ms over the requests between two scrapes, and their counts."""
    means: Figures = {}
    counts: Figures = {}
    for key, name in SERVER_HISTOGRAMS.items():
        count = after.get(name + "_count", 0.0) - before.get(name + "_count", 0.0)
        counts[key] = count
        if count > 0:
            means[key] = (after[name + "_sum"] - before.get(name + "_sum", 0.0)) / count * 1e3
    return means, counts


def run_ours(python: str, url: str, model: Path, prompts: Path, seed: int, out: Path,
             n: int = N) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`orch bench` in the vLLM venv: its --json point and the records it saved."""
    code = "from orchestrator.cli import main; main()"
    argv = [python, "-c", code, "bench", "--base-url", url, "--model", str(model),
            "--tokenizer", str(model), "--workload", "sharegpt", "--dataset", str(prompts),
            "--rate", str(RATE), "--arrival", "constant",
            "--max-concurrency", "1", "--ignore-eos", "--num-requests", str(n), "--seed", str(seed),
            "--json", "--save", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"orch bench exited {res.returncode}: {res.stderr[-3000:]}")
    (point,) = json.loads(res.stdout)["points"]
    return point, [json.loads(line) for line in out.read_text().splitlines()]


def run_theirs(python: str, url: str, model: Path, prompts: Path, seed: int, out: Path,
               n: int = N) -> dict[str, Any]:
    """`vllm bench serve` with the same prompts and pace: its --save-detailed result."""
    argv = [str(Path(python).parent / "vllm"), "bench", "serve", "--backend", "vllm",
            "--base-url", url, "--model", str(model), "--tokenizer", str(model), "--dataset-name", "sharegpt",
            "--dataset-path", str(prompts), "--sharegpt-output-len", str(OUT_LEN), "--num-prompts", str(n),
            "--request-rate", str(RATE), "--burstiness", "inf", "--max-concurrency", "1", "--ignore-eos",
            "--seed", str(seed), "--disable-tqdm", "--save-result", "--save-detailed",
            "--result-dir", str(out.parent), "--result-filename", out.name]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {res.returncode}: {(res.stdout + res.stderr)[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def our_figures(point: dict[str, Any], records: list[dict[str, Any]]) -> Figures:
    m = point["metrics"]
    # Our E2E ends at the last byte (after the usage event and [DONE]); vLLM's at the last chunk with
    # a choice. The difference, per request:
    tails = [(r["done_s"] - r["chunk_times_s"][-1]) * 1e3 for r in records]
    return {"ttft": m["ttft_ms"]["p50"], "tpot": m["tpot_ms"]["p50"], "itl": m["itl_chunk_ms"]["p50"],
            "ttft_mean": m["ttft_ms"]["mean"], "e2e_mean": m["e2e_ms"]["mean"],
            "tail_p50": statistics.median(tails), "tail_max": max(tails),
            "chunks": sum(len(r["chunk_times_s"]) for r in records)}


def their_figures(r: dict[str, Any]) -> Figures:
    e2e = [t + sum(itl) for t, itl in zip(r["ttfts"], r["itls"], strict=True)]
    return {"ttft": r["median_ttft_ms"], "tpot": r["median_tpot_ms"], "itl": r["median_itl_ms"],
            "ttft_mean": r["mean_ttft_ms"], "e2e_mean": statistics.fmean(e2e) * 1e3,
            "chunks": sum(len(itl) + 1 for itl in r["itls"])}
