"""Engine settings and candidates for tests that build launch plans or simulated engines by hand."""

from __future__ import annotations

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import EngineSettings, SettingsRequest, resolve_settings
from orchestrator.layout import parse_layout

#: One simulated engine's limits as the sim and planner checks were written for them.
LIMITS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_tokens": 16}


def fixed_settings(max_model_len: int) -> EngineSettings:
    """The engine settings those checks were written for: a 256-sequence engine with an 8192-token step
    budget and 90 % of the GPU's memory (stated here, not taken from an engine's defaults)."""
    return EngineSettings("sim", "fixed for the test", max_num_seqs=256, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.9, block_size=16, enable_chunked_prefill=True,
                          enable_prefix_caching=True, max_model_len=max_model_len)


def candidate(layout: str, engine: str = "vllm", *, gpu: str = "h100-sxm", model: str = "qwen2.5-7b",
              request: SettingsRequest | None = None) -> Candidate:
    """The layout with the engine's own settings for that GPU and model (or what `request` asks)."""
    settings = resolve_settings(engine, load_gpu(gpu), load_model(model), request)
    return Candidate(parse_layout(layout), settings)
