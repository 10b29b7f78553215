"""TensorRT-LLM's default capacity policy (GUARANTEED_NO_EVICT) in the simulated scheduler: a request is
admitted only when the KV for its prompt and its whole output is free beside what the running ones
reserved, so nothing is ever preempted; vLLM's policy (the default) admits on the first chunk and
preempts as the sequences grow. Hand-derived from the capacity and the request sizes."""

from __future__ import annotations

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.records import RequestRecord
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore, StepPlan
from orchestrator.sim.loops import simulate
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.models import SweepSpec
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("llama-3.1-8b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(4096))
CAPACITY, PROMPT, OUTPUT = 10_000, 1_000, 1_000


class Watching(EngineCore):
    """Records the running-set size of every step."""

    sizes: list[int]

    def schedule(self) -> StepPlan:
        plan = super().schedule()
        if not hasattr(self, "sizes"):
            self.sizes = []
        self.sizes.append(plan.sequences)
        return plan


def _run(reserve: bool) -> tuple[Watching, list[RequestRecord], int]:
    eng = Watching(layout_cost(INPUTS, parse_layout("tp1")),
                   EngineConfig(kv_capacity_tokens=CAPACITY, reserve_whole_kv=reserve, **LIMITS))
    recs, summary = simulate([eng], [SimRequest(str(i), 0.0, PROMPT, OUTPUT) for i in range(8)])
    return eng, recs, summary.preemptions


def test_guaranteed_no_evict_admits_what_fits_whole_and_never_preempts() -> None:
    eng, recs, preemptions = _run(reserve=True)
    # Each request reserves 1,000 + 1,000 + half a 16-token block = 2,008 tokens: 4 fit in 10,000.
    assert max(eng.sizes) == CAPACITY // (PROMPT + OUTPUT + 8) == 4
    assert preemptions == 0 and eng.reserved_kv == 0  # every reservation returned
    assert all(r.ok and r.output_tokens == OUTPUT for r in recs)
    # The fifth request starts only when one of the first four has finished.
    first_done = min(r.done_s or 0.0 for r in recs[:4])
    assert min(r.chunk_times_s[0] for r in recs[4:]) > first_done


def test_vllm_policy_admits_on_the_first_chunk_and_preempts_as_sequences_grow() -> None:
    eng, recs, preemptions = _run(reserve=False)
    # 1,000 + 8 tokens per admission: all 8 prompts (8,064) fit at once, then growth overflows.
    assert max(eng.sizes) == 8
    assert preemptions > 0
    assert all(r.ok and r.output_tokens == OUTPUT for r in recs)


def test_the_spec_selects_the_policy() -> None:
    from orchestrator.compile import sim_options
    from orchestrator.plan.from_spec import plan_inputs
    from orchestrator.sim.run import spec_engines

    spec = SweepSpec.model_validate({
        "model": {"name": "llama-3.1-8b"}, "hardware": {"gpu": "h100-sxm"},
        "engine": {"name": "sim", "sim_scheduler": "guaranteed-no-evict"},
        "workload": {"input_tokens": 128, "output_tokens": 64, "rates_per_s": [1.0], "num_requests": 4},
        "layouts": ["tp1"],
    })
    engines = spec_engines(spec, plan_inputs(spec), parse_layout("tp1"))
    assert all(e.config.reserve_whole_kv for e in engines)
    args = sim_options(spec).argv()
    assert args[args.index("--scheduler") + 1] == "guaranteed-no-evict"
