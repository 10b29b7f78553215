"""The API server in front of the engines: what a request spends there before a scheduler sees it.

Two parts, both calibration constants (catalog/types.py GPUSpec):
- `request_overhead_s`: paid by every request in parallel (HTTP handling, request parsing);
- `serial_request_overhead_s`: paid one request at a time, in arrival order. vLLM's OpenAI server
  tokenises every prompt on one thread (vllm/entrypoints/openai/serving_engine.py, `OpenAIServing`:
  `self._tokenizer_executor = ThreadPoolExecutor(max_workers=1)`) and renders chat templates on its one
  event loop, so a burst of requests queues in front of the engine: the k-th waits k times this. At
  low rates the queue is empty and it is one more fixed delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FrontEnd:
    """The API servers of a deployment: one per replica (a vLLM server tokenises for all its DP ranks
    on one thread), each with its own serial queue; a request goes to the one free soonest."""

    parallel_s: float = 0.0
    serial_s: float = 0.0
    servers: int = 1
    free_at_s: list[float] = field(default_factory=list)  # per server: when its serial part is done

    @property
    def active(self) -> bool:
        return self.parallel_s > 0 or self.serial_s > 0

    def reach_s(self, sent_s: float) -> float:
        """When a request sent at `sent_s` (after every earlier one) reaches the engines."""
        if self.serial_s <= 0:
            return sent_s + self.parallel_s
        free = self.free_at_s
        if not free:
            free.extend([0.0] * max(self.servers, 1))
        k = min(range(len(free)), key=free.__getitem__)
        free[k] = max(sent_s, free[k]) + self.serial_s
        return free[k] + self.parallel_s
