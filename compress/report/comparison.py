"""The comparison of all artifacts: stage reports joined with the one-run benchmark.

`build(stage_reports, benchmark_report)` returns ``reports/comparison.json``: the stage
records (one per artifact and target, the report schema), in which latency, throughput
and the latency points come from the benchmark (all artifacts measured in one run, so
any two rows can be divided), while accuracy, agreement, size, parameters and peak
memory stay those the building stage measured: with them, the metrics' 95% intervals
(`<metric>_ci95_low/_high`), which belong to the stage's accuracy pass over the whole dev
split, and the validation split's figures (`validation_metrics`, what `select` chooses on).
The tables lead with dev, what a user can expect, and add a column of the primary metric
on validation when any record has it. The benchmark's reference rows (bert-base geometry FP32, random weights) are added
with no accuracy and no interval.

Everything the Markdown, HTML and DVC plot renderings show is derived here from that
JSON (`table_rows`, `pareto_front`, `sweep`), so the three never disagree.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from compress.core.io import atomic_write_text, replace_block
from compress.report import gpu_check
from compress.report.schema import (CI_FIELDS, CI_METRICS, CI_NOTE, HEADLINE_LATENCY, METRIC_LABELS, VALIDATION_NOTE, _fmt,
                                    _pct_ci, build_comparison, environment_lines, has_interval, has_metric,
                                    has_validation, metric_header, primary_metric, split_figures, summarize,
                                    validation_cell, validation_header, VALIDATION_FIELDS)

TEACHER = "teacher"
LATENCY_FIELDS = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "throughput_seq_per_s",
                  "dev_stream_seq_per_s", "real_latency_ms_p50", "real_latency_ms_p99", "points")


def build(stage_reports: list[dict], bench: dict | None) -> dict:
    comp = build_comparison(stage_reports)
    comp["references"] = []
    comp["latency_from_stage"] = []  # artifact/target rows whose latency is not from the one run
    measured = {(r["artifact"], r["target"]): r for r in (bench or {}).get("records", []) if r["status"] == "ok"}
    records = []
    for r in comp["records"]:
        b = measured.get((r["artifact"], r["target"]))
        if r["status"] == "ok" and b is not None:
            r = {**r, **{k: b.get(k) for k in LATENCY_FIELDS}}
        elif r["status"] == "ok":
            comp["latency_from_stage"].append(f"{r['artifact']}/{r['target']}")
        records.append(r)
    comp["records"] = records
    if bench is not None:
        ref = bench.get("details", {}).get("reference")
        if ref:
            records += [_no_orphan_intervals(r) for r in bench["records"] if r["artifact"] == ref]
            comp["references"].append(ref)
        base = bench.get("details", {}).get("baseline")
        if base:  # the majority-class yardstick: metrics only
            records += [r for r in bench["records"] if r["artifact"] == base]
            comp["baselines"] = [base]
        comp["records"] = records
        comp["summary"] = summarize(records)
        comp["stages"].append(bench["stage"])
        comp["environment"] = bench.get("environment") or comp["environment"]
        comp["benchmark"] = {k: bench["details"].get(k) for k in ("points", "reference_spec", "stage_wall_s")}
    comp["same_run_speedups"] = same_run_speedups(comp)
    return comp


def _no_orphan_intervals(r: dict) -> dict:
    """The record without intervals whose metric it does not carry: the benchmark blanks
    accuracy (its few warm-up rows are no measurement), and so must go their intervals;
    nor any validation figures (a random-weight reference is never scored)."""
    return {**r, **{f"{m}_ci95_{end}": None for m in CI_METRICS if r.get(m) is None for end in ("low", "high")},
            **{f: None for f in VALIDATION_FIELDS}}


def _ok(records: list[dict], target: str) -> list[dict]:
    return [r for r in records if r["target"] == target and r["status"] == "ok"]


def same_run_speedups(comp: dict) -> dict:
    """{f"vs_{reference}": {artifact: {target: p50 ratio at 1x128}}} for the teacher and
    every reference row: the reference's p50 over the artifact's (>1: faster)."""
    out: dict = {}
    excluded = set(comp.get("latency_from_stage", []))
    for ref_name in [TEACHER, *comp.get("references", [])]:
        table: dict = {}
        for target in ("cpu", "gpu"):
            rows = {r["artifact"]: r for r in _ok(comp["records"], target)
                    if r.get("latency_ms_p50") and f"{r['artifact']}/{target}" not in excluded}
            if ref_name not in rows:
                continue
            for name, r in rows.items():
                table.setdefault(name, {})[target] = round(rows[ref_name]["latency_ms_p50"] / r["latency_ms_p50"], 3)
        if table:
            out[f"vs_{ref_name}"] = table
    return out


def targets_measured(comp: dict) -> list[str]:
    return [t for t in ("cpu", "gpu") if _ok(comp["records"], t)]


def table_rows(comp: dict, target: str) -> list[dict]:
    """The comparison table for one target, fastest first (references last). `score` is
    the task's primary metric on dev (`metric`: accuracy, or entity F1 for a tagger), which
    the deltas, ratios, the Pareto front and the plots use; `validation_score` the same
    metric on the validation split (what `select` chooses on), with the record's
    `validation_metrics` beside it for its interval."""
    metric, _ = primary_metric(comp["records"])
    teacher = next((r for r in _ok(comp["records"], target) if r["artifact"] == TEACHER), None)
    t_acc = teacher.get(metric) if teacher else None
    vs_teacher = comp.get("same_run_speedups", {}).get(f"vs_{TEACHER}", {})
    refs = comp.get("references", [])
    baselines = comp.get("baselines", [])
    rows = []
    for r in _ok(comp["records"], target):
        acc = r.get(metric)
        rows.append({
            "artifact": r["artifact"], "format": r.get("format"), "precision": r.get("precision"),
            "reference": r["artifact"] in refs, "baseline": r["artifact"] in baselines,
            "size_mb": r.get("size_mb"), "num_params": r.get("num_params"), "accuracy": r.get("accuracy"),
            "f1": r.get("f1"), "macro_f1": r.get("macro_f1"), "token_accuracy": r.get("token_accuracy"), "f1_per_type": r.get("f1_per_type"),
            **{f: r.get(f) for f in CI_FIELDS},
            "metric": metric, "score": acc, "validation_score": split_figures(r, "validation").get(metric),
            "validation_metrics": r.get("validation_metrics"),
            "score_delta_pts": None if acc is None or t_acc is None else round(100 * (acc - t_acc), 2),
            "score_vs_teacher": None if acc is None or not t_acc else round(acc / t_acc, 4),
            "latency_ms_p50": r.get("latency_ms_p50"), "latency_ms_p90": r.get("latency_ms_p90"),
            "latency_ms_p99": r.get("latency_ms_p99"), "throughput_seq_per_s": r.get("throughput_seq_per_s"),
            "dev_stream_seq_per_s": r.get("dev_stream_seq_per_s"),
            "real_latency_ms_p50": r.get("real_latency_ms_p50"), "real_latency_ms_p99": r.get("real_latency_ms_p99"),
            "speedup_vs_teacher": vs_teacher.get(r["artifact"], {}).get(target),
            "peak_mem_mb": r.get("peak_mem_mb"), "peak_gpu_mem_mb": r.get("peak_gpu_mem_mb"),
            "same_run": f"{r['artifact']}/{target}" not in comp.get("latency_from_stage", []),
            "artifact_sha256": r.get("artifact_sha256"), "stage": r.get("stage"),
        })
    rows.sort(key=lambda x: (x["reference"] or x["baseline"], x["baseline"], x["latency_ms_p50"] is None,
                             x["latency_ms_p50"] or 0))
    return rows


def pareto_front(rows: list[dict]) -> list[str]:
    """Artifacts no other artifact beats on both p50 latency (lower) and score (higher: the
    task's primary metric), fastest first. Rows without a score or latency (references)
    are not candidates."""
    pts = sorted((r for r in rows if r.get("score") is not None and r.get("latency_ms_p50") is not None),
                 key=lambda r: (r["latency_ms_p50"], -r["score"]))
    front, best = [], float("-inf")
    for r in pts:
        if r["score"] > best:
            front.append(r["artifact"])
            best = r["score"]
    return front


def sweep(comp: dict, target: str, kind: str) -> dict[str, list[tuple[int, float]]]:
    """kind "seq": {artifact: [(seq_len, p50 ms)]} at batch 1; kind "batch":
    {artifact: [(batch, seq/s)]} at seq 128, for the artifacts of the one benchmark run.
    Points that did not run are left out."""
    out = {}
    other_runs = set(comp.get("latency_from_stage", []))
    for r in _ok(comp["records"], target):
        if f"{r['artifact']}/{target}" in other_runs:
            continue  # a curve mixes no runs: only the benchmark's artifacts are swept
        pts = []
        for p in r.get("points", []):
            if p["status"] != "ok":
                continue
            if kind == "seq" and p["batch_size"] == 1:
                pts.append((p["seq_len"], p["latency_ms_p50"]))
            elif kind == "batch" and p["seq_len"] == HEADLINE_LATENCY[1]:
                pts.append((p["batch_size"], p["throughput_seq_per_s"]))
        if len(pts) > 1:
            out[r["artifact"]] = sorted(pts)
    return out


# --- Markdown --------------------------------------------------------------------------------

def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def real_length_cell(x: dict) -> str:
    """`p50 / p99` of batch-1 queries over dev texts at their own lengths, or – unmeasured."""
    if x.get("real_latency_ms_p50") is None:
        return "–"
    return f"{_fmt(x['real_latency_ms_p50'])} / {_fmt(x['real_latency_ms_p99'])}"


def target_table_markdown(comp: dict, target: str) -> str:
    rows = table_rows(comp, target)
    front = set(pareto_front(rows))
    metric, label = primary_metric(comp["records"])
    # pair tasks show F1 beside accuracy; single sentences get no empty column, and a
    # tagger's F1 is its main column already
    extra = [m for m in ("f1", "macro_f1") if m != metric and has_metric(rows, m)]
    val = has_validation(rows, metric)  # the split that chose, after the dev columns that report
    head = ("| artifact | format | precision | size MiB | params | " + metric_header(rows, metric, label)
            + " | Δ vs teacher (points) " + "".join("| " + metric_header(rows, m, METRIC_LABELS[m]) + " " for m in extra)
            + ("| " + validation_header(rows, metric, label) + " " if val else "")
            + "| p50 ms | p90 ms | p99 ms | real-length p50 / p99 ms | throughput seq/s (32×128) | dev stream sent/s "
            "| speedup vs teacher | peak RSS MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for x in rows:
        name = x["artifact"] + (" ★" if x["artifact"] in front else "") + ("" if x["same_run"] or x["baseline"]
                                                                           else " †")
        acc = "n/a (random weights)" if x["reference"] else _pct_ci(x, metric)
        lines.append("| " + " | ".join([
            name, _fmt(x["format"]), _fmt(x["precision"]), _fmt(x["size_mb"], 1), _fmt(x["num_params"]), acc,
            "–" if x["score_delta_pts"] is None else f"{x['score_delta_pts']:+.2f}",
            *[_pct_ci(x, m) for m in extra], *([validation_cell(x, metric)] if val else []),
            _fmt(x["latency_ms_p50"]), _fmt(x["latency_ms_p90"]), _fmt(x["latency_ms_p99"]), real_length_cell(x),
            _fmt(x["throughput_seq_per_s"], 1), _fmt(x["dev_stream_seq_per_s"], 1), _x(x["speedup_vs_teacher"]),
            _fmt(x["peak_mem_mb"], 0),
        ]) + " |")
    return "\n".join(lines)


def sweep_markdown(comp: dict, target: str, kind: str) -> str:
    data = sweep(comp, target, kind)
    if not data:
        return "(not measured)"
    xs = sorted({x for pts in data.values() for x, _ in pts})
    head = "seq" if kind == "seq" else "batch"
    lines = ["| artifact | " + " | ".join(f"{head} {x}" for x in xs) + " |", "|---|" + "---|" * len(xs)]
    for name, pts in data.items():
        d = dict(pts)
        lines.append(f"| {name} | " + " | ".join(_fmt(d.get(x), 2 if kind == "seq" else 1) for x in xs) + " |")
    return "\n".join(lines)


def not_measured_lines(comp: dict) -> list[str]:
    """One line per artifact/target that did not run, with the reason."""
    return [f"- {r['artifact']} / {r['target']}: {r['status']}: {r['reason']}"
            for r in comp["records"] if r["status"] != "ok"]


def render_markdown(comp: dict) -> str:
    parts = ["# Comparison of all artifacts", "",
             f"Stages: {', '.join(comp['stages'])}. Generated from `reports/comparison.json` (the HTML page "
             "`reports/comparison.html` shows the same with plots); do not edit by hand.", "",
             "Latency (batch 1, seq 128) and throughput (batch 32, seq 128) come from the `benchmark` stage, "
             "which measures every artifact one after another in one run, so any two rows compare; so does "
             "the dev stream figure (the whole dev split classified as `compress predict` does it: real "
             "lengths, length-sorted batches of 32, sentences/s); accuracy, "
             "size and peak memory come from the stage that built each artifact. ★ marks the latency/accuracy "
             "Pareto front; † a row whose latency comes from its own stage's run.", ""]
    if has_interval(comp["records"]):
        parts += [CI_NOTE, ""]
    if has_validation(comp["records"], primary_metric(comp["records"])[0]):
        parts += [VALIDATION_NOTE, ""]
    for target in targets_measured(comp):
        parts += [f"## {target.upper()}", "", target_table_markdown(comp, target), "",
                  f"### Latency p50 (ms) against sequence length, batch 1, {target}", "",
                  sweep_markdown(comp, target, "seq"), "",
                  f"### Throughput (seq/s) against batch size, seq 128, {target}", "",
                  sweep_markdown(comp, target, "batch"), ""]
    missing = not_measured_lines(comp)
    if missing:
        parts += ["## Not measured", "", *missing, ""]
    parts += gpu_check.markdown_section(comp)
    parts += ["## Environment", "", environment_lines(comp.get("environment", {})), ""]
    return "\n".join(parts)


# --- DVC plots ---------------------------------------------------------------------------------

def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def write_plot_data(comp: dict, out_dir: str | Path, artifacts: list[str]) -> list[Path]:
    """CSV files for dvc.yaml's plot definitions: accuracy vs latency per target (long
    form, one row per artifact) and the CPU sweeps (wide form, one column per artifact in
    `artifacts`, empty where not measured, so the columns dvc.yaml names always exist)."""
    out_dir = Path(out_dir)
    written = []
    for target in ("cpu", "gpu"):
        rows = table_rows(comp, target)
        front = set(pareto_front(rows))
        data = [[x["artifact"], x["latency_ms_p50"], x["score"], x["size_mb"], int(x["artifact"] in front)]
                for x in rows if x["score"] is not None]
        path = out_dir / f"accuracy_latency_{target}.csv"
        # the score column is named after the metric (accuracy, or f1 for a tagger)
        metric = primary_metric(comp["records"])[0]
        atomic_write_text(path, _csv(["artifact", "latency_ms_p50", metric, "size_mb", "pareto"], data))
        written.append(path)
    for kind, x_name, file_name in (("seq", "seq_len", "latency_vs_seq_cpu.csv"),
                                    ("batch", "batch_size", "throughput_vs_batch_cpu.csv")):
        data = sweep(comp, "cpu", kind)
        xs = sorted({x for pts in data.values() for x, _ in pts})
        table = [[x] + [dict(data.get(a, [])).get(x, "") for a in artifacts] for x in xs]
        path = out_dir / file_name
        atomic_write_text(path, _csv([x_name, *artifacts], table))
        written.append(path)
    return written


# --- README results block ------------------------------------------------------------------------

def readme_table(comp: dict) -> str:
    """The README's results block: the CPU table (and the GPU one when measured)."""
    parts = []
    for target in targets_measured(comp):
        parts += [f"**{target.upper()}** (★ Pareto front of latency and accuracy)", "",
                  target_table_markdown(comp, target), ""]
    env = comp.get("environment", {})
    skipped_gpu = "gpu" not in targets_measured(comp)
    parts.append(f"Measured on {env.get('cpu_model', '?')} with {env.get('threads', '?')} threads, "
                 f"torch {env.get('libraries', {}).get('torch', '?')}; GPU: {env.get('gpu_name') or 'none'}"
                 + (" (GPU rows skipped: see reports/comparison.md)" if skipped_gpu else "") + "."
                 + (" " + CI_NOTE if has_interval(comp["records"]) else "")
                 + (" " + VALIDATION_NOTE if has_validation(comp["records"], primary_metric(comp["records"])[0])
                    else ""))
    return "\n".join(parts)


README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"


def update_readme(readme: str | Path, comp: dict) -> bool:
    """Rewrite the README's results block from the comparison; True when it changed."""
    return replace_block(readme, README_START, README_END, readme_table(comp))
