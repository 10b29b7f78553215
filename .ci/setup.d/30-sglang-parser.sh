# Sourced by .ci/run: builds (or reuses) a light venv in which SGLang's server-argument parser imports,
# for the `sglang_parser` test tier. SGLang cannot serve on CPU; this venv only validates argv.
# Cached under ~/.cache/orch-ci/, keyed by a hash of this script; built under a lock, beside, renamed
# into place (.ci/lib.sh). Exports ORCH_SGLANG_PYTHON only when the build succeeded.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# pip prints one warning per package for this machine's empty local index folders; keep the log readable.
# Returns pip's own status (the filter is part of the pipeline, so PIPESTATUS[0] is pip's).
_orch_sglang_pip() {
    # --no-deps leaves sglang's declared dependencies unmet on purpose; pip lists each one.
    "$@" 2>&1 | {
        grep -v -e "is ignored: it is neither a file nor a directory" -e "^sglang [0-9.]* requires " || true
    }
    return "${PIPESTATUS[0]}"
}

export -f _orch_sglang_pip

# The build, run by orch_ci_build under `set -euo pipefail` in a bash process of its own, into DIR.
_orch_build_sglang_parser() {
    local venv="$1"
    python3 -m venv "${venv}"
    _orch_sglang_pip "${venv}/bin/pip" install --quiet --upgrade pip
    # --no-deps: the full dependency set pulls CUDA kernels; parsing needs only the list below.
    _orch_sglang_pip "${venv}/bin/pip" install --quiet --no-deps sglang==0.5.23
    _orch_sglang_pip "${venv}/bin/pip" install --quiet torch==2.13.0
    # pip warns that sglang wants another torch; harmless for parsing.
    _orch_sglang_pip "${venv}/bin/pip" install --quiet numpy orjson psutil pybase64 requests triton packaging pillow \
        starlette msgspec pydantic pyzmq tqdm IPython aiohttp
    "${venv}/bin/python" -c 'from sglang.srt.server_args import prepare_server_args; print("sglang parser ok")'
}
export -f _orch_build_sglang_parser

orch_setup_sglang_parser() {
    local name
    name="sglang-parser-$(orch_ci_hash "${BASH_SOURCE[0]}")"
    orch_ci_build "${name}" _orch_build_sglang_parser || return 1
    export ORCH_SGLANG_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_SGLANG_PYTHON=${ORCH_SGLANG_PYTHON}"
}

orch_setup_sglang_parser
