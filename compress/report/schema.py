"""The one report schema, and its one Markdown rendering.

A stage report (``reports/<stage>.json``) is::

    {"schema_version": 3, "stage": str,
     "summary": {artifact: {target: {headline numbers}}},
     "records": [Record...], "environment": {...},
     "details": {...stage specific: training summary, data card...}}

``summary`` repeats the headline numbers of ``records`` keyed by artifact and target,
because `dvc metrics show/diff` skip lists; ``records`` is what programs should read.

A Record is one artifact on one target. Units are in the field names (``_ms``, ``_mb``
(MiB, 2**20 bytes), ``_seq_per_s``, ``_s``). ``status`` is ``ok``, ``skipped`` (with
``reason``) or ``failed``. ``latency_ms_*`` are at batch 1, seq 128 and
``throughput_seq_per_s`` at batch 32, seq 128; every measured point is in ``points``.
``dev_stream_seq_per_s`` is real-length throughput: the whole dev split classified as
`compress predict` does it (tokenized, length-sorted batches of 32 padded to the longest
row of each batch), in sentences (or pairs) per second; the benchmark stage sets it.
``peak_gpu_mem_mb`` is the largest per-point peak among the points that ran (and the
accuracy pass); a point that did not fit keeps its own figure out of it.
``accuracy_ci95_low``/``_high`` and ``f1_ci95_low``/``_high`` are the 95% percentile
bootstrap interval of the metric over the dev rows (fractions, like the metric; see
`compress.measure.metrics`), set for every metric the task reports (F1: pair tasks only).
``reports/comparison.json`` holds the records of all stages in the same shape.

``metrics`` maps every metric the task reports to its value (accuracy and macro-F1 of a
classifier, F1 of a binary pair task, a tagger's entity F1, precision, recall and word tag
accuracy); ``primary_metric`` names the one the task is ranked by. The flat ``accuracy``,
``f1`` and ``macro_f1`` fields repeat it for `dvc metrics` and the tables.

Two splits, two roles. The flat metric fields, ``metrics`` and their intervals are the
**dev** split's: what the reports and the model card quote. ``validation_metrics`` holds
the same figures on the **validation** split (carved by prepare, never trained on), keyed
as on the record: every metric of ``metrics`` and its ``<metric>_ci95_low``/``_high``
(e.g. ``{"accuracy": 0.9, "accuracy_ci95_low": 0.88, "accuracy_ci95_high": 0.92}``),
with ``validation_rows`` scored and ``validation_sha256`` of the split; `select` chooses
on them alone (compress.report.select), so the dev figures stay an unbiased report of
the choice. All three are None where the data has no validation split (data prepared
before it existed) or nothing was scored.

``schema_version`` changes when a field is removed or changes meaning, or when a new
field becomes one that decisions need: any other new field defaults to None, so reports
written before it existed still load. Older versions are read and upgraded: version 1
(before ``metrics``) gets its mapping built from the flat fields; versions 1 and 2
(before the validation split) get no validation figures, so `select` rejects their
records by rule ``no_validation`` until the stages re-measure them. A newer version is
refused with a message.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from compress.core.io import atomic_write_json, atomic_write_text
from compress.measure.metrics import METRICS

SCHEMA_VERSION = 3
HEADLINE_LATENCY = (1, 128)  # (batch, seq) of the latency_ms_* fields
HEADLINE_THROUGHPUT = (32, 128)  # (batch, seq) of throughput_seq_per_s
STATUSES = ("ok", "skipped", "failed")
CI_METRICS = METRICS  # the metrics that carry <metric>_ci95_low/_high: every task metric
CI_FIELDS = tuple(f"{m}_ci95_{end}" for m in CI_METRICS for end in ("low", "high"))
SPLITS = ("validation", "dev")  # validation chooses (select), dev reports (tables, model card)
VALIDATION_FIELDS = ("validation_metrics", "validation_rows", "validation_sha256")


@dataclass(frozen=True)
class LatencyPoint:
    batch_size: int
    seq_len: int
    status: str = "ok"  # ok | does_not_fit
    reason: str | None = None
    latency_ms_p50: float | None = None
    latency_ms_p90: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_mean: float | None = None
    throughput_seq_per_s: float | None = None
    queries: int | None = None
    duration_s: float | None = None
    peak_gpu_mem_mb: float | None = None  # torch's CUDA peak during this point alone (reset before it)


def split_figures(r: dict, split: str) -> dict:
    """A record's metrics on `split` as one mapping keyed as on the record (``accuracy``,
    ``accuracy_ci95_low`` ...): for "dev" its `metrics` and flat fields, for "validation"
    its `validation_metrics` ({} when it has none)."""
    if split == "validation":
        return dict(r.get("validation_metrics") or {})
    if split != "dev":
        raise ValueError(f"unknown split '{split}': choose from {', '.join(SPLITS)}")
    flat = {k: r.get(k) for k in (*METRICS, *CI_FIELDS) if r.get(k) is not None}
    return {**(r.get("metrics") or {}), **flat}


def _check_intervals(figures: dict, where: str) -> None:
    for metric in CI_METRICS:
        low, high = figures.get(f"{metric}_ci95_low"), figures.get(f"{metric}_ci95_high")
        if (low is None) != (high is None) or (low is not None and low > high):
            raise ValueError(f"{metric}_ci95_low/high must both be set, low <= high, got {low}, {high} ({where})")


@dataclass(frozen=True)
class Record:
    artifact: str
    target: str
    status: str
    reason: str | None = None
    stage: str | None = None  # the stage that built and measured the artifact
    backend: str | None = None
    format: str | None = None
    precision: str | None = None
    task: str | None = None
    accuracy: float | None = None
    f1: float | None = None  # of the second class (binary pair tasks); entity micro F1 (exact span and type) for tagging
    macro_f1: float | None = None  # mean F1 over the classes (classification)
    primary_metric: str | None = None  # the field the task is ranked by (accuracy; f1 for a tagger)
    metrics: dict[str, float] | None = None  # every metric the task reports: name -> value
    token_accuracy: float | None = None  # tagging: share of words tagged right
    f1_per_type: dict[str, float] | None = None  # tagging: entity F1 of each type
    # 95% bootstrap interval over the dev rows (compress.measure.metrics.bootstrap_ci), fractions
    accuracy_ci95_low: float | None = None
    accuracy_ci95_high: float | None = None
    f1_ci95_low: float | None = None
    f1_ci95_high: float | None = None
    macro_f1_ci95_low: float | None = None
    macro_f1_ci95_high: float | None = None
    eval_rows: int | None = None
    parent: str | None = None  # the artifact this one was derived from
    path: str | None = None  # the directory its files are in (its manifest.json says what they are)
    agreement_with_parent: float | None = None  # share of dev predictions (rows; words when tagging) equal to the parent's (CPU)
    latency_ms_p50: float | None = None
    latency_ms_p90: float | None = None
    latency_ms_p99: float | None = None
    throughput_seq_per_s: float | None = None
    dev_stream_seq_per_s: float | None = None  # whole dev split as `compress predict` runs it
    # batch 1 over dev texts at their own lengths (no padding): the interactive figure
    real_latency_ms_p50: float | None = None
    real_latency_ms_p99: float | None = None
    size_mb: float | None = None
    num_params: int | None = None
    peak_mem_mb: float | None = None
    baseline_mem_mb: float | None = None
    peak_gpu_mem_mb: float | None = None
    threads: int | None = None
    artifact_sha256: str | None = None
    data_sha256: str | None = None  # of the dev split
    # the validation split's figures, keyed as on the record (metrics and <metric>_ci95_low/_high):
    # what `select` chooses on; None where the data has no validation split
    validation_metrics: dict[str, float] | None = None
    validation_rows: int | None = None
    validation_sha256: str | None = None
    points: list[LatencyPoint] = field(default_factory=list)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"record status must be one of {STATUSES}, got {self.status!r}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a '{self.status}' record needs a reason ({self.artifact}/{self.target})")
        own = {k: getattr(self, k) for k in ("metrics", *METRICS, *CI_FIELDS, "validation_metrics")}
        for split in SPLITS:
            where = f"{self.artifact}/{self.target}" + (", validation" if split == "validation" else "")
            _check_intervals(split_figures(own, split), where)

    @classmethod
    def skipped(cls, artifact: str, target: str, reason: str, format: str | None = None,
                precision: str | None = None, path: str | None = None) -> "Record":
        return cls(artifact=artifact, target=target, status="skipped", reason=reason,
                   format=format, precision=precision, path=path)

    def with_headline(self, latency_point: tuple[int, int], throughput_point: tuple[int, int]) -> "Record":
        """Copy the headline figures out of `points` into the flat fields."""
        by_shape = {(p.batch_size, p.seq_len): p for p in self.points if p.status == "ok"}
        lat, thr = by_shape.get(tuple(latency_point)), by_shape.get(tuple(throughput_point))
        return replace(
            self,
            latency_ms_p50=lat.latency_ms_p50 if lat else None,
            latency_ms_p90=lat.latency_ms_p90 if lat else None,
            latency_ms_p99=lat.latency_ms_p99 if lat else None,
            throughput_seq_per_s=thr.throughput_seq_per_s if thr else None,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"record has unknown fields {sorted(unknown)}")
        points = [LatencyPoint(**p) for p in d.get("points", [])]
        return cls(**{**d, "points": points})


SUMMARY_FIELDS = ("status", "accuracy", "f1", "macro_f1", *CI_FIELDS, "agreement_with_parent", "latency_ms_p50", "latency_ms_p99",
                  "throughput_seq_per_s", "dev_stream_seq_per_s", "real_latency_ms_p50", "real_latency_ms_p99",
                  "size_mb", "num_params", "peak_mem_mb", "peak_gpu_mem_mb")


def summarize(records: list[dict]) -> dict:
    """{artifact: {target: {field: value}}} of the headline fields that are set."""
    out: dict = {}
    for r in records:
        out.setdefault(r["artifact"], {})[r["target"]] = {
            k: r[k] for k in SUMMARY_FIELDS if r.get(k) is not None}
    return out


def make_report(stage: str, records: list[dict], environment: dict, details: dict | None = None) -> dict:
    records = [Record.from_dict({**r, "stage": stage}).to_dict() for r in records]  # validates
    return {"schema_version": SCHEMA_VERSION, "stage": stage, "summary": summarize(records),
            "records": records, "environment": environment, "details": details or {}}


def read_report(path: str | Path) -> dict:
    path = Path(path)
    report = json.loads(path.read_text(encoding="utf-8"))
    version = report.get("schema_version")
    if version == 1:  # before the metrics mapping: built from the flat fields
        for r in report["records"]:
            flat = {m: r[m] for m in ("accuracy", "f1", "token_accuracy") if r.get(m) is not None}
            r.setdefault("metrics", flat or None)
        version = 2
    if version == 2:  # before the validation split: no validation figures (select: no_validation)
        for r in report["records"]:
            for f in VALIDATION_FIELDS:
                r.setdefault(f, None)
        report["schema_version"] = version = SCHEMA_VERSION
    if version != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {version} is not one this version reads (1 to {SCHEMA_VERSION}); "
                         "it was written by a newer version of the project: re-run the stage that wrote it")
    for r in report["records"]:
        Record.from_dict(r)
    return report


def write_report(report: dict, reports_dir: str | Path = "reports") -> Path:
    """Write reports/<stage>.json and its Markdown rendering reports/<stage>.md."""
    reports_dir = Path(reports_dir)
    path = reports_dir / f"{report['stage']}.json"
    atomic_write_json(path, report)
    atomic_write_text(path.with_suffix(".md"), render_markdown(report))
    return path


# --- rendering ---------------------------------------------------------------------------

def _fmt(v, digits=2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.2f}%"


def _pct_ci(r: dict, metric: str) -> str:
    """The metric in percent with its 95% interval when the record has one, e.g.
    ``88.65% [86.5–90.7]``; the interval at one decimal, as that is all it resolves."""
    v, low, high = r.get(metric), r.get(f"{metric}_ci95_low"), r.get(f"{metric}_ci95_high")
    if v is None or low is None or high is None:
        return _pct(v)
    return f"{100 * v:.2f}% [{100 * low:.1f}–{100 * high:.1f}]"


METRIC_LABELS = {"accuracy": "accuracy", "f1": "F1", "macro_f1": "macro-F1"}


def primary_metric(records: list[dict]) -> tuple[str, str]:
    """(metric, label) that records of this task are ranked by, as the records say
    (`primary_metric`, set from compress.tasks.Task.primary_metric); entity F1 for a
    tagger (its records carry token_accuracy). Accuracy when no record says."""
    tagger = any(r.get("token_accuracy") is not None for r in records)
    metric = next((r["primary_metric"] for r in records if r.get("primary_metric")), "f1" if tagger else "accuracy")
    return metric, ("entity F1" if tagger and metric == "f1" else METRIC_LABELS.get(metric, metric))


def has_metric(records: list[dict], metric: str) -> bool:
    """True when any record reports `metric` (F1: pair tasks only): its column is shown."""
    return any(r.get(metric) is not None for r in records)


CI_NOTE = ("Brackets: the 95% bootstrap interval of the metric over the dev rows (rows resampled with "
           "replacement, percentile interval); it does not include training-seed variance.")
VALIDATION_NOTE = ("The validation column is the same metric on the validation split (held out from training, "
                   "its brackets over its own rows): `select` chooses on it, so the dev columns stay an unbiased "
                   "report of the choice.")


def _has_ci(r: dict, metric: str) -> bool:
    """An interval counts only beside its metric (the benchmark blanks accuracy, not more)."""
    return r.get(metric) is not None and r.get(f"{metric}_ci95_low") is not None


def has_interval(records: list[dict]) -> bool:
    return any(_has_ci(r, m) for r in records for m in CI_METRICS)


def metric_header(records: list[dict], metric: str, label: str) -> str:
    """The column title, saying what the brackets are when any record has an interval."""
    return f"{label} [95% CI]" if any(_has_ci(r, metric) for r in records) else label


def has_validation(records: list[dict], metric: str) -> bool:
    """True when any record carries `metric` on the validation split: its column is shown
    (reports from before the split get none)."""
    return any(split_figures(r, "validation").get(metric) is not None for r in records)


def validation_header(records: list[dict], metric: str, label: str) -> str:
    """The validation column's title: what chose, beside the dev columns that report."""
    rows = [split_figures(r, "validation") for r in records]
    return "validation " + metric_header(rows, metric, label) + " (chose)"


