"""The benchmark stage on a tagging task (conll2003): its bert-base reference gets the
task's head, a token classifier with the task's tags, and the records it writes keep
latency only (the tagging accuracy figures of the warm-up rows are dropped too)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from compress.measure import benchmark as bench
from compress.measure.benchmark import REFERENCE_NAME, BenchmarkConfig, benchmark, build_reference
from compress.training.models import load_saved
from conftest import CONLL_TAGS as TAGS


def test_reference_has_the_head_of_its_kind(tmp_path):
    tagger = build_reference("random:tiny", tmp_path / "token", list(TAGS), kind="token")
    model, _ = load_saved(tagger.path)
    assert type(model).__name__ == "BertForTokenClassification" and model.config.num_labels == len(TAGS)
    assert tagger.name == REFERENCE_NAME
    # the default stays the sentence classifier the SST-2/MRPC benchmark has always built
    classifier = build_reference("random:tiny", tmp_path / "sequence", ["negative", "positive"])
    model, _ = load_saved(classifier.path)
    assert type(model).__name__ == "BertForSequenceClassification" and model.config.num_labels == 2


def test_benchmark_of_a_tagging_task_measures_a_token_reference(conll_prepared, monkeypatch):
    seen = []

    def measure_here(art, prepared_root, mcfg):
        # the reference's directory only lives during benchmark(): read its head now
        seen.append((art.name, json.loads((Path(art.path) / "config.json").read_text())))
        return bench_measure(art, prepared_root, replace(mcfg, isolate=False))  # no child process

    bench_measure = bench.measure
    monkeypatch.setattr(bench, "measure", measure_here)
    cfg = BenchmarkConfig(targets=["cpu"], seq_lens=[16, 128], batch_sizes=[1, 32], reference="random:tiny",
                          warmup_queries=0, min_queries=1, min_duration_s=0.0, max_duration_s=0.05,
                          dev_stream_repeats=0, threads=1)
    records, details = benchmark([], conll_prepared, cfg, list(TAGS))
    ((name, config),) = seen
    assert name == REFERENCE_NAME
    assert config["architectures"] == ["BertForTokenClassification"] and len(config["id2label"]) == len(TAGS)
    (rec,) = records
    assert rec["artifact"] == REFERENCE_NAME and rec["status"] == "ok", rec.get("reason")
    assert rec["task"] == "conll2003" and rec["latency_ms_p50"] > 0 and rec["throughput_seq_per_s"] > 0
    assert [(p["batch_size"], p["seq_len"]) for p in rec["points"]] == [(1, 16), (1, 128), (32, 128)]
    # accuracy belongs to the stage that built an artifact: none of the tagging figures of
    # the warm-up rows survives
    assert all(rec[k] is None for k in ("accuracy", "f1", "token_accuracy", "f1_per_type", "eval_rows"))
    assert details["reference"] == REFERENCE_NAME and f"speedup_vs_{REFERENCE_NAME}" in details
