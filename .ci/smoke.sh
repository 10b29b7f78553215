#!/usr/bin/env bash
# The smoke tier: the README's default install exactly (`pip install -e '.[dev]'`, no extras) in a venv of
# its own (.cache/smoke-venv in the clone: nothing shared with another CI run), then the README's commands
# run with it (tests/integration/cli/test_default_install.py with ORCH_DEFAULT_INSTALL=1). The main CI
# venv holds every extra, so only this tier shows what a user without them gets.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.cache/smoke-venv
rm -rf "${venv}"
python3 -m venv "${venv}"
"${venv}/bin/pip" install --quiet --upgrade pip
"${venv}/bin/pip" install --quiet -e '.[dev]'
ORCH_DEFAULT_INSTALL=1 "${venv}/bin/pytest" -q -rs -p no:cacheprovider tests/integration/cli/test_default_install.py
