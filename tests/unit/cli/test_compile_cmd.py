"""`orch compile` refuses a layout the planner rejects (exit 2, the planner's reasons); --force emits it
with a warning."""

from pathlib import Path

import yaml

from tests.support.cli import Orch
from tests.support.paths import ROOT

SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def test_compile_refuses_layouts_that_do_not_fit_or_split_the_heads(orch: Orch) -> None:
    cases = (("tp1", "exceed the usable"), ("tp2", "less than max_model_len"), ("tp3", "heads"))
    for layout, reason in cases:
        out = orch("compile", SPEC, "--layout", layout, "--engine", "vllm")
        assert out.returncode == 2, (layout, out.stdout, out.stderr)
        assert out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"layout {layout}: the planner rejects it" in lines[0] and reason in lines[0], lines[0]
        assert "--force" in lines[0]


def test_compile_force_emits_with_a_warning_and_a_fitting_layout_needs_none(orch: Orch) -> None:
    forced = orch("compile", SPEC, "--layout", "tp2", "--engine", "vllm", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "vllm serve" in forced.stdout and " -tp 2 " in forced.stdout
    assert "warning: layout tp2 is rejected by the planner, emitted because of --force" in forced.stderr
    ok = orch("compile", SPEC, "--layout", "tp8", "--engine", "vllm")
    assert ok.returncode == 0, ok.stderr
    assert " -tp 8 " in ok.stdout and "rejected" not in ok.stderr


def test_compile_helm_values_and_k8s_take_the_flags_and_apply_as_they_are(orch: Orch) -> None:
    values_out = orch(
        "compile", SPEC, "--layout", "tp4x2", "--engine", "vllm", "--format", "helm-values",
        "--image", "vllm/vllm-openai:v0.32.0", "--namespace", "llm", "--name", "q72",
    )  # fmt: skip
    assert values_out.returncode == 0, values_out.stderr
    values = yaml.safe_load(values_out.stdout)
    assert values["name"] == "q72" and values["image"] == "vllm/vllm-openai:v0.32.0"
    assert values["replicas"] == 2 and values["gpusPerPod"] == 4
    assert values["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"  # qwen72b.yaml runs on h100-sxm
    deepseek = str(ROOT / "layouts" / "deepseek-v3.yaml")  # 4 nodes of 8 H200
    k8s_out = orch("compile", deepseek, "--layout", "tp8pp2x2", "--engine", "vllm", "--format", "k8s")
    assert k8s_out.returncode == 0, k8s_out.stderr
    objs = list(yaml.safe_load_all(k8s_out.stdout))
    assert [o["kind"] for o in objs] == ["LeaderWorkerSet", "Service"]
    assert objs[0]["metadata"]["name"] == "deepseek-v3-tp8pp2x2"
    assert objs[0]["metadata"]["namespace"] == "default"
    leader = objs[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert leader["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    engine = leader["containers"][0]
    assert engine["image"].startswith("vllm/vllm-openai:v") and "0.0.0.0" in engine["command"]
    assert "is a default" in k8s_out.stderr


def test_compile_k8s_from_a_kubernetes_target_and_the_refusals(tmp_path: Path, orch: Orch) -> None:
    spec = yaml.safe_load(Path(SPEC).read_text())
    spec["target"] = {"kind": "kubernetes", "namespace": "serving", "image": "vllm/vllm-openai:v0.32.0"}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(spec))
    ok = orch("compile", str(path), "--layout", "tp8", "--engine", "vllm", "--format", "k8s")
    assert ok.returncode == 0, ok.stderr
    deploy, svc = yaml.safe_load_all(ok.stdout)
    assert deploy["metadata"]["namespace"] == svc["metadata"]["namespace"] == "serving"
    assert "note:" not in ok.stderr
    latest = orch("compile", SPEC, "-l", "tp8", "--format", "k8s", "--image", "vllm/vllm-openai:latest")
    assert latest.returncode == 2 and latest.stdout == ""
    (line,) = latest.stderr.strip().splitlines()
    assert "--image" in line and "no pinned tag" in line
    sglang = orch("compile", SPEC, "--layout", "tp8", "--engine", "sglang", "--format", "ray-serve")
    assert sglang.returncode == 2 and "Ray Serve LLM runs vLLM" in sglang.stderr
    ray = orch("compile", SPEC, "--layout", "tp4x2", "--engine", "vllm", "--format", "ray-serve")
    assert ray.returncode == 0, ray.stderr
    llm = yaml.safe_load(ray.stdout)["applications"][0]["args"]["llm_configs"][0]
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 4


def test_compile_k8s_for_the_simulated_engine_needs_an_image(orch: Orch) -> None:
    # layouts/deepseek-v3.yaml runs the sim engine: there is no public image to default to (it was a
    # KeyError traceback). One line with both ways out; with --image the objects come out.
    deepseek = str(ROOT / "layouts" / "deepseek-v3.yaml")
    for fmt in ("k8s", "helm-values"):
        out = orch("compile", deepseek, "--layout", "tp8pp2x2", "--format", fmt)
        assert out.returncode == 2, (fmt, out.stderr)
        (line,) = out.stderr.strip().splitlines()
        assert "engine sim has no public image" in line and "--image" in line and "--engine vllm" in line
        assert "Traceback" not in out.stderr
    ok = orch("compile", deepseek, "--layout", "tp8pp2x2", "--format", "k8s", "--image", "reg/orch:0.1.0")
    assert ok.returncode == 0, ok.stderr
    docs = [d for d in yaml.safe_load_all(ok.stdout) if d]
    # The simulator is one process per replica, whatever nodes the replica would span: a Deployment.
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/orch:0.1.0"
    vllm = orch("compile", deepseek, "--layout", "tp8pp2x2", "--format", "k8s", "--engine", "vllm")
    assert vllm.returncode == 0, vllm.stderr
    assert "vllm/vllm-openai:v0.32.0" in vllm.stdout


def _ready_hosts_and_binds(script: str) -> list[tuple[str, str]]:
    """(host in the `ready at http://HOST:PORT` comment, --host of the command under it) per leader."""
    import re

    pairs, ready = [], None
    for line in script.splitlines():
        found = re.search(r"ready at https?://([^:/]+):\d+", line)
        if found:
            ready = found[1]
        elif ready is not None and "--host" in line:
            argv = line.split()
            pairs.append((ready, argv[argv.index("--host") + 1]))
            ready = None
    return pairs


def test_launch_commands_bind_where_their_comment_says_they_are_ready(orch: Orch) -> None:
    # `--nodes gpu1` says `ready at http://gpu1:8000`: binding 127.0.0.1 there made that untrue.
    for engine in ("vllm", "sglang"):
        for extra, expect_bind in ((["--nodes", "gpu1"], "0.0.0.0"), ([], "127.0.0.1")):
            out = orch("compile", SPEC, "--layout", "tp4x2", "--engine", engine, *extra)
            assert out.returncode == 0, out.stderr
            pairs = _ready_hosts_and_binds(out.stdout)
            assert len(pairs) == 2, out.stdout
            for ready, bind in pairs:
                assert bind == expect_bind, (engine, extra, out.stdout)
                assert bind in (ready, "0.0.0.0"), (engine, extra, out.stdout)


def test_helm_values_take_the_namespace_flag(orch: Orch) -> None:
    out = orch("compile", SPEC, "--layout", "tp8", "--engine", "vllm", "--format", "helm-values",
               "--namespace", "llm-prod")
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["namespace"] == "llm-prod"


def test_a_pairs_units_all_take_the_namespace_flag(orch: Orch) -> None:
    # Each pool and the router: a router left in the release's namespace would read pods it cannot see.
    out = orch("compile", SPEC, "--layout", "p:tp4+d:tp4", "--engine", "sglang", "--format", "helm-values",
               "--namespace", "llm-prod", "--image", "reg/engine:1", "--router-image", "reg/router:1")
    assert out.returncode == 0, out.stderr
    units = yaml.safe_load(out.stdout)["units"]
    assert len(units) == 3 and [u["namespace"] for u in units] == ["llm-prod"] * 3