def validation_cell(r: dict, metric: str) -> str:
    return _pct_ci(split_figures(r, "validation"), metric)


def records_table(records: list[dict]) -> str:
    metric, label = primary_metric(records)  # accuracy, or entity F1 for a tagger
    # the task's other metrics beside it: F1 (binary pair tasks) or macro-F1; no empty columns
    extra = [m for m in ("f1", "macro_f1") if m != metric and has_metric(records, m)]
    val = has_validation(records, metric)  # the primary metric on the validation split, after dev's
    head = ("| artifact | target | status | format | precision | " + metric_header(records, metric, label)
            + "".join(" | " + metric_header(records, m, METRIC_LABELS[m]) for m in extra)
            + (" | " + validation_header(records, metric, label) if val else "") + " | agreement with parent "
            "| p50 ms (1×128) "
            "| p99 ms (1×128) | throughput seq/s (32×128) | dev stream sent/s | size MiB | params | peak RSS MiB "
            "| peak GPU MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"
        lines.append("| " + " | ".join([
            r["artifact"], r["target"], status, _fmt(r.get("format")), _fmt(r.get("precision")),
            _pct_ci(r, metric), *[_pct_ci(r, m) for m in extra], *([validation_cell(r, metric)] if val else []),
            (f"{_pct(r['agreement_with_parent'])} vs {r['parent']}" if r.get("agreement_with_parent") is not None
             else "–"),
            _fmt(r.get("latency_ms_p50")), _fmt(r.get("latency_ms_p99")),
            _fmt(r.get("throughput_seq_per_s"), 1), _fmt(r.get("dev_stream_seq_per_s"), 1),
            _fmt(r.get("size_mb"), 1),
            _fmt(r.get("num_params")), _fmt(r.get("peak_mem_mb"), 0), _fmt(r.get("peak_gpu_mem_mb"), 0),
        ]) + " |")
    return "\n".join(lines)


def points_table(records: list[dict]) -> str:
    lines = ["| artifact | target | batch | seq | p50 ms | p90 ms | p99 ms | seq/s | queries |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        for p in r.get("points", []):
            if p["status"] != "ok":
                lines.append(f"| {r['artifact']} | {r['target']} | {p['batch_size']} | {p['seq_len']} "
                             f"| {p['status']}: {p['reason']} | | | | |")
                continue
            lines.append(
                f"| {r['artifact']} | {r['target']} | {p['batch_size']} | {p['seq_len']} "
                f"| {_fmt(p['latency_ms_p50'])} | {_fmt(p['latency_ms_p90'])} | {_fmt(p['latency_ms_p99'])} "
                f"| {_fmt(p['throughput_seq_per_s'], 1)} | {p['queries']} |")
    return "\n".join(lines)


def environment_lines(env: dict) -> str:
    flags = ", ".join(k for k, v in env.get("cpu_flags", {}).items() if v) or "none of interest"
    engines = env.get("matrix_engines")
    if engines is None and env.get("cpu_flags"):  # reports written before the field existed
        from compress.core.env import matrix_engines

        engines = matrix_engines(env["cpu_flags"])
    engines_line = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in (engines or {}).items()) or "unknown"
    libs = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items() if v)
    gpu = env.get("gpu_name") or "none (CUDA not available)"
    return "\n".join([
        f"- CPU: {env.get('cpu_model')} ({env.get('cpu_count')} logical CPUs); ISA: {flags}",
        f"- Matrix engines: {engines_line}",
        f"- GPU: {gpu}",
        f"- Threads: {env.get('threads')}",
        f"- OS: {env.get('os')}",
        f"- Libraries: {libs}",
    ])


