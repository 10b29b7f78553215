# Sourced by the .ci/setup.d scripts: how a heavy tier's cache is built once and shared by every CI run
# on the machine. Only the mechanics live here (lock, build beside, rename into place, loud failure);
# what a tier installs stays in its own script, whose sha256 names its cache, so editing that script
# rebuilds its tier and editing this file rebuilds nothing.
#
# Two `.ci/run` started together on one machine share the cache root: each build holds a lock on
# <root>/<name>.lock (the second run waits, then reuses), happens in a directory of its own beside the
# cache (<root>/<name>.build.XXXXXX), and becomes visible by renaming a symlink onto <root>/<name> as its
# last step: a reader sees a whole tier or none, and no run deletes a tier another run uses. A venv
# cannot be moved once built (its scripts name its path), hence the symlink rather than moving the dir.

ORCH_CI_ROOT="${ORCH_CI_ROOT:-${HOME}/.cache/orch-ci}"

# orch_ci_build NAME BUILDER [ARGS...]
# The finished tier NAME at ${ORCH_CI_ROOT}/NAME, built when missing by `BUILDER ARGS... DIR`, DIR an
# empty directory. BUILDER is a function exported with `export -f` (with every function it calls): it
# runs in a bash process of its own under `set -euo pipefail`, so its first failing step fails the
# build whatever the caller's shell options (inside a function called from `if`, `&&` or `||`, bash
# ignores `set -e`, even in a subshell; a new process does not inherit that). Returns non-zero and makes
# nothing visible when the build fails. A build killed half-way leaves only its own directory, which the
# next build removes (under the lock, so no build is running in it).
orch_ci_build() {
    local name="$1"
    shift
    mkdir -p "${ORCH_CI_ROOT}" || return 1
    (
        # The builder inherits fd 9, so the lock is held until the builder itself is gone.
        exec 9>"${ORCH_CI_ROOT}/${name}.lock" || exit 1
        if ! flock -w "${ORCH_CI_LOCK_TIMEOUT_S:-5400}" 9; then
            echo "orch-ci: gave up waiting for ${ORCH_CI_ROOT}/${name}.lock" >&2
            exit 1
        fi
        [ -e "${ORCH_CI_ROOT}/${name}/.ok" ] && exit 0
        # Nothing whole is at NAME, so nothing points at these: leftovers of builds that died.
        rm -rf "${ORCH_CI_ROOT}/${name}".build.* "${ORCH_CI_ROOT}/${name}.new" || exit 1
        dir="$(mktemp -d "${ORCH_CI_ROOT}/${name}.build.XXXXXX")" && chmod 755 "${dir}" || exit 1
        echo "orch-ci: building ${name} in ${dir}"
        if ! bash -euo pipefail -c '"$@"' orch-ci-build "$@" "${dir}"; then
            rm -rf "${dir}"
            echo "orch-ci: building ${name} failed; nothing cached, nothing exported" >&2
            exit 1
        fi
        touch "${dir}/.ok" || exit 1
        ln -sfn "${dir}" "${ORCH_CI_ROOT}/${name}.new" || exit 1
        mv -Tf "${ORCH_CI_ROOT}/${name}.new" "${ORCH_CI_ROOT}/${name}" || exit 1
        echo "orch-ci: built ${name}"
    )
}

# orch_ci_hash FILE: the first 12 hex digits of FILE's sha256 (a tier's cache key).
orch_ci_hash() {
    sha256sum "$1" | cut -c1-12
}

# orch_ci_apt_get ARGS...: apt-get, one CI run at a time (two runs at once would meet dpkg's lock and
# the second would fail instead of waiting); also waits for any other apt user's lock.
orch_ci_apt_get() {
    flock -w 1800 /var/lock/orch-ci-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"
}

# orch_ci_pip PIP_COMMAND...: runs a pip command with the one warning per package that this machine's
# empty local index folders print filtered out; returns pip's own status (the filter is part of the
# pipeline, so PIPESTATUS[0] is pip's). Exported for builders. 20-vllm-cpu.sh and 30-sglang-parser.sh keep
# copies of their own: editing them would change their cache keys and rebuild multi-GB venvs.
orch_ci_pip() {
    "$@" 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
    return "${PIPESTATUS[0]}"
}
export -f orch_ci_pip
