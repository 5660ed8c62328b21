"""Production selection: an explicit policy over the comparison's records.

Chosen on validation, reported on dev. Every accuracy decision here (the floors, the
filters) reads the records' `validation_metrics` only: the validation split is held out
from training and from every report, so choosing the best of many artifacts on it leaves
the dev figures an unbiased estimate of the choice (choosing on dev would flatter them).
`selection.json` says `chosen_on: validation` and gives the choice's ratios to the
teacher on both splits (`ratios_vs_teacher`): validation's chose, dev's are what a user
can expect. The model card leads with the dev figures.

`select(comparison, policy)` keeps the records of `policy.target` and rejects, with the
rule each one failed:

- `baseline`: the majority-class yardstick (compress.measure.baseline), never a candidate;
- `not_measured`: the record is not `ok` on that target (skipped or failed, reason quoted);
- `no_accuracy`: nothing scored on either split (random-weight references);
- `no_validation`: no figures on the validation split (a report from before the split, or
  data prepared without one): it cannot be judged on the split that chooses;
- `accuracy_floor`, `f1_floor`: the metric / the teacher's (same target), both on the
  validation split, below `accuracy_floor_vs_teacher`, for each metric of `floor_metrics`
  (default accuracy and F1) that the teacher's validation figures carry: F1 only exists
  for pair tasks, so on a single-sentence task only accuracy is checked. `floor_at` says
  which value of the artifact is compared: `point` (the measured value) or `lower_bound`
  (the low end of its 95% bootstrap interval, `<metric>_ci95_low`; a record without one
  is rejected). The teacher's side is always its measured value. No teacher validation
  figures on the target: nothing to compare with, rejected;
- `latency_limit`: p50 at the headline point above `max_latency_ms`;
- `size_cap`: weight files above `max_size_mb`;

then picks the fastest survivor by `rank_by`: `p50_real_length` (default: p50 of batch-1
queries over dev texts at their own lengths, no padding, lowest first: what an interactive
request sees), `p50_1x128` (p50 at batch 1, seq 128) or `dev_stream_throughput`
(sentences/s classifying the whole dev split at real lengths, highest first: the figure for
batch jobs); ties: smaller size, then name. `speedup_vs` divides the 1x128 p50s. An artifact without the ranking figure is rejected (`not_measured`). Those figures are the comparison's, where the benchmark stage measured every
artifact in one run; the choice's speed-ups over the teacher and the reference rows
(bert-base FP32) in `speedup_vs` divide figures of that one run. Nothing qualifying is a result, not an error: `chosen` is None and the
reason says which rules eliminated everyone.

`promote(selection, environment, out_dir)` copies the chosen artifact's directory (its
record's `path`) to
`models/production/` with `artifact.json` (name, format, precision, sha256 of every file)
and a model card.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compress.core.config import check
from compress.core.io import atomic_dir, sha256_file
from compress.report.schema import _pct_ci, has_interval, primary_metric, split_figures
from compress.backends import registry

TEACHER = "teacher"
CHOSEN_ON, REPORTED_ON = "validation", "dev"  # the split whose figures choose; the one that reports
TARGETS = ("cpu", "gpu")
# metric -> how reasons name it: any metric a task reports (a record's `metrics` mapping)
FLOOR_METRICS = {"accuracy": "accuracy", "f1": "F1", "macro_f1": "macro-F1", "precision": "precision",
                 "recall": "recall", "token_accuracy": "word tag accuracy"}
FLOOR_AT = ("point", "lower_bound")
# rank_by -> (record field, True when higher is better, how the reason names it)
RANKINGS = {
    "p50_real_length": ("real_latency_ms_p50", False, "p50 at batch 1 over dev texts at their own lengths"),
    "p50_1x128": ("latency_ms_p50", False, "p50 at batch 1, seq 128"),
    "dev_stream_throughput": ("dev_stream_seq_per_s", True, "dev-split throughput at real lengths"),
}


@dataclass(frozen=True)
class SelectPolicy:
    target: str = "cpu"
    accuracy_floor_vs_teacher: float = 0.985  # metric / teacher's metric on the same target, on validation
    # the floor applies to each of these the teacher's record has (F1: pair tasks only)
    floor_metrics: list[str] = field(default_factory=lambda: ["accuracy", "f1", "macro_f1"])
    floor_at: str = "point"  # point: the measured value | lower_bound: its 95% interval's low end
    max_latency_ms: float | None = None  # p50 at batch 1, seq 128
    max_size_mb: float | None = None  # weight files on disk
    exclude: list[str] = field(default_factory=lambda: ["student_control"])  # artifact names never chosen (e.g. the control)
    rank_by: str = "p50_real_length"  # p50_real_length | p50_1x128 (lowest wins) | dev_stream_throughput (highest wins)

    def __post_init__(self):
        check(self.target in TARGETS, f"target must be one of {', '.join(TARGETS)}, got '{self.target}'")
        check(self.rank_by in RANKINGS, f"rank_by must be one of {', '.join(RANKINGS)}, got '{self.rank_by}'")
        check(len(self.floor_metrics) > 0 and all(m in FLOOR_METRICS for m in self.floor_metrics),
              f"floor_metrics must be a non-empty list of {', '.join(FLOOR_METRICS)}, got {self.floor_metrics}")
        check(len(set(self.floor_metrics)) == len(self.floor_metrics), f"floor_metrics repeat: {self.floor_metrics}")
        check(self.floor_at in FLOOR_AT, f"floor_at must be one of {', '.join(FLOOR_AT)}, got '{self.floor_at}'")
        check(0 < self.accuracy_floor_vs_teacher <= 1.5,
              f"accuracy_floor_vs_teacher must be in (0, 1.5], got {self.accuracy_floor_vs_teacher}")
        check(self.max_latency_ms is None or self.max_latency_ms > 0,
              f"max_latency_ms must be > 0 or null, got {self.max_latency_ms}")
        check(self.max_size_mb is None or self.max_size_mb > 0,
              f"max_size_mb must be > 0 or null, got {self.max_size_mb}")


def select(comparison: dict, policy: SelectPolicy) -> dict:
    records = [r for r in comparison["records"] if r["target"] == policy.target]
    teacher = next((r for r in records if r["artifact"] == TEACHER and r["status"] == "ok"), None)
    teacher_acc = teacher["accuracy"] if teacher else None
    metric, label = primary_metric(records)  # accuracy; entity F1 for a tagger (no accuracy of rows)
    rejected, survivors = [], []
    for r in records:
        name = r["artifact"]
        if name in policy.exclude:
            rejected.append({"artifact": name, "rule": "excluded", "detail": "listed in select.exclude"})
        elif name in comparison.get("baselines", []):
            rejected.append({"artifact": name, "rule": "baseline",
                             "detail": "the majority-class yardstick, never a candidate"})
        elif r["status"] != "ok":
            rejected.append({"artifact": name, "rule": "not_measured", "detail": f"{r['status']}: {r['reason']}"})
        elif (missing := _no_figures(r, metric, label)) is not None:
            rejected.append({"artifact": name, **missing})
        elif (failed := _floor_failure(r, teacher, policy)) is not None:
            rejected.append({"artifact": name, **failed})
        elif r.get("latency_ms_p50") is None:
            rejected.append({"artifact": name, "rule": "not_measured", "detail": "no p50 at batch 1, seq 128"})
        elif r.get(RANKINGS[policy.rank_by][0]) is None:
            rejected.append({"artifact": name, "rule": "not_measured",
                             "detail": f"no {RANKINGS[policy.rank_by][2]} (rank_by {policy.rank_by})"})
        elif policy.max_latency_ms is not None and r["latency_ms_p50"] > policy.max_latency_ms:
            rejected.append({"artifact": name, "rule": "latency_limit",
                             "detail": f"p50 {r['latency_ms_p50']:.2f} ms > {policy.max_latency_ms} ms"})
        elif policy.max_size_mb is not None and r["size_mb"] > policy.max_size_mb:
            rejected.append({"artifact": name, "rule": "size_cap",
                             "detail": f"{r['size_mb']:.1f} MiB > {policy.max_size_mb} MiB"})
        else:
            survivors.append(r)
    key, higher_better, label = RANKINGS[policy.rank_by]
    survivors.sort(key=lambda r: (-r[key] if higher_better else r[key], r["size_mb"] or 0, r["artifact"]))
    out = {"policy": asdict(policy), "chosen_on": CHOSEN_ON, "reported_on": REPORTED_ON,
           # the teacher's dev figures (what the model card divides by) and, per split, its floor metrics
           "teacher_accuracy": teacher_acc,
           "teacher_f1": teacher.get("f1") if teacher else None,
           "teacher_macro_f1": teacher.get("macro_f1") if teacher else None,
           **{f"teacher_{split}": _floor_values(teacher, policy, split) for split in (CHOSEN_ON, REPORTED_ON)},
           "candidates": len(records),
           "qualified": [r["artifact"] for r in survivors], "rejected": rejected}
    if not survivors:
        rules = sorted({x["rule"] for x in rejected})
        out.update(chosen=None, record=None, speedup_vs={}, ratios_vs_teacher={},
                   reasons=[f"no artifact on {policy.target} meets the policy; rules that eliminated "
                            f"candidates: {', '.join(rules) or 'no candidates at all'}"])
        return out
    best = survivors[0]
    reasons = [_rank_reason(best, policy)]
    ratios = {split: floor_ratios(best, teacher, policy, split) for split in (CHOSEN_ON, REPORTED_ON)}
    for metric, ratio in ratios[CHOSEN_ON].items():
        dev = ratios[REPORTED_ON].get(metric)
        reasons.append(f"keeps {ratio:.2%} of the teacher's {FLOOR_METRICS[metric]} on {CHOSEN_ON} "
                       f"(floor {policy.accuracy_floor_vs_teacher:.2%}"
                       + (", at the interval's lower bound" if policy.floor_at == "lower_bound" else "")
                       + ("; on dev: " + ("not measured" if dev is None else f"{dev:.2%}")) + ")")
    speedups = {}
    for ref in [r for r in records if r["artifact"] in (TEACHER, *comparison.get("references", []))]:
        if ref["status"] == "ok" and ref.get("latency_ms_p50"):
            speedups[ref["artifact"]] = round(ref["latency_ms_p50"] / best["latency_ms_p50"], 3)
            reasons.append(f"{speedups[ref['artifact']]:.2f}x faster than {ref['artifact']} ({ref['format']} "
                           f"{ref['precision']}, p50 {ref['latency_ms_p50']:.2f} ms"
                           + (", same run)" if _same_run(comparison, ref, best) else ", a different run)"))
    if len(survivors) > 1:
        runner_up = survivors[1]
        reasons.append(f"next: {runner_up['artifact']} at " + (
            f"{runner_up[key]:,.1f} sentences/s" if higher_better else f"{runner_up[key]:.2f} ms"))
    out.update(chosen=best["artifact"], record=best, reasons=reasons, speedup_vs=speedups,
               ratios_vs_teacher=ratios)
    return out


def metric_value(r: dict, metric: str, split: str = REPORTED_ON) -> float | None:
    """A record's value of `metric` on `split`: on dev its flat field, else its `metrics`
    mapping; on validation its `validation_metrics`."""
    return split_figures(r, split).get(metric)


def _floor_values(teacher: dict | None, policy: SelectPolicy, split: str) -> dict[str, float]:
    """The teacher's value of each floor metric it has on `split` (the floors checked)."""
    figures = split_figures(teacher, split) if teacher else {}
    return {m: figures[m] for m in policy.floor_metrics if figures.get(m) is not None}


