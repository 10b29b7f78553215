# Sourced by .ci/run: Debian's nginx, the server of bench/loadgen_ceiling.py and of
# tests/integration/bench/test_loadgen_ceiling.py. Best effort: without root or apt-get that test skips
# and says why. Concurrent CI runs take turns at apt-get (.ci/lib.sh).
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

orch_setup_nginx() {
    if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
        echo "nginx: present"
    elif orch_ci_apt nginx; then
        echo "nginx: installed (apt-get)"
    else
        echo "nginx: not installed (no root apt-get, or it failed); the nginx ceiling test will skip"
    fi
}

orch_setup_nginx
