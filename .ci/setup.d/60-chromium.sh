# Sourced by .ci/run: Debian's chromium, for tests/integration/report/test_browser.py (marker `browser`),
# which renders `orch report --html` headless and reads back what the plots drew. Exports ORCH_CHROMIUM.
# Best effort: without it the browser test skips and says why. Concurrent CI runs take turns at apt-get.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

orch_setup_chromium() {
    local bin="" candidate
    for candidate in /usr/bin/chromium /usr/bin/chromium-browser; do
        [ -x "$candidate" ] && { bin="$candidate"; break; }
    done
    if [ -z "$bin" ]; then
        echo "installing chromium (apt-get; a few minutes)"
        if orch_ci_apt chromium && [ -x /usr/bin/chromium ]; then
            bin=/usr/bin/chromium
        else
            echo "chromium: not installed (no root apt-get, or it failed)"
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
