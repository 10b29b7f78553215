"""Which prefill/decode parallelisms each engine can hand KV over between, as its source says.

Every rule below cites the file of the engine release orch targets; docs/disaggregation.md quotes the
code. A rule that the engine enforces with an exception or assert is a rejection here (the deployment
would fail at its first transfer or at start); a rule it only logs about is a warning.

"TP" here is attention TP: in orch's grammar the ``tp`` of a layout (``tp4dp8ep`` runs attention TP 4
on each of 8 DP ranks), which is vLLM's ``tensor_parallel_size`` and SGLang's ``attn_tp_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.layout import Layout

VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"

# vLLM 0.33 KV connectors orch can compile, by name as KVTransferConfig.kv_connector takes it
# (vllm/distributed/kv_transfer/kv_connector/factory.py registers them). NixlConnector is the
# pull-mode (READ) connector (kv_connector/v1/nixl/connector.py: "NixlConnector - backward-compatible
# alias for NixlPullConnector"); ExampleConnector writes KV to a shared directory (no GPU needed).
VLLM_CONNECTORS = ("NixlConnector", "ExampleConnector")
VLLM_DEFAULT_CONNECTOR = "NixlConnector"

# SGLang 0.5.23 --disaggregation-transfer-backend choices (srt/arg_groups/choices.py
# DISAGG_TRANSFER_BACKEND_CHOICES). "fake" moves no KV (decode benchmarks only) and a prefill server
# refuses it (srt/arg_groups/pd_disaggregation_hook.py: "Prefill server does not support 'fake'").
SGLANG_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
SGLANG_DEFAULT_BACKEND = "mooncake"  # srt/arg_groups/fields/disagg.py: default "mooncake"


def transfer_backends(engine: str) -> tuple[str, ...]:
    """The KV transfer backends orch can run `engine`'s prefill/decode pairs over (empty: none). The
    simulator models NIXL's reads over the GPUs' own links (plan/kv_transfer.py), not a shared disk."""
    if engine == "vllm":
        return VLLM_CONNECTORS
    if engine == "sim":
        return ("NixlConnector",)
    if engine == "sglang":
        return tuple(b for b in SGLANG_BACKENDS if b != "fake")
    return ()


def default_backend(engine: str) -> str:
    return SGLANG_DEFAULT_BACKEND if engine == "sglang" else VLLM_DEFAULT_CONNECTOR


def backend_problem(engine: str, backend: str | None) -> str | None:
    """Why `engine` cannot hand KV over through `backend` (None: it can, or the default is meant)."""
    known = transfer_backends(engine)
    if not known:
        return f"engine {engine} has no prefill/decode disaggregation in orch; use vllm, sglang or sim"
    if backend is None or backend in known:
        return None
    if engine == "sglang" and backend == "fake":
        return (f"SGLang {SGLANG_VERSION}: a prefill server refuses transfer backend 'fake' "
                f"(srt/arg_groups/pd_disaggregation_hook.py); use one of {', '.join(known)}")
    if engine == "sim" and backend in VLLM_CONNECTORS:
        return (f"the simulator models NIXL reads over the GPUs' links, not {backend}; use NixlConnector, "
                "or engine vllm to run it")
    what = "KV connector" if engine in ("vllm", "sim") else "transfer backend"
    return f"{engine} has no {what} {backend!r}; use one of {', '.join(known)}"


@dataclass(frozen=True)
class KVShape:
    """What the handover rules need to know about the model's KV cache."""

    num_kv_heads: int
    is_mla: bool  # one latent per token, replicated on every TP rank


@dataclass(frozen=True)
class Handover:
    rejections: tuple[str, ...]
    warnings: tuple[str, ...]


def _divides(a: int, b: int) -> bool:
    small, large = min(a, b), max(a, b)
    return large % small == 0


def vllm_nixl(prefill: Layout, decode: Layout, kv: KVShape) -> Handover:
    """vLLM 0.33 NixlConnector (pull): the decode engine reads KV blocks from the prefill engine."""
    reject: list[str] = []
    p_tp, d_tp = prefill.tp, decode.tp
    if not _divides(p_tp, d_tp):
        # kv_connector/utils.py TransferTopology.tp_ratio asserts that the larger TP is a multiple
        # of the smaller ("Local tensor parallel size ... is not divisible by remote ...").
        reject.append(f"vLLM {VLLM_VERSION} NIXL: prefill TP {p_tp} and decode TP {d_tp} must divide one "
                      "another (kv_connector/utils.py TransferTopology.tp_ratio)")
    elif not kv.is_mla and p_tp > d_tp and p_tp > kv.num_kv_heads:
        # nixl/base_worker.py _validate_remote_agent_handshake: `assert not (tp_ratio < 0 and
        # is_kv_replicated(remote))`: a prefill TP above the KV heads replicates heads, and a smaller
        # decode TP cannot gather them.
        reject.append(f"vLLM {VLLM_VERSION} NIXL: prefill TP {p_tp} > decode TP {d_tp} while prefill "
                      f"replicates the {kv.num_kv_heads} KV heads (TP > heads); use prefill TP <= "
                      f"{kv.num_kv_heads} or decode TP >= prefill TP (nixl/base_worker.py "
                      "_validate_remote_agent_handshake)")
    if decode.pp > 1:
        # nixl/base_worker.py: a kv_consumer with pipeline_parallel_size > 1 raises NotImplementedError
        # ("consumer (decode) does not support pipeline_parallel_size > 1").
        reject.append(f"vLLM {VLLM_VERSION} NIXL: the decode pool cannot use PP ({decode}); completions are "
                      "counted per consumer rank (nixl/base_worker.py); use PP 1 for decode")
    return Handover(tuple(reject), ())


