# Sourced by .ci/run: Ray for the `ray` test tier (real local clusters on loopback with fake GPUs).
# Plain `ray` (no dashboard): the tests check leftovers with placement_group_table and named actors.
# Exports ORCH_RAY=1; the tier fails instead of skipping when ORCH_CI=1 and ray does not import.

orch_setup_ray() {
    local ray_version="2.60.0"
    # `|| return 1`: sourced by hand (no `set -e`), a failed install must not export ORCH_RAY.
    .venv/bin/pip install --quiet "ray==${ray_version}" || return 1
    .venv/bin/python -c 'import ray; print("ray", ray.__version__)' || return 1
    export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0
    export ORCH_RAY=1
}

orch_setup_ray
