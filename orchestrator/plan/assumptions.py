"""The cost model's guesses, in one place, printed with every plan so nobody mistakes them for facts."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Assumptions:
    """Constants that are not measured. Override them in the spec; calibrate them from measurements."""

    # Memory an engine keeps per GPU beyond weights, KV and its start-up profile run: CUDA graphs, NCCL
    # and cuBLAS buffers, the allocator's slack (vLLM measures them at start as non-torch memory and,
    # since v0.21, a CUDA-graph estimate, PR #30515). The profile run's peak, the larger of the
    # forward's activations and the sampler run's logits, is computed per model and settings
    # (plan/memory.py startup_peak_bytes). This was a 3 GB guess for everything, of which the
    # activations of an 8k-token step were ~1 GB; with those computed the rest is a 2 GB guess.
    runtime_reserve_bytes: float = 2.0e9
    # Activations travel between GPUs in bf16 (all-reduce, all-to-all, PP send/recv).
    activation_bytes_per_value: float = 2.0
    # Expert popularity when no statistics are given: seeded lognormal with this sigma (0 = uniform).
    expert_popularity_sigma: float = 0.5
    expert_popularity_seed: int = 0

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}
