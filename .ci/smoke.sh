#!/usr/bin/env bash
# The README's default install, exactly: `pip install -e '.[dev]'` in a venv of its own (.venv-smoke, in
# the clone: nothing shared with another run), then the documented commands run with it
# (tests/integration/cli/test_default_install.py with ORCH_DEFAULT_INSTALL=1). The main CI venv holds
# every extra, which is how `orch gc` without [k8s] could be a traceback while CI was green.
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf .venv-smoke
python3 -m venv .venv-smoke
.venv-smoke/bin/pip install --quiet --upgrade pip
.venv-smoke/bin/pip install --quiet -e '.[dev]'
ORCH_DEFAULT_INSTALL=1 .venv-smoke/bin/pytest -q -rs -p no:cacheprovider tests/integration/cli/test_default_install.py