def floor_ratios(r: dict, teacher: dict, policy: SelectPolicy, split: str = CHOSEN_ON) -> dict[str, float | None]:
    """{metric: the artifact's value / the teacher's}, both on `split` (validation: what the
    floors compare), for each floor metric the teacher has there; the artifact's value is
    its point or its interval's low end (floor_at), None when the record lacks it."""
    mine, theirs = split_figures(r, split), split_figures(teacher, split)
    out = {}
    for metric in policy.floor_metrics:
        t = theirs.get(metric)
        if t is None:  # the task does not report it (F1 on a single-sentence task): not checked
            continue
        v = mine.get(metric) if policy.floor_at == "point" else mine.get(f"{metric}_ci95_low")
        out[metric] = None if v is None else (v / t if t else float("inf"))
    return out


def _no_figures(r: dict, metric: str, label: str) -> dict | None:
    """`no_accuracy` when `r` scored nothing on either split (random-weight references),
    `no_validation` when it has no validation figures to be chosen on; else None."""
    on_validation = split_figures(r, CHOSEN_ON).get(metric)
    if on_validation is None and split_figures(r, REPORTED_ON).get(metric) is None:
        return {"rule": "no_accuracy", "detail": f"no {label} measured"}
    if on_validation is None:
        return {"rule": "no_validation",
                "detail": f"no {label} on the validation split, which chooses (a report from before the split, "
                          "or data prepared without one: re-run prepare and the stages that measure)"}
    return None


