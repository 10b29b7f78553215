"""PROVENANCE.md: the promoted layout's provenance as a page a reviewer reads (PROVENANCE.json holds all)."""

from __future__ import annotations

from typing import Any

_DISTRIBUTIONS = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_chunk_ms", "ITL (per chunk)"),
    ("e2e_ms", "E2E"),
)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _metrics_table(metrics: dict[str, Any]) -> list[str]:
    lines = ["| metric | p50 | p90 | p99 | mean |", "|---|---|---|---|---|"]
    for key, label in _DISTRIBUTIONS:
        d = metrics.get(key) or {}
        lines.append(
            f"| {label} (ms) | {_fmt(d.get('p50'))} | {_fmt(d.get('p90'))} | {_fmt(d.get('p99'))} "
            f"| {_fmt(d.get('mean'))} |"
        )
    per_gpu = metrics.get("per_gpu") or {}
    lines += [
        "",
        f"- requests: {metrics.get('n_completed')} completed, {metrics.get('n_failed')} failed "
        f"(error rate {_fmt(metrics.get('error_rate'), 4)})",
        f"- goodput: {_fmt(metrics.get('goodput'))} req/s; throughput "
        f"{_fmt(metrics.get('request_throughput'))} req/s, "
        f"{_fmt(metrics.get('output_throughput'), 1)} output tok/s",
        f"- per GPU: {_fmt(per_gpu.get('request_throughput'), 3)} req/s, "
        f"{_fmt(per_gpu.get('output_throughput'), 1)} output tok/s",
    ]
    return lines


def provenance_markdown(p: dict[str, Any]) -> str:
    run, lay, art, meas = p["run"], p["layout"], p["artifacts"], p["measured"]
    hw, version = meas["hardware_spec"], art["engine_version"] or "(version not pinned)"
    point = p["winning_point"]
    out = [
        f"# Promoted layout {lay['layout']} for {p['model']['name']}",
        "",
        f"Run `{run['run_id']}` ({lay['chosen']}), promoted {p['promoted_at']} by orch {p['orch_version']}.",
        "",
        "| | |",
        "|---|---|",
        f"| layout | `{lay['layout']}` ({lay['gpus']} GPUs) |",
        f"| artifacts for | {art['engine']} {version}, image `{art['image']}` |",
        f"| served model name | `{art.get('served_model_name') or '-'}` (what the run's clients asked for) |",
        f"| GPU product | `{art.get('gpu_product') or '-'}` (node label nvidia.com/gpu.product) |",
        f"| Helm chart | {(art.get('chart') or {}).get('name', '-')} "
        f"{(art.get('chart') or {}).get('version') or '(version unknown)'} |",
        f"| measured on | {meas['engine']} {meas['engine_version'] or ''}, target {meas['target']} |",
        f"| hardware (spec) | {hw.get('gpu')}, {hw.get('nodes')} node(s) |",
        f"| model | {p['model']['name']} (config hash `{p['model']['config_hash']}`, "
        f"revision {p['model']['revision'] or '-'}) |",
        f"| spec | {run['spec_path'] or '-'} (hash `{run['spec_hash']}`) |",
        f"| run | {run['status']}, {run['created_at']} .. {run['finished_at']}, orch {run['orch_version']} |",
        f"| store | `{p['store']}` |",
        "",
    ]
    if p["notes"]:
        out += ["## Notes", "", *[f"- {n}" for n in p["notes"]], ""]
    out += [
        f"## Winning load point: {point['label']} "
        f"(objective {p['objective']}, score {_fmt(point['score'], 4)})",
        "",
    ]
    if point["verdict"]:
        out += [f"Verdict: {point['verdict']}", ""]
    if point["metrics"]:
        out += [*_metrics_table(point["metrics"]), ""]
    out += ["## SLO", "", *[f"- `{k}`: {v}" for k, v in p["slo"].items()], ""]
    verdicts = (p.get("selection") or {}).get("verdicts") or []
    if verdicts:
        out += ["## Every layout", "", "| layout | GPUs | passed | reason |", "|---|---|---|---|"]
        out += [f"| {v['layout']} | {v['gpus']} | {v['passed']} | {v['reason']} |" for v in verdicts]
        out.append("")
    if p["eval_metadata"]:
        out += ["## Eval metadata", "", *[f"- {k}: {v}" for k, v in p["eval_metadata"].items()], ""]
    out += ["## Files", "", "| file | sha256 |", "|---|---|"]
    out += [f"| {name} | `{digest[:16]}` |" for name, digest in p["files"].items()]
    out += ["", "## Deploy", ""]
    if "values.yaml" in p["files"]:
        out.append(f"- Helm: `helm install {art['name']} helm/ -n {art['namespace']} -f values.yaml`")
    if "manifests.yaml" in p["files"]:
        out.append(f"- kubectl: `kubectl -n {art['namespace']} apply -f manifests.yaml`")
    if "launch.sh" in p["files"]:
        out.append("- by hand: run each node's block of `launch.sh` on that node")
    if "ray-serve.yaml" in p["files"]:
        out.append("- Ray Serve: `serve run ray-serve.yaml` on a Ray cluster with vLLM installed")
    return "\n".join(out) + "\n"
