# Sourced by .ci/run: Debian's nginx, the instant streaming server of bench/loadgen_ceiling.py and of the
# nginx case in tests/integration/bench/test_loadgen_ceiling.py. Best effort: without root or apt-get that case
# skips and says why (the raw-asyncio server case still runs).
# Concurrent CI runs take turns at apt-get (orch_ci_apt_get, .ci/lib.sh).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
orch_setup_nginx() {
    if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
        echo "nginx: present"
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing nginx (apt-get)"
        DEBIAN_FRONTEND=noninteractive orch_ci_apt_get install -y -q nginx >/dev/null 2>&1 \
            || { orch_ci_apt_get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive orch_ci_apt_get install -y -q nginx >/dev/null 2>&1; } \
            || echo "nginx: apt-get install failed; the nginx ceiling smoke test will skip"
    else
        echo "nginx: not installed and no root apt-get; the nginx ceiling smoke test will skip"
    fi
}

orch_setup_nginx
