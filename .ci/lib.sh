# Sourced by the .ci/setup.d scripts: how a heavy tier is built once and shared by every CI run on the
# machine. Only the mechanics live here (lock, build beside, rename into place); what a tier installs is
# in its own script, whose sha256 names its cache, so editing that script rebuilds it and editing this
# file does not.
#
# Two `.ci/run` started together on one machine share ~/.cache/orch-ci: each build holds a lock (the
# second run waits, then reuses), happens in a directory of its own beside the cache, and becomes
# visible by renaming a symlink onto the cache's name, the last step: a reader sees a finished tier or
# none, never a half-built one, and no run deletes a tier another run uses. A venv cannot be moved after
# it is built (its scripts name its path), hence the symlink rather than moving the directory.

ORCH_CI_ROOT="${ORCH_CI_ROOT:-${HOME}/.cache/orch-ci}"

# orch_ci_build NAME BUILDER [ARGS...]
# The finished tier NAME at ${ORCH_CI_ROOT}/NAME (a symlink to its build directory), built when missing
# by `BUILDER ARGS... DIR` with DIR an empty directory. BUILDER (a function, exported with `export -f`
# with every function it calls) runs in a bash process of its own under `set -euo pipefail`: its first
# failing step fails the build, whatever the caller's shell options. (Inside a function called from an
# `if`, `&&` or `||`, bash ignores `set -e`, even in a subshell; a new process does not inherit that.)
# Returns non-zero, making nothing visible, when the build fails.
orch_ci_build() {
    local name="$1"
    shift
    mkdir -p "${ORCH_CI_ROOT}" || return 1
    (
        exec 9>"${ORCH_CI_ROOT}/${name}.lock" || exit 1
        if ! flock -w "${ORCH_CI_LOCK_TIMEOUT_S:-5400}" 9; then
            echo "orch-ci: gave up waiting for ${ORCH_CI_ROOT}/${name}.lock" >&2
            exit 1
        fi
        if [ -e "${ORCH_CI_ROOT}/${name}/.ok" ]; then
            exit 0
        fi
        # Builds that died half-way (the lock is ours, so none is running): nothing points at them.
        rm -rf "${ORCH_CI_ROOT}/${name}".build.* || exit 1
        dir="$(mktemp -d "${ORCH_CI_ROOT}/${name}.build.XXXXXX")" && chmod 755 "${dir}" || exit 1
        echo "orch-ci: building ${name} in ${dir}"
        if ! bash -euo pipefail -c '"$@"' orch-ci-build "$@" "${dir}"; then
            rm -rf "${dir}"
            echo "orch-ci: building ${name} failed; nothing cached" >&2
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

# orch_ci_pip PIP_ARGS...: pip, its warnings about this machine's empty local index folders left out
# of the log; pip's own exit status.
orch_ci_pip() {
    "$@" 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" \
                          -e "^sglang [0-9.]* requires " || true; }
    return "${PIPESTATUS[0]}"
}

export -f orch_ci_pip

# orch_ci_apt PACKAGE: apt-get install, one CI run at a time (two runs would meet dpkg's lock), waiting
# for the lock instead of failing. Returns non-zero when it cannot install.
orch_ci_apt() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
    (
        exec 8>/var/lock/orch-ci-apt.lock
        flock -w 1800 8 || exit 1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 "$1" >/dev/null 2>&1 \
            || { apt-get update -q -o DPkg::Lock::Timeout=600 >/dev/null 2>&1 \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 "$1" \
                    >/dev/null 2>&1; }
    )
}
