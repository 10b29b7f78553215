"""The cost model's guesses, in one place, printed with every plan so nobody mistakes them for facts."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Assumptions:
    """Constants that are not measured. Override them in the spec; calibrate them from measurements."""

    # Memory an engine keeps per GPU beyond weights and KV: activations of the largest step, CUDA
    # graphs, the CUDA context, NCCL buffers. vLLM profiles this at start; 3 GB is a typical H100 figure.
    # The start-up sampler run's peak, which grows with max_num_seqs x vocabulary, is modelled apart
    # (plan/memory.py sampler_profile_bytes) and comes on top on the last PP stage. It runs after the
    # forward's activations are freed, so vLLM's peak is the larger of the two, not their sum: adding
    # it counts the forward's share of this guess twice (at most that share, ~1 GB at 8k tokens).
    runtime_reserve_bytes: float = 3.0e9
    # Activations travel between GPUs in bf16 (all-reduce, all-to-all, PP send/recv).
    activation_bytes_per_value: float = 2.0
    # Expert popularity when no statistics are given: seeded lognormal with this sigma (0 = uniform).
    expert_popularity_sigma: float = 0.5
    expert_popularity_seed: int = 0

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}
