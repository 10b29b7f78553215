"""Checkpoint weight formats: a config.json's `quantization_config`, bytes per weight, and the engines'
`--quantization` rule.

A checkpoint that declares its format is priced from that declaration (which modules stay 16-bit
included); the engines read the same declaration themselves, so the launch command passes
`--quantization` only to quantize an unquantized checkpoint online (fp8). Sources, vLLM 0.32/0.33:
vllm/config/model.py `_verify_quantization` (a `--quantization` that differs from the checkpoint's
`quant_method` is refused: "Quantization method specified in the model config ... does not match");
SGLang 0.5.23 sglang/srt/configs/model_config.py `_verify_quantization` has the same rule.
"""

from __future__ import annotations

from typing import Any

from orchestrator.catalog.types import CheckpointQuant
from orchestrator.errors import SpecError

# Weight dtypes a spec may name (model.weight_dtype); the 4-bit ones need a checkpoint in that format.
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4")
FOUR_BIT = ("int4", "mxfp4", "nvfp4")
# Scale group of the microscaling formats (OCP MX spec: 32 elements share an E8M0 scale; NVFP4: 16
# elements share an FP8 E4M3 scale). int4 (AWQ/GPTQ) takes its group size from the checkpoint.
MX_BLOCK = {"mxfp4": 32, "nvfp4": 16}
SCALE_BYTES = {"mxfp4": 1.0, "nvfp4": 1.0, "int4": 2.0}  # E8M0, E4M3, fp16 scale per group
DEFAULT_INT4_GROUP_SIZE = 128
_KNOWN_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "mxfp4", "modelopt", "modelopt_fp4", "awq",
                  "gptq")


def weight_bytes_per_value(dtype: str, group_size: int = DEFAULT_INT4_GROUP_SIZE) -> float:
    """Bytes one weight takes with its share of the scales: int4 0.5 + 2/group, MXFP4 0.5 + 1/32,
    NVFP4 0.5 + 1/16, fp8 1 (per-tensor or per-channel scales are negligible)."""
    if dtype in ("bf16", "fp16"):
        return 2.0
    if dtype == "fp8":
        return 1.0
    if dtype in MX_BLOCK:
        return 0.5 + SCALE_BYTES[dtype] / MX_BLOCK[dtype]
    if dtype == "int4":
        if group_size <= 0:
            raise SpecError(f"int4 group size must be positive, got {group_size}")
        return 0.5 + SCALE_BYTES["int4"] / group_size
    raise SpecError(f"weight dtype {dtype!r}: expected one of {', '.join(WEIGHT_DTYPES)}")


def _where(where: str) -> str:
    return f"{where}: quantization_config"


