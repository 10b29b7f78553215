# Sourced by .ci/run: a light venv in which SGLang's server-argument parser imports, for the
# `sglang_parser` test tier. SGLang cannot serve on CPU; this venv only validates argv. Cached under
# ~/.cache/orch-ci/sglang-parser-<sha256 of this script> (.ci/lib.sh). Exports ORCH_SGLANG_PYTHON only
# when the venv is whole.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

_orch_build_sglang_parser() {
    local venv="$1"
    python3 -m venv "${venv}"
    orch_ci_pip "${venv}/bin/pip" install --quiet --upgrade pip
    # --no-deps: the full dependency set pulls CUDA kernels; parsing needs only the list below (pip then
    # lists each unmet declared dependency: orch_ci_pip leaves those lines out).
    orch_ci_pip "${venv}/bin/pip" install --quiet --no-deps sglang==0.5.23
    orch_ci_pip "${venv}/bin/pip" install --quiet torch==2.13.0
    # pip warns that sglang wants another torch; harmless for parsing.
    orch_ci_pip "${venv}/bin/pip" install --quiet numpy orjson psutil pybase64 requests triton packaging pillow \
        starlette msgspec pydantic pyzmq tqdm IPython aiohttp
    "${venv}/bin/python" -c 'from sglang.srt.server_args import prepare_server_args; print("sglang parser ok")'
}
export -f _orch_build_sglang_parser  # run by orch_ci_build in a bash process of its own

orch_setup_sglang_parser() {
    local name
    name="sglang-parser-$(orch_ci_hash "${BASH_SOURCE[0]}")"
    orch_ci_build "${name}" _orch_build_sglang_parser || return 1
    export ORCH_SGLANG_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_SGLANG_PYTHON=${ORCH_SGLANG_PYTHON}"
}

orch_setup_sglang_parser
