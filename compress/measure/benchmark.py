"""Every artifact measured in one run: the figures that artifacts are compared by.

Each stage measures the artifacts it builds (beside their parents), but stages run minutes
or hours apart on a shared machine, so latency ratios across stages mix machine states.
`benchmark` measures all of them, plus a bert-base geometry FP32 reference (random
weights: latency and memory only), one after another in the same run, with the same
harness (`measure`, one child process per artifact and target), over

- a sequence-length sweep at batch 1 (`seq_lens`, 16 to 512 by default), and
- a batch sweep at seq 128 (`batch_sizes`),

which include the headline points (1x128 latency, 32x128 throughput), and real-length
throughput: the whole dev split classified as `compress predict` does it (length-sorted
batches of 32 padded to the longest row of each), `dev_stream_seq_per_s`, and real-length
latency: batch-1 queries over `real_length_rows` dev texts at their own lengths
(`real_latency_ms_p50`/`_p99`). Beside them, the majority-class baseline
(compress.measure.baseline). Accuracy, on dev or validation, is not
re-measured here (a few rows run only to warm the runner up); it belongs to the stage
that built each artifact, and `comparison` joins the two.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from compress.core.config import check
from compress.data.prepare import Prepared
from compress.measure.harness import TARGETS, MeasureConfig, measure
from compress.report.schema import (CI_FIELDS, HEADLINE_LATENCY, HEADLINE_THROUGHPUT, VALIDATION_FIELDS, Record,
                                    speedups)
from compress.backends.base import Artifact

REFERENCE_NAME = "bert_base_reference"
MAX_SEQ = 512  # BERT's position embeddings
# Accuracy is the building stage's (see above): whatever the warm-up rows scored is dropped,
# the tagging figures (entity F1 is `f1`) included.
ACCURACY_FIELDS = ("accuracy", "f1", "macro_f1", "metrics", *CI_FIELDS, "token_accuracy", "f1_per_type", "eval_rows",
                   "agreement_with_parent", *VALIDATION_FIELDS)


@dataclass(frozen=True)
class BenchmarkConfig:
    targets: list[str] = field(default_factory=lambda: ["cpu", "gpu"])
    seq_lens: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256, 512])  # at batch 1
    batch_sizes: list[int] = field(default_factory=lambda: [1, 4, 16, 32])  # at seq 128
    reference: str | None = "random:bert-base"  # a model spec measured as a reference row, or null
    exclude: list[str] = field(default_factory=lambda: ["student_control"])  # artifacts not benchmarked (their stage figures stay)
    warmup_queries: int = 2
    min_queries: int = 15
    min_duration_s: float = 1.0
    max_duration_s: float = 8.0
    dev_stream_repeats: int = 3  # timed passes over the whole dev split (median); 0: no real-length figure
    real_length_rows: int = 256  # batch-1 queries over dev rows at their own lengths (p50, p99); 0: none
    threads: int = 2

    def __post_init__(self):
        check(self.dev_stream_repeats >= 0, f"dev_stream_repeats must be >= 0, got {self.dev_stream_repeats}")
        check(self.real_length_rows >= 0, f"real_length_rows must be >= 0, got {self.real_length_rows}")
        check(len(self.targets) > 0 and all(t in TARGETS for t in self.targets),
              f"targets must be a non-empty list of {', '.join(TARGETS)}, got {self.targets}")
        check(all(2 <= s <= MAX_SEQ for s in self.seq_lens),
              f"seq_lens must lie in [2, {MAX_SEQ}] (BERT has {MAX_SEQ} positions), got {self.seq_lens}")
        check(all(b >= 1 for b in self.batch_sizes), f"batch_sizes must be >= 1, got {self.batch_sizes}")
        check(HEADLINE_LATENCY[1] in self.seq_lens,
              f"seq_lens must include {HEADLINE_LATENCY[1]}: the 1x128 headline latency is compared across artifacts")
        check(HEADLINE_THROUGHPUT[0] in self.batch_sizes,
              f"batch_sizes must include {HEADLINE_THROUGHPUT[0]}: the 32x128 headline throughput")
        check(self.reference is None or bool(self.reference.strip()), "reference must be a model spec or null")
        check(self.warmup_queries >= 0, f"warmup_queries must be >= 0, got {self.warmup_queries}")
        check(self.min_queries >= 1, f"min_queries must be >= 1, got {self.min_queries}")
        check(0 <= self.min_duration_s <= self.max_duration_s,
              f"need 0 <= min_duration_s <= max_duration_s, got {self.min_duration_s}, {self.max_duration_s}")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")

    def points(self) -> list[list[int]]:
        """(batch, seq) points: the seq sweep at batch 1, then the batch sweep at seq 128."""
        pts = [[1, s] for s in sorted(set(self.seq_lens))]
        pts += [[b, HEADLINE_LATENCY[1]] for b in sorted(set(self.batch_sizes)) if b != 1]
        return pts

    def measure_config(self) -> MeasureConfig:
        return MeasureConfig(targets=list(self.targets), points=self.points(), eval_max_rows=32,
                             eval_batch_size=32, warmup_queries=self.warmup_queries,
                             min_queries=self.min_queries, min_duration_s=self.min_duration_s,
                             max_duration_s=self.max_duration_s, threads=self.threads, gpu_fp16=False, gpu_cudagraph=[],
                             dev_stream_repeats=self.dev_stream_repeats, real_length_rows=self.real_length_rows,
                             validation=False)  # accuracy is the building stage's, on either split


def artifacts_from_reports(reports: list[dict], exclude: list[str] = ()) -> list[tuple]:
    """(Artifact, {target: stage record}) for every artifact the stage reports hold, in
    pipeline order. The record says whether the stage could run it on that target, and
    where its files are (`path`); an artifact no stage could run anywhere is never loaded.
    Refused: a measured record without a path (a report from before paths were recorded)."""
    found: dict[str, list] = {}
    for rep in reports:
        for r in rep["records"]:
            if r["artifact"] in exclude:
                continue
            entry = found.setdefault(r["artifact"], [None, {}, r])
            entry[1][r["target"]] = r
            if r.get("path") and entry[0] is None:
                entry[0] = Path(r["path"])
            if r["status"] == "ok" and not r.get("path"):
                raise ValueError(f"reports/{rep.get('stage')}.json: {r['artifact']}/{r['target']} records no path; "
                                 "rerun that stage (`dvc repro`) so its records say where the artifact is")
    out = []
    for name, (path, records, first) in found.items():
        # no path: no stage built it (an engine without TensorRT); it is never loaded
        art = Artifact(name, path or Path(name), first.get("format") or "pytorch",
                       first.get("precision") or "fp32", first.get("parent"))
        out.append((art, records))
    return out


def _latency_only(record: dict) -> dict:
    return Record.from_dict({**record, **{k: None for k in ACCURACY_FIELDS}}).to_dict()


def build_reference(spec: str, out_dir: Path, label_names: list[str], seed: int = 0,
                    kind: str = "sequence") -> Artifact:
    """Save the reference model (random weights for a `random:` spec) to out_dir, with the
    task's head (`kind`: a classifier for sentence tasks, a tagger for token tasks), so it
    runs on the same inputs and computes the same output as the artifacts."""
    from compress.training.models import load_classifier, save_classifier

    model, tokenizer, _ = load_classifier(spec, len(label_names), seed=seed, kind=kind)
    save_classifier(model, tokenizer, out_dir, label_names)
    return Artifact(REFERENCE_NAME, out_dir)


def benchmark(entries: list[tuple], prepared_root: str | Path, cfg: BenchmarkConfig,
              label_names: list[str], progress=None) -> tuple[list[dict], dict]:
    """Measure every (Artifact, stage records) entry and the reference in one run.

    A target the artifact's stage could not run (skipped, failed) is copied as that
    stage's record, not retried. Returns (records, details) where details holds the
    points, the reference name and the p50 speedups vs the teacher and vs the reference
    for every point measured.
    """
    mcfg = cfg.measure_config()
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="compress-reference-") as tmp:
        todo = list(entries)
        if cfg.reference:
            # the head of the task measured: a tagging task's reference is a token classifier
            kind = Prepared.open(prepared_root).task.head
            ref = build_reference(cfg.reference, Path(tmp) / REFERENCE_NAME, label_names, kind=kind)
            todo.append((ref, {}))
        for art, stage_records in todo:
            if progress is not None:
                progress(art.name)
            for target in cfg.targets:
                stage = stage_records.get(target)
                if stage is not None and stage["status"] != "ok":
                    records.append(Record.from_dict({**stage, "points": []}).to_dict())
                    continue
                if stage is None and art.name != REFERENCE_NAME:
                    records.append(Record.skipped(art.name, target, "no stage measured it on this target",
                                                  art.format, art.precision).to_dict())
                    continue
                (rec,) = measure(art, prepared_root, replace(mcfg, targets=[target]))
                records.append(_latency_only(rec if art.name != REFERENCE_NAME else {**rec, "path": None}))
    # the yardstick, on every target that has rows: scored on the teacher's tokenization (the
    # first entry); nothing runs
    measured = [t for t in cfg.targets if any(r["target"] == t and r["status"] == "ok" for r in records)]
    if entries and measured:
        from compress.data.tokenizer import load_fast_tokenizer
        from compress.measure.baseline import BASELINE_NAME, baseline_records

        records += baseline_records(prepared_root, load_fast_tokenizer(entries[0][0].path), measured)
    details = {"points": mcfg.points, "reference": cfg.reference and REFERENCE_NAME,
               "reference_spec": cfg.reference, "baseline": BASELINE_NAME if entries and measured else None}
    for ref_name in ("teacher", REFERENCE_NAME):
        ref_records = [r for r in records if r["artifact"] == ref_name]
        if ref_records:
            details[f"speedup_vs_{ref_name}"] = speedups(records, ref_records)
    return records, details
