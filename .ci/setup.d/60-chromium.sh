# Sourced by .ci/run: Debian's chromium, for tests/integration/report/test_browser.py (marker `browser`),
# which renders `orch report --html` headless and reads back what the plots drew. Exports ORCH_CHROMIUM.
# Concurrent CI runs take turns at apt-get (orch_ci_apt_get, .ci/lib.sh).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
orch_setup_chromium() {
    local bin=""
    for candidate in /usr/bin/chromium /usr/bin/chromium-browser; do
        [ -x "$candidate" ] && { bin="$candidate"; break; }
    done
    if [ -z "$bin" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "installing chromium (apt-get; a few minutes)"
            DEBIAN_FRONTEND=noninteractive orch_ci_apt_get install -y -q chromium >/dev/null 2>&1 \
                || { orch_ci_apt_get update -q >/dev/null 2>&1 \
                     && DEBIAN_FRONTEND=noninteractive orch_ci_apt_get install -y -q chromium >/dev/null 2>&1; } \
                || echo "chromium: apt-get install failed"
            [ -x /usr/bin/chromium ] && bin=/usr/bin/chromium
        else
            echo "chromium: not installed and no root apt-get"
        fi
    fi
    if [ -n "$bin" ]; then
        export ORCH_CHROMIUM="$bin"
        echo "chromium: $ORCH_CHROMIUM ($("$bin" --version 2>/dev/null | head -1))"
    else
        echo "chromium: missing; the browser test will skip and say why"
    fi
}

orch_setup_chromium