def vllm_example(prefill: Layout, decode: Layout, kv: KVShape) -> Handover:
    """vLLM's ExampleConnector: one safetensors file per layer under a shared directory."""
    reject: list[str] = []
    if prefill.tp > 1 or decode.tp > 1:
        # example_connector.py _generate_filename_debug names the file by layer name alone, which every
        # TP rank of a layer shares: ranks would overwrite each other's heads.
        reject.append("vLLM ExampleConnector names each file by layer alone, so TP ranks overwrite each "
                      f"other (example_connector.py _generate_filename_debug): use TP 1 on both pools, "
                      f"got p:tp{prefill.tp}, d:tp{decode.tp}")
    return Handover(tuple(reject), ())


def sglang(prefill: Layout, decode: Layout, kv: KVShape, backend: str = SGLANG_DEFAULT_BACKEND) -> Handover:
    """SGLang 0.5.23 PD (mooncake / nixl): the decode side maps each rank to prefill ranks."""
    reject: list[str] = []
    warn: list[str] = []
    if backend not in SGLANG_BACKENDS:
        reject.append(f"SGLang {SGLANG_VERSION} has no transfer backend {backend!r}; use one of "
                      f"{', '.join(SGLANG_BACKENDS)} (srt/arg_groups/choices.py)")
    elif backend == "fake":
        reject.append(f"SGLang {SGLANG_VERSION}: a prefill server refuses transfer backend 'fake' "
                      "(srt/arg_groups/pd_disaggregation_hook.py); use mooncake or nixl")
    p_tp, d_tp = prefill.tp, decode.tp
    if not _divides(p_tp, d_tp):
        # disaggregation/common/conn.py _resolve_rank_mapping maps ranks by integer division of the
        # two attention TP sizes; a ratio that is not whole maps ranks to the wrong heads.
        reject.append(f"SGLang {SGLANG_VERSION}: prefill attention TP {p_tp} and decode attention TP "
                      f"{d_tp} must divide one another (disaggregation/common/conn.py _resolve_rank_mapping)")
    elif p_tp != d_tp and not kv.is_mla:
        warn.append(f"SGLang {SGLANG_VERSION} logs 'Performance is NOT guaranteed when using different TP "
                    f"sizes for non-MLA models' (prefill TP {p_tp}, decode TP {d_tp})")
    if decode.pp not in (1, prefill.pp):
        # disaggregation/common/conn.py _resolve_rank_mapping: assert self.pp_size == info.pp_size or
        # self.pp_size == 1.
        reject.append(f"SGLang {SGLANG_VERSION}: decode PP {decode.pp} must equal prefill PP {prefill.pp} "
                      "or be 1 (disaggregation/common/conn.py _resolve_rank_mapping)")
    return Handover(tuple(reject), tuple(warn))


def handover(engine: str, prefill: Layout, decode: Layout, kv: KVShape, *,
             connector: str | None = None) -> Handover:
    """The rules of `engine` (vllm, sglang, sim) for this pair. The simulator models vLLM v1's
    scheduler and stands in for vLLM, so it takes vLLM's NIXL rules (a simulated layout that vLLM
    could not run would be a prediction nobody can deploy)."""
    if engine == "sglang":
        return sglang(prefill, decode, kv, connector or SGLANG_DEFAULT_BACKEND)
    if engine in ("vllm", "sim"):
        name = connector or VLLM_DEFAULT_CONNECTOR
        if name == "ExampleConnector":
            return vllm_example(prefill, decode, kv)
        if name != "NixlConnector":
            return Handover((f"vLLM {VLLM_VERSION}: orch compiles KV connector NixlConnector or "
                             f"ExampleConnector, not {name!r}",), ())
        return vllm_nixl(prefill, decode, kv)
    return Handover((f"engine {engine!r} has no prefill/decode disaggregation in orch; use vllm, sglang "
                     "or sim",), ())