def _modules(q: dict[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules"):
        value = q.get(key)
        if isinstance(value, list):
            out += [str(v) for v in value]
    return tuple(out)


def _kept(patterns: tuple[str, ...]) -> tuple[bool, bool]:
    """(attention kept 16-bit, dense MLPs kept 16-bit) from module patterns. A pattern naming attention
    (`model.layers.*.self_attn`) keeps every attention projection; one naming an MLP that is not the
    routed experts (`mlp.shared_expert`, `mlp.down_proj`) keeps the dense MLPs. Embeddings, LM head,
    routers and norms are priced 16-bit whatever the checkpoint says."""
    attn = dense = False
    for raw in patterns:
        p = raw.removeprefix("re:").lower()
        if "attn" in p or "attention" in p:
            attn = True
        elif ("shared_expert" in p or p.endswith((".mlp", "mlp.*", "mlp.down_proj", "mlp.gate_proj"))) \
                and "experts." not in p:
            dense = True
    return attn, dense


def _compressed_tensors(q: dict[str, Any], where: str) -> tuple[str, int, tuple[int, int] | None]:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise SpecError(f"{_where(where)}.config_groups: compressed-tensors config without groups; "
                        "orch needs the weights' num_bits, type and strategy")
    found: set[tuple[str, int, tuple[int, int] | None]] = set()
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise SpecError(f"{_where(where)}.config_groups.{name}.weights: missing; orch needs num_bits")
        bits, kind = weights.get("num_bits"), str(weights.get("type", "int"))
        strategy = str(weights.get("strategy", ""))
        group_size = int(weights.get("group_size") or 0)
        block = weights.get("block_structure")
        if bits == 8 and kind == "float":
            shape = (int(block[0]), int(block[1])) if isinstance(block, list) and len(block) == 2 else None
            found.add(("fp8", 0, shape))
        elif bits == 4 and kind == "float" and group_size in (16, 32):
            found.add(("nvfp4" if group_size == 16 else "mxfp4", group_size, None))
        elif bits == 4 and kind == "int":
            if strategy == "channel" or group_size <= 0:
                found.add(("int4", 0, None))
            else:
                found.add(("int4", group_size, None))
        else:
            raise SpecError(f"{_where(where)}.config_groups.{name}.weights: num_bits={bits} type={kind} "
                            f"strategy={strategy or '?'} is a format orch cannot price (it knows fp8, "
                            "int4 groups, NVFP4 and MXFP4)")
    if len(found) > 1:
        kinds = sorted(str(f[0]) for f in found)
        raise SpecError(f"{_where(where)}.config_groups: mixed weight formats {kinds}; "
                        "orch prices one format per checkpoint")
    return found.pop()


def read_quantization(d: dict[str, Any], where: str) -> CheckpointQuant | None:
    """The checkpoint's format from config.json's `quantization_config` (None when absent). A method or
    field orch cannot price is a one-line SpecError naming it."""
    q = d.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise SpecError(f"{_where(where)}: must be an object")
    method = str(q.get("quant_method", "")).strip().lower()
    if method not in _KNOWN_METHODS:
        raise SpecError(f"{_where(where)}.quant_method {method or '(missing)'!r}: orch cannot price this "
                        f"format; it reads {', '.join(_KNOWN_METHODS)}")
    patterns = _modules(q)
    attn_kept, dense_kept = _kept(patterns)
    group, block = 0, None
    if method == "fp8":
        dtype = "fp8"
        wbs = q.get("weight_block_size")
        if wbs is not None:
            ok = isinstance(wbs, list) and len(wbs) == 2 and all(isinstance(x, int) and x > 0 for x in wbs)
            if not ok:
                raise SpecError(f"{_where(where)}.weight_block_size: expected [block_n, block_k], "
                                f"got {wbs!r}")
            block = (wbs[0], wbs[1])
    elif method == "fbgemm_fp8":
        dtype = "fp8"  # per-channel FP8 weights, dynamic per-token activations
    elif method == "mxfp4":
        dtype, group = "mxfp4", MX_BLOCK["mxfp4"]
    elif method in ("modelopt", "modelopt_fp4"):
        algo = str(q.get("quant_algo", "")).upper()
        if algo == "FP8":
            dtype = "fp8"
        elif algo == "NVFP4" or method == "modelopt_fp4":
            dtype, group = "nvfp4", int(q.get("group_size") or MX_BLOCK["nvfp4"])
            if group != MX_BLOCK["nvfp4"]:
                raise SpecError(f"{_where(where)}.group_size {group}: NVFP4 scales groups of 16")
        else:
            raise SpecError(f"{_where(where)}.quant_algo {algo or '(missing)'!r}: orch reads modelopt FP8 "
                            "and NVFP4 only")
    elif method in ("awq", "gptq"):
        bits = q.get("bits", q.get("w_bit"))
        if bits != 4:
            raise SpecError(f"{_where(where)}.bits {bits!r}: orch prices 4-bit {method.upper()} only")
        dtype = "int4"
        group = int(q.get("group_size", q.get("q_group_size", DEFAULT_INT4_GROUP_SIZE)) or 0)
        group = max(group, 0)  # GPTQ's -1: one scale per output channel
    else:  # compressed-tensors
        dtype, group, block = _compressed_tensors(q, where)
    return CheckpointQuant(method=method, weight_dtype=dtype, group_size=group, block_shape=block,
                           attention_quantized=not attn_kept, dense_quantized=not dense_kept,
                           experts_quantized=True, unquantized_modules=patterns)


def served_weight_dtype(spec_dtype: str, spec_explicit: bool, checkpoint: CheckpointQuant | None,
                        where: str = "model.weight_dtype") -> str:
    """The dtype weights are served in: the checkpoint's format when it declares one (a spec that says
    otherwise is refused, naming both), else the spec's."""
    if checkpoint is None:
        return spec_dtype
    if spec_explicit and spec_dtype != checkpoint.weight_dtype:
        raise SpecError(f"{where}: {spec_dtype} but the checkpoint's quantization_config is "
                        f"{checkpoint.method} ({checkpoint.weight_dtype}); set weight_dtype: "
                        f"{checkpoint.weight_dtype} or point at an unquantized checkpoint")
    return checkpoint.weight_dtype


def engine_quantization_flag(weight_dtype: str, checkpoint: CheckpointQuant | None) -> str | None:
    """`--quantization` for vLLM and SGLang, or None when the engine should read the checkpoint.

    A checkpoint with a quantization_config is loaded by its own method (passing another name is
    refused at the config step, see the module doc). Only an unquantized checkpoint served in fp8
    needs the flag: online dynamic FP8 (`--quantization fp8`). 4-bit formats cannot be made online;
    their checkpoints declare the method.
    """
    if checkpoint is not None:
        return None
    return "fp8" if weight_dtype == "fp8" else None
