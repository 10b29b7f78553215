# Sourced by .ci/run after 20-vllm-cpu.sh: builds the tiny test model into .cache/tiny-llama (what
# layouts/tiny-cpu.yaml points at), so the tests that plan that spec or run the commands the docs show
# for it run in CI instead of skipping (tests/unit/spec/test_example_specs.py,
# tests/integration/cli/test_docs_commands.py). Offline, a few seconds, with the vLLM venv's torch and
# transformers.
if [ ! -f .cache/tiny-llama/config.json ]; then
    bash scripts/build-tiny-model.sh .cache/tiny-llama
fi
