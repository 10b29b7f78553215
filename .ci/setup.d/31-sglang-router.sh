# Sourced by .ci/run: builds (or reuses) a small venv with SGLang's router (PyPI sglang-router: a Rust
# router in a 31 MB abi3 wheel, plus fastapi, uvicorn, aiohttp, orjson, setproctitle; about 150 MB), so
# tests/integration/engines/test_pd_flags_parsers.py checks the PD router argv orch compiles for SGLang
# with the router's own parser (sglang_router.launch_router.parse_router_args). It only parses: nothing
# is served. Cached under ~/.cache/orch-ci/, keyed by a hash of this script; built under a lock, beside,
# renamed into place (.ci/lib.sh). Exports ORCH_SGLANG_ROUTER_PYTHON only when the build succeeded.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The build, run by orch_ci_build under `set -euo pipefail` in a bash process of its own, into DIR.
_orch_build_sglang_router() {
    local venv="$1"
    python3 -m venv "${venv}"
    # 0.3.2: the newest on PyPI, the one docs/disaggregation.md's router argv was checked against.
    orch_ci_pip "${venv}/bin/pip" install --quiet sglang-router==0.3.2
    "${venv}/bin/python" -c 'from sglang_router.launch_router import parse_router_args
from sglang_router.version import __version__
print("sglang-router", __version__, "parser ok")'
}
export -f _orch_build_sglang_router

orch_setup_sglang_router() {
    local name
    name="sglang-router-$(orch_ci_hash "${BASH_SOURCE[0]}")"
    orch_ci_build "${name}" _orch_build_sglang_router || return 1
    export ORCH_SGLANG_ROUTER_PYTHON="${ORCH_CI_ROOT}/${name}/bin/python"
    echo "ORCH_SGLANG_ROUTER_PYTHON=${ORCH_SGLANG_ROUTER_PYTHON}"
}

orch_setup_sglang_router