def _at(policy: SelectPolicy) -> str:
    return " (at the interval's lower bound)" if policy.floor_at == "lower_bound" else ""


def _floor_failure(r: dict, teacher: dict | None, policy: SelectPolicy) -> dict | None:
    """The first floor `r` fails, as {"rule", "detail"}, or None when it keeps them all."""
    if teacher is None or metric_value(teacher, primary_metric([teacher])[0], CHOSEN_ON) is None:
        metric = policy.floor_metrics[0]
        return {"rule": f"{metric}_floor",
                "detail": f"no teacher {FLOOR_METRICS[metric]} on {CHOSEN_ON} on {policy.target} to compare with"}
    floor = policy.accuracy_floor_vs_teacher
    for metric, ratio in floor_ratios(r, teacher, policy, CHOSEN_ON).items():
        label = FLOOR_METRICS[metric]
        if ratio is None:
            return {"rule": f"{metric}_floor", "detail": (
                f"no 95% interval of its {CHOSEN_ON} {label} (floor_at lower_bound; reports from before intervals: "
                "re-measure)" if policy.floor_at == "lower_bound" else f"no {CHOSEN_ON} {label} measured")}
        if ratio < floor:
            return {"rule": f"{metric}_floor",
                    "detail": f"keeps {ratio:.2%} of the teacher's {label} on {CHOSEN_ON} < {floor:.2%}{_at(policy)}"}
    return None