def _details_lines(details: dict, prefix: str = "") -> list[str]:
    lines = []
    for k, v in details.items():
        if isinstance(v, dict):
            lines.append(f"{prefix}- {k}:")
            lines += _details_lines(v, prefix + "  ")
        else:
            lines.append(f"{prefix}- {k}: {_fmt(v, 4) if isinstance(v, float) else v}")
    return lines


def render_markdown(report: dict) -> str:
    parts = [f"# Report: {report['stage']}", "",
             "Generated by `compress` from the JSON beside this file; do not edit by hand.", ""]
    if report["records"]:
        parts += ["## Results", "", records_table(report["records"]), ""]
        if has_interval(report["records"]):
            parts += [CI_NOTE, ""]
        if has_validation(report["records"], primary_metric(report["records"])[0]):
            parts += [VALIDATION_NOTE, ""]
    if any(r.get("points") for r in report["records"]):
        parts += ["## Latency points", "", points_table(report["records"]), ""]
    if report.get("details"):
        parts += ["## Details", "", *_details_lines(report["details"]), ""]
    parts += ["## Environment", "", environment_lines(report.get("environment", {})), ""]
    return "\n".join(parts)


# --- comparison --------------------------------------------------------------------------

def build_comparison(reports: list[dict]) -> dict:
    """All records of all stage reports, one per artifact and target (later stages win)."""
    by_key: dict[tuple[str, str], dict] = {}
    stages = []
    env = {}
    for rep in reports:
        stages.append(rep["stage"])
        env = rep.get("environment") or env
        for r in rep["records"]:
            by_key[(r["artifact"], r["target"])] = Record.from_dict(r).to_dict()
    records = list(by_key.values())
    return {"schema_version": SCHEMA_VERSION, "stage": "comparison", "stages": stages,
            "summary": summarize(records), "records": records, "environment": env}


def speedups(records: list[dict], reference: list[dict]) -> dict:
    """p50 latency of the reference divided by each record's, per target and (batch, seq)
    point, for records measured in the same run as the reference (>1: faster)."""
    ref_points = {(r["target"], p["batch_size"], p["seq_len"]): p for r in reference if r["status"] == "ok"
                  for p in r["points"] if p["status"] == "ok"}
    out = {}
    for r in records:
        if r["status"] != "ok":
            continue
        for p in r["points"]:
            ref = ref_points.get((r["target"], p["batch_size"], p["seq_len"]))
            if ref and p["status"] == "ok":
                key = f"{r['artifact']}.{r['target']}.b{p['batch_size']}_s{p['seq_len']}"
                out[key] = round(ref["latency_ms_p50"] / p["latency_ms_p50"], 3)
    return out
