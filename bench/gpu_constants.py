"""Measure on the GPU at hand the constants orch's GPU presets guess, with PyTorch alone.

    python bench/gpu_constants.py measure [--device cuda] [--quick] [--out gpu-constants.json]
    PYTHONPATH=. .venv/bin/python bench/gpu_constants.py overrides gpu-constants.json --gpu h100-sxm

`measure` needs only PyTorch (a GPU machine without orch's dependencies runs it as it is) and times
kernels in isolation: a device-to-device copy (HBM bandwidth), a large bf16 GEMM (the dense compute
rate), the same with FP8 inputs where the part has FP8 tensor cores, weight-read-bound GEMMs of decode
shape, batched GEMMs standing in for routed experts at several tokens per expert, causal attention
(torch's scaled_dot_product_attention), and a stack of small layers replayed from a CUDA graph (the
fixed time of one layer's ~15 kernels when their bytes and FLOPs are negligible). It writes the
timings with their shapes and methods as JSON.

`overrides` (in orch's venv) turns that file into `hardware.overrides` for a spec, against a preset's
datasheet figures: hbm_efficiency = copy bandwidth / datasheet bandwidth; compute_efficiency = the
bf16 GEMM's FLOP/s / the bf16 peak; moe_compute_efficiency = the batched expert GEMM's FLOP/s / the
bf16 peak at the nearest measured tokens per expert where it is compute-bound (bandwidth-bound points
are priced by orch's byte roofline already, so they say nothing about compute efficiency);
layer_overhead_s = the graph's time per layer. Where a measured rate exceeds the preset's datasheet
figure, the figure is what is wrong: the override sets it to the measured rate and the efficiency to 1.
The step overhead (scheduling, sampling) and request overhead belong to the engine, not the kernels:
fit those with `orch calibrate` (docs/calibration.md). All-reduce needs two or more GPUs and is not
measured here. Kernels timed alone are upper bounds on what an engine's kernels reach inside a model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KIND = "orch-gpu-constants"

# Shapes: (full, quick). Full shapes keep each timed kernel near a millisecond on an H100; quick ones
# let the script run on a CPU in seconds (the test tier), where the figures mean nothing for a GPU.
SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "hbm": ({"values": 512 * 1024 * 1024}, {"values": 8 * 1024 * 1024}),
    "gemm": ({"m": 8192, "n": 8192, "k": 8192}, {"m": 256, "n": 256, "k": 256}),
    "decode": ({"ms": [1, 8, 32, 128], "n": 28672, "k": 8192}, {"ms": [1, 8], "n": 512, "k": 256}),
    "grouped": ({"experts": 64, "k": 4096, "n": 1536, "ms": [4, 16, 64, 256, 1024, 4096]},
                {"experts": 4, "k": 128, "n": 64, "ms": [4, 64]}),
    "attention": ({"heads": 64, "seq": 8192, "head_dim": 128}, {"heads": 2, "seq": 128, "head_dim": 32}),
    "layers": ({"layers": 64, "hidden": 256, "batch": 8}, {"layers": 4, "hidden": 64, "batch": 2}),
}
REPS = (20, 3)


def _timer(torch: Any, device: str, reps: int) -> Callable[[Callable[[], Any]], float]:
    """Median seconds of `fn` over `reps` runs after two warm-up runs: CUDA events on a GPU (the
    device's own clock, launch latency outside the interval only when kernels queue back to back),
    perf_counter around a synchronize elsewhere."""
    cuda = device.startswith("cuda")

    def run(fn: Callable[[], Any]) -> float:
        for _ in range(2):
            fn()
        times = []
        for _ in range(reps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)
    return run


def _hbm(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    src = torch.empty(s["values"], dtype=torch.bfloat16, device=dev).normal_()
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    moved = 2.0 * src.numel() * src.element_size()  # read once, written once
    return {"bytes": moved, "time_s": t, "bytes_per_s": moved / t,
            "method": "dst.copy_(src) of one bf16 tensor; bytes = read + write"}


def _gemm(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    a = torch.randn(s["m"], s["k"], dtype=torch.bfloat16, device=dev)
    b = torch.randn(s["k"], s["n"], dtype=torch.bfloat16, device=dev)
    t = timed(lambda: a @ b)
    flops = 2.0 * s["m"] * s["n"] * s["k"]
    return {**s, "time_s": t, "flops_per_s": flops / t, "method": "a @ b, bf16 in and out"}


def _gemm_fp8(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    if not dev.startswith("cuda") or not hasattr(torch, "float8_e4m3fn"):
        return {"skipped": "FP8 GEMMs are timed on CUDA GPUs only"}
    if torch.cuda.get_device_capability() < (8, 9):
        return {"skipped": "no FP8 tensor cores (CUDA capability below 8.9)"}
    a = torch.randn(s["m"], s["k"], device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(s["n"], s["k"], device=dev).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
    one = torch.ones((), device=dev)
    try:
        t = timed(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    except (RuntimeError, TypeError) as exc:  # the private API moves between torch releases
        return {"skipped": f"torch._scaled_mm failed: {str(exc).splitlines()[0]}"}
    flops = 2.0 * s["m"] * s["n"] * s["k"]
    return {**s, "time_s": t, "flops_per_s": flops / t,
            "method": "torch._scaled_mm, e4m3 inputs, per-tensor scales, bf16 out"}


def _decode(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> list[dict[str, Any]]:
    w = torch.randn(s["k"], s["n"], dtype=torch.bfloat16, device=dev)
    out = []
    for m in s["ms"]:
        x = torch.randn(m, s["k"], dtype=torch.bfloat16, device=dev)
        t = timed(lambda x=x: x @ w)
        weight = 2.0 * s["k"] * s["n"]
        out.append({"m": m, "n": s["n"], "k": s["k"], "time_s": t, "weight_bytes_per_s": weight / t,
                    "flops_per_s": 2.0 * m * s["k"] * s["n"] / t})
    return out


def _grouped(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    e, k, n = s["experts"], s["k"], s["n"]
    w = torch.randn(e, k, n, dtype=torch.bfloat16, device=dev)
    points = []
    for m in s["ms"]:
        x = torch.randn(e, m, k, dtype=torch.bfloat16, device=dev)
        t = timed(lambda x=x: torch.bmm(x, w))
        points.append({"tokens_per_expert": m, "time_s": t, "flops_per_s": 2.0 * e * m * k * n / t,
                       "weight_bytes_per_s": 2.0 * e * k * n / t})
    return {"experts": e, "k": k, "n": n, "points": points,
            "method": "torch.bmm over experts with equal token groups: no routing, gather or padding, "
                      "so an upper bound on a fused MoE kernel at the same tokens per expert"}


def _attention(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    h, n, d = s["heads"], s["seq"], s["head_dim"]
    q, k, v = (torch.randn(1, h, n, d, dtype=torch.bfloat16, device=dev) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    t = timed(lambda: sdpa(q, k, v, is_causal=True))
    flops = 4.0 * h * d * n * (n + 1) / 2  # QK^T and PV over the causal half
    return {**s, "time_s": t, "flops_per_s": flops / t,
            "method": "scaled_dot_product_attention, causal, one sequence, bf16"}


def _layers(torch: Any, dev: str, timed: Callable[..., float], s: dict[str, Any]) -> dict[str, Any]:
    """A Llama-shaped layer at a width where bytes and FLOPs take no time: what remains is the kernels'
    own fixed cost (ramp-up, drain, the gap to the next), replayed from a CUDA graph as engines do."""
    h, b, n = s["hidden"], s["batch"], s["layers"]
    ws = [[torch.randn(h, x * h, dtype=torch.bfloat16, device=dev) / h for x in (3, 1, 4)]
          + [torch.randn(2 * h, h, dtype=torch.bfloat16, device=dev) / h] for _ in range(n)]
    x0 = torch.randn(b, h, dtype=torch.bfloat16, device=dev)

    def norm(x: Any) -> Any:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def forward() -> Any:
        x = x0
        for qkv, o, up, down in ws:
            a = norm(x) @ qkv
            x = x + a[:, :h] @ o
            g = norm(x) @ up
            x = x + (torch.nn.functional.silu(g[:, : 2 * h]) * g[:, 2 * h:]) @ down
        return x

    graph = None
    if dev.startswith("cuda"):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            forward()  # warm-up outside the capture, as torch requires
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
    t = timed(graph.replay if graph is not None else forward)
    how = "replayed from one CUDA graph" if graph is not None else "eager (no CUDA graph)"
    return {**s, "time_s": t, "time_per_layer_s": t / n, "graph": graph is not None,
            "method": "Llama-shaped layers (2 norms, 4 GEMMs, SiLU-and-mul, 2 residual adds) at a tiny "
                      f"width, {how}"}


def measure(device: str, quick: bool) -> dict[str, Any]:
    import torch  # only here: `overrides` runs without torch

    pick = 1 if quick else 0
    timed = _timer(torch, device, REPS[pick])
    shape = {name: pair[pick] for name, pair in SHAPES.items()}
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    info: dict[str, Any] = {"script": "bench/gpu_constants.py", "torch": torch.__version__, "device": device,
                            "quick": quick, "date": now}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, memory_bytes=props.total_memory, cuda=torch.version.cuda,
                    capability=".".join(map(str, torch.cuda.get_device_capability(device))))
    else:
        info.update(name="cpu", threads=torch.get_num_threads())
    with torch.no_grad():
        return {
            "kind": KIND, "measured_with": info,
            "hbm": _hbm(torch, device, timed, shape["hbm"]),
            "gemm_bf16": _gemm(torch, device, timed, shape["gemm"]),
            "gemm_fp8": _gemm_fp8(torch, device, timed, shape["gemm"]),
            "decode_gemm": _decode(torch, device, timed, shape["decode"]),
            "grouped_gemm": _grouped(torch, device, timed, shape["grouped"]),
            "attention": _attention(torch, device, timed, shape["attention"]),
            "layer_floor": _layers(torch, device, timed, shape["layers"]),
            "allreduce": {"skipped": "needs two or more GPUs; set intra_node.allreduce_latency_s from "
                          "nccl-tests or the engine's own all-reduce benchmark"},
        }


class InputError(Exception):
    """A measurement file orch cannot read: one line, exit code 2."""


def _num(doc: dict[str, Any], path: str, where: str) -> float:
    node: Any = doc
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, int | float) or isinstance(node, bool) or node <= 0:
        raise InputError(f"{where}: {path} must be a positive number (got {node!r}); "
                         "rerun `bench/gpu_constants.py measure`")
    return float(node)


def overrides_from(doc: dict[str, Any], gpu: Any, where: str,
                   tokens_per_expert: int = 256) -> tuple[dict[str, float], list[str]]:
    """`hardware.overrides` for preset `gpu` (a GPUSpec) from a measurement, and one note per choice."""
    if doc.get("kind") != KIND:
        raise InputError(f"{where}: not a `bench/gpu_constants.py measure` file (kind {doc.get('kind')!r})")
    info = doc.get("measured_with") or {}
    measured_mem = info.get("memory_bytes")
    if isinstance(measured_mem, int | float) and abs(measured_mem / gpu.memory_bytes - 1.0) > 0.1:
        raise InputError(f"{where}: measured on {info.get('name')!r} with {measured_mem / 2**30:.1f} GiB, "
                         f"but preset {gpu.name} has {gpu.memory_bytes / 2**30:.1f} GiB; pass its own --gpu")
    out: dict[str, float] = {}
    notes: list[str] = []

    def efficiency(key: str, rate: float, peak_key: str, peak: float, what: str) -> None:
        if rate > peak:
            out[peak_key], out[key] = round(rate, -6), 1.0
            notes.append(f"{key}: {what} {rate:.4g} exceeds the preset's {peak_key} {peak:.4g}: "
                         f"{peak_key} set to the measured rate, {key} 1")
        else:
            out[key] = round(rate / peak, 4)
            notes.append(f"{key}: {what} {rate:.4g} / {peak_key} {peak:.4g}")

    hbm = _num(doc, "hbm.bytes_per_s", where)
    efficiency("hbm_efficiency", hbm, "hbm_bytes_per_s", gpu.hbm_bytes_per_s, "copy bandwidth")
    gemm = _num(doc, "gemm_bf16.flops_per_s", where)
    efficiency("compute_efficiency", gemm, "bf16_flops_per_s", gpu.bf16_flops_per_s, "bf16 GEMM FLOP/s")
    peak = out.get("bf16_flops_per_s", gpu.bf16_flops_per_s)
    bw = out.get("hbm_bytes_per_s", gpu.hbm_bytes_per_s) * out["hbm_efficiency"]
    grouped = doc.get("grouped_gemm") or {}
    points = [p for p in grouped.get("points") or [] if isinstance(p, dict)]
    # Compute-bound where the FLOPs at the dense GEMM's rate take longer than the weights at the copy
    # bandwidth; below that the byte roofline prices the step and the point says nothing of compute.
    bound = [p for p in points if isinstance(p.get("tokens_per_expert"), int)
             and 2.0 * p["tokens_per_expert"] / gemm > 2.0 / bw]
    if not bound:
        notes.append("moe_compute_efficiency: no compute-bound expert GEMM point measured; "
                     "left to the preset")
    else:
        p = min(bound, key=lambda q: abs(q["tokens_per_expert"] - tokens_per_expert))
        rate = _num(p, "flops_per_s", f"{where}: grouped_gemm point")
        out["moe_compute_efficiency"] = round(min(rate / peak, 1.0), 4)
        shape = f"{grouped.get('experts')} experts, k {grouped.get('k')}, n {grouped.get('n')}"
        notes.append(f"moe_compute_efficiency: batched expert GEMM at {p['tokens_per_expert']} tokens per "
                     f"expert ({shape}): "
                     f"{rate:.4g} FLOP/s / bf16 peak {peak:.4g}")
    floor = _num(doc, "layer_floor.time_per_layer_s", where)
    out["layer_overhead_s"] = float(f"{floor:.3g}")
    graph = (doc.get("layer_floor") or {}).get("graph")
    notes.append(f"layer_overhead_s: {floor * 1e6:.1f} us per layer ({'CUDA graph' if graph else 'eager'})")
    fp8 = doc.get("gemm_fp8") or {}
    if isinstance(fp8.get("flops_per_s"), int | float) and gpu.fp8_flops_per_s > 0:
        notes.append(f"(not an override) FP8 GEMM: {fp8['flops_per_s'] / gpu.fp8_flops_per_s:.3f} of the FP8 "
                     "peak; orch applies compute_efficiency to the FP8 peak for fp8 weights")
    attn = doc.get("attention") or {}
    if isinstance(attn.get("flops_per_s"), int | float):
        notes.append(f"(not an override) attention: {attn['flops_per_s'] / peak:.3f} of the bf16 peak; "
                     "orch applies compute_efficiency to attention too")
    return out, notes


def _overrides_main(args: argparse.Namespace) -> int:
    from orchestrator.catalog.loader import load_gpu
    from orchestrator.errors import SpecError
    from orchestrator.spec.models import HardwareSpec

    where = str(args.file)
    try:
        doc = json.loads(Path(args.file).read_text())
        if not isinstance(doc, dict):
            raise InputError(f"{where}: expected a JSON object")
        gpu = load_gpu(args.gpu)
        out, notes = overrides_from(doc, gpu, where, args.tokens_per_expert)
        HardwareSpec.model_validate({"gpu": args.gpu, "overrides": out})
        load_gpu(args.gpu, out)  # the preset accepts every value (efficiencies in (0, 1], ...)
    except FileNotFoundError:
        print(f"error: {where}: no such file; run `bench/gpu_constants.py measure --out {where}` first",
              file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"error: {where}: not JSON ({exc.msg}, line {exc.lineno})", file=sys.stderr)
        return 2
    except (InputError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = doc.get("measured_with") or {}
    lines = [f"# measured by bench/gpu_constants.py on {info.get('name')} (torch {info.get('torch')}, "
             f"{info.get('date')}); from {where}, against preset {args.gpu}"]
    lines += [f"#   {n}" for n in notes]
    lines += ["hardware:", f"  gpu: {args.gpu}", "  overrides:"]
    lines += [f"    {k}: {v!r}" for k, v in sorted(out.items())]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time the kernels (needs PyTorch; a GPU for meaningful figures)")
    m.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    m.add_argument("--quick", action="store_true", help="tiny shapes: checks the script, measures nothing")
    m.add_argument("--out", help="write the JSON here (default: stdout)")
    o = sub.add_parser("overrides", help="hardware.overrides for a preset from a measure file (orch's venv)")
    o.add_argument("file")
    o.add_argument("--gpu", required=True, help="the preset the part is (h100-sxm, h200, ...)")
    o.add_argument("--tokens-per-expert", type=int, default=256,
                   help="the expert GEMM point for moe_compute_efficiency (tokens per expert per step)")
    o.add_argument("--out", help="write the YAML here (default: stdout)")
    args = ap.parse_args(argv)
    if args.cmd == "overrides":
        return _overrides_main(args)
    try:
        import torch
    except ImportError:
        print(f"error: measure needs PyTorch, which {sys.executable} cannot import; run it where torch is "
              "installed (pip install torch)", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA GPU visible to torch; pass --device cpu to check the script",
              file=sys.stderr)
        return 2
    doc = measure(args.device, args.quick)
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