def _rank_reason(best: dict, policy: SelectPolicy) -> str:
    if policy.rank_by == "dev_stream_throughput":
        return (f"highest dev-split throughput at real lengths on {policy.target}: "
                f"{best['dev_stream_seq_per_s']:,.1f} sentences/s (rank_by dev_stream_throughput); "
                f"p50 {best['latency_ms_p50']:.2f} ms at batch 1, seq 128")
    if policy.rank_by == "p50_real_length":
        return (f"fastest qualifying artifact on {policy.target} at real lengths: p50 {best['real_latency_ms_p50']:.2f} ms, "
                f"p99 {best['real_latency_ms_p99']:.2f} ms at batch 1 over dev texts at their own lengths "
                f"(rank_by p50_real_length); p50 {best['latency_ms_p50']:.2f} ms at batch 1, seq 128")
    return f"fastest qualifying artifact on {policy.target}: p50 {best['latency_ms_p50']:.2f} ms at batch 1, seq 128"


def _same_run(comparison: dict, *records: dict) -> bool:
    """True when the benchmark measured all these records in its one run."""
    from_stage = comparison.get("latency_from_stage", [])
    return "benchmark" in comparison.get("stages", []) and all(
        f"{r['artifact']}/{r['target']}" not in from_stage for r in records)


# --- promotion ---------------------------------------------------------------------------

def file_hashes(folder: Path) -> dict[str, str]:
    return {f.name: sha256_file(f) for f in sorted(p for p in folder.iterdir() if p.is_file())}


