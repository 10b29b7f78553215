# Sourced by .ci/run after 20-vllm-cpu.sh: vLLM's own cache (its model-info JSON files, torch.compile
# artifacts) goes under this clone's .cache/vllm instead of the shared ~/.cache/vllm, so two CI runs on one
# machine never write the same file (vLLM rewrites modelinfos/<class>.json in place). Nothing is lost: the
# CPU engines the tests start run with --enforce-eager (their logs: "disabling torch.compile"), so there
# are no compile artifacts to reuse. VLLM_CACHE_ROOT is read by vllm/envs.py; every engine orch or a test
# starts inherits the environment (deploy/local.py passes os.environ on).
export VLLM_CACHE_ROOT="$PWD/.cache/vllm"
mkdir -p "$VLLM_CACHE_ROOT"