def model_card(selection: dict, environment: dict) -> str:
    r = selection["record"]
    p = selection["policy"]
    libs = ", ".join(f"{k} {v}" for k, v in environment.get("libraries", {}).items() if v)
    load = registry.get(r["format"]).usage
    # the floors the choice was held to: those the teacher has a validation value for (F1: pair tasks)
    floored = list(selection.get(f"teacher_{CHOSEN_ON}") or {})
    kept = " and ".join(f"{FLOOR_METRICS[m]} {r[m] / selection[f'teacher_{m}']:.2%}"
                        for m in FLOOR_METRICS if r.get(m) is not None and selection.get(f"teacher_{m}"))
    return "\n".join([
        f"# Model card: {r['artifact']}",
        "",
        f"Chosen by the `select` stage for the `{p['target']}` target: "
        + {"dev_stream_throughput": "highest real-length dev throughput",
           "p50_real_length": "fastest at real lengths (batch 1)"}.get(p.get("rank_by"), "fastest")
        + " artifact keeping at least "
        f"{p['accuracy_floor_vs_teacher']:.1%} of the teacher's "
        + (" and ".join(FLOOR_METRICS[m] for m in floored) or "accuracy")
        + (" at the low end of its 95% interval" if p.get("floor_at") == "lower_bound" else "")
        + f" on the {CHOSEN_ON} split"
        + (f", p50 <= {p['max_latency_ms']} ms" if p.get("max_latency_ms") else "")
        + (f", size <= {p['max_size_mb']} MiB" if p.get("max_size_mb") else "") + ". "
        f"The metrics below are the {REPORTED_ON} split's, which played no part in the choice: what to expect.",
        "",
        "## What it is",
        f"- format `{r['format']}`, precision `{r['precision']}`, backend `{r['backend']}`",
        f"- derived from `{r.get('parent') or 'the teacher'}`, built by the `{r.get('stage')}` stage "
        "(see README and dvc.yaml for the recipe)",
        f"- {r['num_params']:,} parameters, {r['size_mb']:.1f} MiB of weights",
        "",
        "## Metrics (task " + str(r.get("task")) + ", dev split)",
        (f"- accuracy {_pct_ci(r, 'accuracy')}" + "".join(f", {FLOOR_METRICS[m]} {_pct_ci(r, m)}" for m in ("f1", "macro_f1")
                                                          if r.get(m) is not None)
         if r.get("accuracy") is not None else f"- entity F1 {_pct_ci(r, 'f1')}"
         + (f", word tag accuracy {r['token_accuracy']:.2%}" if r.get("token_accuracy") is not None else ""))
        + (f" ({kept} of the teacher's)" if kept else "")
        + ("; brackets: 95% bootstrap interval over the dev rows" if has_interval([r]) else ""),
        *_validation_lines(selection),
        f"- latency p50 {r['latency_ms_p50']:.2f} ms, p99 {r['latency_ms_p99']:.2f} ms at batch 1, seq 128; "
        f"throughput {r['throughput_seq_per_s']} seq/s at batch 32, seq 128"
        + (f"; p50 {r['real_latency_ms_p50']:.2f} ms, p99 {r['real_latency_ms_p99']:.2f} ms at batch 1 over dev texts "
           "at their own lengths" if r.get("real_latency_ms_p50") is not None else "")
        + (f"; {r['dev_stream_seq_per_s']:,.1f} sentences/s over the dev split at real lengths"
           if r.get("dev_stream_seq_per_s") else ""),
        f"- peak memory {r['peak_mem_mb']} MiB RSS",
        "",
        "## Hardware the numbers come from",
        f"- CPU {environment.get('cpu_model')}, {r['threads']} threads; GPU {environment.get('gpu_name') or 'none'}",
        f"- {libs}",
        "",
        "## How to load it",
        "```python",
        load,
        "```",
        "or `compress predict \"some text\"` (verifies the sha256 in artifact.json first).",
        "",
    ])


def _validation_lines(selection: dict) -> list[str]:
    """The card's line on the split that chose: the floor metrics on validation and the
    share of the teacher's each keeps (none for a record without validation figures)."""
    r, teacher = selection["record"], selection.get(f"teacher_{CHOSEN_ON}") or {}
    figures = split_figures(r, CHOSEN_ON)
    shown = [m for m in FLOOR_METRICS if figures.get(m) is not None and m in teacher]
    if not shown:
        return []
    kept = " and ".join(f"{FLOOR_METRICS[m]} {figures[m] / teacher[m]:.2%}" for m in shown if teacher[m])
    return [f"- on the {CHOSEN_ON} split ({r.get('validation_rows')} rows), which chose it: "
            + ", ".join(f"{FLOOR_METRICS[m]} {_pct_ci(figures, m)}" for m in shown)
            + (f" ({kept} of the teacher's)" if kept else "")]


def promote(selection: dict, environment: dict, out_dir: str | Path) -> dict | None:
    """Copy the chosen artifact to out_dir with artifact.json (hashes) and MODEL_CARD.md;
    returns the artifact.json content, or None (out_dir removed) when nothing was chosen."""
    out_dir = Path(out_dir)
    if selection["chosen"] is None:
        if out_dir.exists():
            shutil.rmtree(out_dir)
        return None
    r = selection["record"]
    if not r.get("path"):
        raise ValueError(f"the chosen record {r['artifact']}/{r['target']} says no path: rerun the stages that "
                         "built it (`dvc repro`) so their records say where it is")
    src = Path(r["path"])
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: the chosen artifact '{r['artifact']}' is not on disk; run `dvc repro`")
    with atomic_dir(out_dir) as tmp:
        for f in src.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        # the copy runs as its record says (an OpenVINO IR as bf16, say), not as stored
        registry.write_manifest(tmp, r["format"], r["precision"], parent=str(src), stage="select")
        meta = {"artifact": r["artifact"], "format": r["format"], "precision": r["precision"],
                "target": r["target"], "task": r.get("task"), "sha256": file_hashes(tmp)}
        (tmp / "artifact.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        (tmp / "MODEL_CARD.md").write_text(model_card(selection, environment), encoding="utf-8")
    return meta
