"""The measurement harness: complete records, honest skips, sane timing statistics."""
import dataclasses

import numpy as np
import pytest

from compress.core.config import ConfigError, build
from compress.measure.harness import (MeasureConfig, gpu_skip_reason, latency_point, measure, measure_with_reference,
                             time_queries)
from compress.report.schema import LatencyPoint, Record
from compress.backends.base import Artifact, skip_reason
from conftest import add_validation, drop_validation

FAST = dict(points=[[1, 16], [4, 16]], warmup_queries=1, min_queries=3, min_duration_s=0.0)


def test_cpu_record_has_every_field(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["cpu"], isolate=False, **FAST)
    (rec,) = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert rec["status"] == "ok" and rec["reason"] is None
    unset = {k for k, v in rec.items() if v is None}
    # Left empty: GPU memory, F1 and the tagging fields (SST-2 has none), the stage (make_report fills it) and the
    # headline figures, which are defined at (1,128) and (32,128), points not measured here.
    # No parent given, so no agreement either.
    assert unset == {"reason", "peak_gpu_mem_mb", "f1", "f1_ci95_low", "f1_ci95_high", "token_accuracy",
                     "f1_per_type", "stage",
                     "latency_ms_p50", "latency_ms_p90",
                     "latency_ms_p99", "throughput_seq_per_s", "parent", "agreement_with_parent",
                     "dev_stream_seq_per_s",  # the benchmark stage asks for these (dev_stream_repeats,
                     "real_latency_ms_p50", "real_latency_ms_p99"}  # real_length_rows)
    assert 0.0 <= rec["accuracy"] <= 1.0 and rec["eval_rows"] == 8
    # the validation split (six rows here) is scored beside dev: what select chooses on
    assert rec["validation_rows"] == 6 and len(rec["validation_sha256"]) == 64
    assert set(rec["validation_metrics"]) == {"accuracy", "macro_f1", "accuracy_ci95_low", "accuracy_ci95_high",
                                              "macro_f1_ci95_low", "macro_f1_ci95_high"}
    assert 0.0 <= rec["accuracy_ci95_low"] <= rec["accuracy"] <= rec["accuracy_ci95_high"] <= 1.0
    assert rec["threads"] == 2 and rec["num_params"] > 1_000_000 and rec["size_mb"] > 1
    assert len(rec["artifact_sha256"]) == 64 and len(rec["data_sha256"]) == 64
    assert rec["peak_mem_mb"] >= rec["baseline_mem_mb"] > 0
    shapes = [(p["batch_size"], p["seq_len"]) for p in rec["points"]]
    assert shapes == [(1, 16), (4, 16)]
    for p in rec["points"]:
        point_fields = {f.name for f in dataclasses.fields(LatencyPoint)}
        assert set(p) == point_fields and p["queries"] >= 3 and p["status"] == "ok"
        assert p["latency_ms_p50"] <= p["latency_ms_p90"] <= p["latency_ms_p99"]
    Record.from_dict(rec)  # the record fits the schema


def test_isolated_measurement_matches_in_process_accuracy(tiny_model_dir, prepared_sst2):
    art = Artifact("tiny", tiny_model_dir)
    cfg = MeasureConfig(targets=["cpu"], **{**FAST, "points": [[1, 128], [2, 128]]})
    (child,) = measure(art, prepared_sst2, cfg)
    (local,) = measure(art, prepared_sst2, dataclasses.replace(cfg, isolate=False))
    assert child["accuracy"] == local["accuracy"]
    # the bootstrap seed is fixed: the same predictions give the same interval in any process
    assert (child["accuracy_ci95_low"], child["accuracy_ci95_high"]) == (local["accuracy_ci95_low"],
                                                                       local["accuracy_ci95_high"])
    assert child["validation_metrics"] == local["validation_metrics"] is not None  # the child scores validation too
    assert child["latency_ms_p50"] is not None and child["throughput_seq_per_s"] is None
    assert child["peak_mem_mb"] > 100  # a fresh python with torch loaded


def test_child_peak_memory_excludes_the_parents(tiny_model_dir, prepared_sst2):
    """A stage that trained first must not pass its footprint on to the measurement."""
    ballast = np.ones(160 * 2**20 // 8 * 8, dtype=np.float64)  # 1.25 GiB, resident (written)
    cfg = MeasureConfig(targets=["cpu"], **{**FAST, "points": [[1, 16]]})
    (child,) = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert ballast.sum() > 0
    assert child["peak_mem_mb"] < 1000, child["peak_mem_mb"]


@pytest.mark.skipif(gpu_skip_reason() is None, reason="a CUDA device is present: the skip path does not apply")
def test_gpu_target_is_skipped_with_reason_without_cuda(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["cpu", "gpu"], isolate=False, **FAST)
    cpu, gpu = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert cpu["status"] == "ok"
    assert gpu["status"] == "skipped" and ("CUDA" in gpu["reason"])
    assert gpu["accuracy"] is None and gpu["points"] == []


@pytest.mark.skipif(gpu_skip_reason() is not None, reason=f"no usable GPU: {gpu_skip_reason()}")
def test_gpu_target_is_measured_with_cuda(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["gpu"], isolate=False, **FAST)
    (gpu,) = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert gpu["status"] == "ok" and gpu["peak_gpu_mem_mb"] > 0


def test_time_queries_honours_minimum_count_and_duration():
    calls = []
    times = time_queries(lambda b: calls.append(b), "x", warmup=2, min_queries=5, min_s=0.05, max_s=5.0)
    assert len(times) >= 5 and times.sum() >= 0 and len(calls) == len(times) + 2
    # the minimum duration is respected even when the count is reached early
    import time
    t = time.perf_counter()
    time_queries(lambda b: None, "x", warmup=0, min_queries=1, min_s=0.2, max_s=5.0)
    assert time.perf_counter() - t >= 0.2


def test_latency_point_statistics():
    times = np.array([0.010] * 98 + [0.020, 0.100])
    p = latency_point(times, batch=4, seq=128)
    assert p.latency_ms_p50 == pytest.approx(10.0)
    assert p.latency_ms_p99 > 19.0
    assert p.throughput_seq_per_s == pytest.approx(4 * 100 / times.sum(), rel=1e-3)


def test_agreement_and_same_run_speedups(tiny_model_dir, prepared_sst2, tmp_path):
    """A derived artifact is compared with its parent measured in the same call: agreement
    of dev predictions, and the p50 ratio per point."""
    from compress.training.models import save_classifier
    from tests.conftest import tiny_model

    other, tok = tiny_model(seed=1)  # different weights: predictions may differ
    save_classifier(other, tok, tmp_path / "other", ["negative", "positive"])
    cfg = MeasureConfig(targets=["cpu"], isolate=False, gpu_fp16=False, **FAST)
    records, details = measure_with_reference(
        [Artifact("same", tiny_model_dir, parent="ref"), Artifact("other", tmp_path / "other", parent="ref")],
        [Artifact("ref", tiny_model_dir)], prepared_sst2, cfg)
    same, other_rec = records
    assert same["agreement_with_parent"] == 1.0 and same["parent"] == "ref"
    assert 0.0 <= other_rec["agreement_with_parent"] <= 1.0
    assert [r["artifact"] for r in details["same_run_reference"]] == ["ref"]
    assert set(details["speedup_vs_ref"]) == {"same.cpu.b1_s16", "same.cpu.b4_s16",
                                              "other.cpu.b1_s16", "other.cpu.b4_s16"}
    assert details["speedup_vs_parent"] == details["speedup_vs_ref"]
    assert all(v > 0 for v in details["speedup_vs_ref"].values())


def test_parent_predictions_must_cover_the_same_rows(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["cpu"], isolate=False, **FAST)
    with pytest.raises(ValueError, match="parent predictions cover 3 rows"):
        measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg, parent_predictions=[0, 1, 0])


def test_formats_that_cannot_run_on_a_target_are_skipped_with_reason(tmp_path, monkeypatch):
    assert "CPU only" in skip_reason(Artifact("q", tmp_path, "pytorch_int8", "int8"), "gpu")
    assert "NVIDIA GPUs only" in skip_reason(Artifact("e", tmp_path, "tensorrt", "fp16"), "cpu")
    assert "GPU only" in skip_reason(Artifact("h", tmp_path, "pytorch", "fp16"), "cpu")
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,avx512f,avx512_vnni")  # torchao INT8 needs INT8 dot products
    assert skip_reason(Artifact("q", tmp_path, "pytorch_int8", "int8"), "cpu") is None
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2")
    assert "no INT8 dot-product" in skip_reason(Artifact("q", tmp_path, "pytorch_int8", "int8"), "cpu")
    assert skip_reason(Artifact("o", tmp_path, "onnx", "fp32"), "cpu") is None
    with pytest.raises(ValueError, match="unknown format"):
        Artifact("x", tmp_path, "tflite")


@pytest.mark.skipif(gpu_skip_reason() is not None, reason=f"no usable GPU: {gpu_skip_reason()}")
def test_gpu_fp16_variant_is_measured_beside_fp32(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["cpu", "gpu"], isolate=False, **FAST)
    records, _ = measure_with_reference([Artifact("tiny", tiny_model_dir)], [], prepared_sst2, cfg)
    half = [r for r in records if r["artifact"] == "tiny_fp16"]
    assert len(half) == 1 and half[0]["target"] == "gpu" and half[0]["precision"] == "fp16"
    assert half[0]["status"] == "ok" and half[0]["agreement_with_parent"] >= 0.9


def test_cudagraph_rows_beside_each_float_pytorch_artifact(tiny_model_dir, prepared_sst2):
    """Every PyTorch FP32 artifact gets `<name>_cudagraph` (FP16) and, when asked,
    `<name>_cudagraph_fp32` on the gpu target, parented to the eager artifact; without CUDA
    they are skipped with the reason, like every GPU row (issue 15)."""
    cfg = MeasureConfig(targets=["cpu", "gpu"], isolate=False, gpu_cudagraph=["fp16", "fp32"], **FAST)
    records, _ = measure_with_reference([Artifact("tiny", tiny_model_dir)], [], prepared_sst2, cfg)
    graphs = {r["artifact"]: r for r in records if r["format"] == "pytorch_cudagraph"}
    assert set(graphs) == {"tiny_cudagraph", "tiny_cudagraph_fp32"}
    assert {r["precision"] for r in graphs.values()} == {"fp16", "fp32"}
    assert all(r["target"] == "gpu" for r in graphs.values())
    if gpu_skip_reason() is None:
        assert all(r["status"] == "ok" and r["agreement_with_parent"] >= 0.9 for r in graphs.values())
    else:
        assert all(r["status"] == "skipped" and "CUDA" in r["reason"] for r in graphs.values())
    none = MeasureConfig(targets=["cpu", "gpu"], isolate=False, gpu_cudagraph=[], gpu_fp16=False, **FAST)
    records, _ = measure_with_reference([Artifact("tiny", tiny_model_dir)], [], prepared_sst2, none)
    assert [r["artifact"] for r in records] == ["tiny", "tiny"]
    with pytest.raises(ConfigError, match="gpu_cudagraph"):
        build(MeasureConfig, {"gpu_cudagraph": ["int8"]}, "measure")


def test_a_child_that_dies_without_reporting_is_an_error_not_a_hang(tiny_model_dir, prepared_sst2, monkeypatch):
    import compress.measure.harness as m

    monkeypatch.setattr(m, "_child", _die)
    cfg = MeasureConfig(targets=["cpu"], **FAST)
    with pytest.raises(RuntimeError, match="exited with code 3 before reporting"):
        m._measure_isolated(Artifact("tiny", tiny_model_dir), prepared_sst2, "cpu", cfg)


def _die(args, queue, plugins=()):
    import os

    os._exit(3)


# --- issue 11: per-point GPU memory, real-length throughput, BF16 on the CPU ---------------

class FakeGpuMemory:
    """Stands in for torch's CUDA allocator: the fake runner 'allocates' by raising the peak."""

    def __init__(self):
        self.peak = 0.0
        self.resets = 0

    def reset(self):
        self.peak = 0.0
        self.resets += 1

    def peak_mb(self):
        return self.peak

    def release(self):
        pass


class FakeGpuRunner:
    """Batch 32 'needs' 99,000 MiB and runs out of memory after allocating it."""

    def __init__(self, memory):
        self.memory = memory

    def __call__(self, batch):
        b, s = batch
        need = 99_000.0 if b >= 32 else 10.0 * b * s / 128
        self.memory.peak = max(self.memory.peak, need)
        if b >= 32:
            raise RuntimeError("CUDA out of memory. Tried to allocate 96.00 GiB")
        return None

    def synchronize(self):
        pass


def test_gpu_peak_memory_is_per_point_and_leaves_out_points_that_did_not_fit():
    from compress.measure.harness import latency_points, record_gpu_peak

    mem = FakeGpuMemory()
    cfg = MeasureConfig(targets=["gpu"], points=[[1, 128], [32, 128], [4, 128]], warmup_queries=0,
                        min_queries=2, min_duration_s=0.0)
    points = latency_points(FakeGpuRunner(mem), lambda b, s: (b, s), cfg, "gpu", gpu_memory=mem)
    assert [p.status for p in points] == ["ok", "does_not_fit", "ok"]
    assert mem.resets == 3  # reset before every point
    assert points[0].peak_gpu_mem_mb == 10.0 and points[2].peak_gpu_mem_mb == 40.0
    assert points[1].peak_gpu_mem_mb is None and "out of memory" in points[1].reason
    # the record's figure: the accuracy pass and the points that ran, never the failed one
    assert record_gpu_peak(25.0, points) == 40.0
    assert record_gpu_peak(None, [points[1]]) is None


def test_cpu_oom_text_is_still_an_error():
    from compress.measure.harness import latency_points

    mem = FakeGpuMemory()
    cfg = MeasureConfig(targets=["cpu"], points=[[32, 128]], warmup_queries=0, min_queries=1, min_duration_s=0.0)
    with pytest.raises(RuntimeError, match="out of memory"):
        latency_points(FakeGpuRunner(mem), lambda b, s: (b, s), cfg, "cpu")


def test_dev_stream_throughput_classifies_the_whole_dev_split(tiny_model_dir, prepared_sst2, monkeypatch):
    """Real-length throughput goes through compress predict's own loop over every dev row."""
    import compress.predict as predict
    import compress.stream as stream

    assert predict.predict_stream is stream.predict_stream  # the loop `compress predict` runs
    seen = []
    real = stream.predict_stream

    def counting(loaded, examples, batch_size=32, max_length=128, *a, **k):
        seen.append((len(examples), batch_size, max_length))
        return real(loaded, examples, batch_size, max_length, *a, **k)

    monkeypatch.setattr(stream, "predict_stream", counting)
    cfg = MeasureConfig(targets=["cpu"], isolate=False, dev_stream_repeats=2, eval_max_rows=2, **FAST)
    (rec,) = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert rec["dev_stream_seq_per_s"] > 0 and rec["eval_rows"] == 2
    assert seen == [(8, 32, 128)] * 3  # one warm-up + 2 timed passes, all 8 dev rows (not eval_max_rows)
    with pytest.raises(Exception, match="dev_stream_repeats"):
        MeasureConfig(dev_stream_repeats=-1)


def test_bf16_is_skipped_with_reason_on_a_cpu_without_native_bf16(tmp_path, monkeypatch):
    from compress.core.env import bf16_unavailable, matrix_engines

    old_cpu = {"avx2": True, "avx512f": True, "avx512_vnni": True}
    assert "no native bf16" in bf16_unavailable(old_cpu)
    assert bf16_unavailable({"amx_bf16": True}) is None and bf16_unavailable({"avx512_bf16": True}) is None
    assert matrix_engines(old_cpu) == {"AMX-BF16": False, "AMX-INT8": False, "AVX512-BF16": False,
                                       "AVX512-VNNI": True, "AVX-VNNI": False}
    # the whole run acts as that CPU: the record says skipped, with the reason
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx2,avx512f,avx512_vnni")
    reason = skip_reason(Artifact("s_bf16", tmp_path, "pytorch", "bf16"), "cpu")
    assert reason and "no native bf16" in reason
    assert "GPU rows use FP16" in skip_reason(Artifact("s_bf16", tmp_path, "pytorch", "bf16"), "gpu")
    cfg = MeasureConfig(targets=["cpu"], isolate=False, **FAST)
    (rec,) = measure(Artifact("s_bf16", tmp_path, "pytorch", "bf16"), tmp_path, cfg)
    assert rec["status"] == "skipped" and "no native bf16" in rec["reason"]
    monkeypatch.setenv("COMPRESS_CPU_FLAGS", "avx512_bf16")
    assert skip_reason(Artifact("s_bf16", tmp_path, "pytorch", "bf16"), "cpu") is None


@pytest.mark.skipif(__import__("compress.core.env", fromlist=["x"]).bf16_unavailable() is not None,
                    reason="this CPU has no native bf16")
def test_bf16_variant_is_measured_beside_its_parent(tiny_model_dir, prepared_sst2):
    cfg = MeasureConfig(targets=["cpu"], isolate=False, gpu_fp16=False, **FAST)
    records, _ = measure_with_reference([Artifact("tiny_bf16", tiny_model_dir, "pytorch", "bf16", parent="tiny")],
                                        [Artifact("tiny", tiny_model_dir)], prepared_sst2, cfg)
    (rec,) = records
    assert rec["status"] == "ok" and rec["precision"] == "bf16" and rec["agreement_with_parent"] >= 0.75
    assert rec["path"] == str(tiny_model_dir)  # the same files as its parent, found by path, not by name


# --- bootstrap confidence intervals of the dev metrics ---------------------------------------

def test_bootstrap_interval_of_certain_and_two_row_cases():
    """All correct: every resample scores 1, so does the interval. One right, one wrong: a
    resample of 2 rows scores 0, 1/2 or 1 with chance 1/4, 1/2, 1/4, so the 2.5th and
    97.5th percentiles are 0 and 1."""
    from compress.measure.metrics import bootstrap_ci

    labels = np.array([0, 1] * 50)
    assert bootstrap_ci(labels, labels, "accuracy") == (1.0, 1.0)
    assert bootstrap_ci(labels, labels, "f1") == (1.0, 1.0)  # 50 positives: no resample lacks one
    assert bootstrap_ci([1, 0], [1, 1], "accuracy") == (0.0, 1.0)
    assert bootstrap_ci([0, 0, 0], [1, 1, 1], "f1") == (0.0, 0.0)  # no true positive: F1 0, as in the metric


def test_bootstrap_interval_matches_a_direct_computation_with_the_same_rng():
    from compress.measure.metrics import bootstrap_ci, classification_metrics

    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 300)
    pred = np.where(rng.random(300) < 0.8, labels, 1 - labels)
    for metric in ("accuracy", "f1"):
        direct = np.random.default_rng(3)
        values = []
        for _ in range(500):  # resample b: the b-th draw of the generator, one row index at a time
            idx = direct.integers(0, 300, size=300)
            values.append(classification_metrics(np.eye(2)[pred[idx]], labels[idx], (metric,))[metric])
        want = np.percentile(values, [2.5, 97.5])
        got = bootstrap_ci(pred, labels, metric, n_resamples=500, seed=3)
        assert got == pytest.approx(tuple(want), abs=1e-6)  # classification_metrics rounds to 6 digits


def test_bootstrap_interval_width_and_determinism():
    """50% accuracy on 400 rows: standard error sqrt(.25/400) = 2.5 points, so the 95%
    interval is about 50 +- 4.9 points. Same seed, same interval; another seed differs a bit."""
    from compress.measure.metrics import bootstrap_ci, ci95_fields

    labels = np.array([0, 1] * 200)
    pred = np.array([0, 1, 1, 0] * 100)  # every other pair wrong: 50% correct
    low, high = bootstrap_ci(pred, labels, "accuracy")
    assert low == pytest.approx(0.451, abs=0.01) and high == pytest.approx(0.549, abs=0.01)
    assert bootstrap_ci(pred, labels, "accuracy") == (low, high)
    # accuracy on 400 rows lies on a 1/400 grid, so compare seeds on F1, whose values do not
    assert bootstrap_ci(pred, labels, "f1", seed=1) != bootstrap_ci(pred, labels, "f1", seed=0)
    narrow = bootstrap_ci(pred, labels, "accuracy", level=0.5)
    assert low < narrow[0] < narrow[1] < high
    fields = ci95_fields(pred, labels, ("accuracy", "f1"))
    assert set(fields) == {"accuracy_ci95_low", "accuracy_ci95_high", "f1_ci95_low", "f1_ci95_high"}
    assert fields["accuracy_ci95_low"] == round(low, 6)
    with pytest.raises(ValueError, match="unknown metric 'mcc'"):
        bootstrap_ci(pred, labels, "mcc")
    with pytest.raises(ValueError, match="no rows"):
        bootstrap_ci([], [], "accuracy")
    with pytest.raises(ValueError, match="one length"):
        bootstrap_ci([0, 1], [0], "accuracy")


def test_bootstrap_memory_chunks_draw_the_same_resamples(monkeypatch):
    """Resamples are drawn in chunks to bound memory on big splits; the chunking must not
    change the interval."""
    import compress.measure.metrics as metrics

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    pred = np.where(rng.random(500) < 0.7, labels, 1 - labels)
    whole = metrics.bootstrap_ci(pred, labels, "f1", n_resamples=300)
    monkeypatch.setattr(metrics, "_CHUNK_INDICES", 500 * 7)  # 7 resamples per chunk
    assert metrics.bootstrap_ci(pred, labels, "f1", n_resamples=300) == whole


def test_real_length_latency_runs_each_dev_text_unpadded_at_batch_1(tiny_model_dir, prepared_sst2):
    """real_length_rows: one untimed pass, then one timed batch-1 query per dev row at its
    own length (no padding); the record carries p50 <= p99 beside the padded points."""
    from compress.data.prepare import Prepared
    from compress.data.tokens import encode
    from compress.measure.harness import real_length_latency
    from compress.training.models import load_tokenizer

    shapes = []

    class Recording:
        def __call__(self, batch):
            shapes.append(batch["input_ids"].shape)
            assert batch["attention_mask"].all()  # nothing padded
            return np.zeros((1, 2), dtype=np.float32)

        def synchronize(self):
            pass

    enc = encode(load_tokenizer(tiny_model_dir), Prepared.open(prepared_sst2).split("dev"), 128)
    p50, p99 = real_length_latency(Recording(), enc, rows=5)
    assert shapes == [(1, n) for n in enc.lengths()[:5]] * 2 and 0 <= p50 <= p99
    cfg = MeasureConfig(targets=["cpu"], isolate=False, gpu_fp16=False, real_length_rows=6, **FAST)
    (rec,) = measure(Artifact("tiny", tiny_model_dir), prepared_sst2, cfg)
    assert 0 < rec["real_latency_ms_p50"] <= rec["real_latency_ms_p99"]
    assert [(p["batch_size"], p["seq_len"]) for p in rec["points"]] == [(1, 16), (4, 16)]  # the padded points stay


def test_validation_figures_come_from_the_same_runner_and_pre_processing(tiny_model_dir, prepared_sst2):
    """A validation split holding exactly dev's rows scores exactly dev's metrics and
    intervals; eval_max_rows caps both splits; data prepared before the split existed gives
    a record without validation figures (None), not an error."""
    art = Artifact("tiny", tiny_model_dir)
    cfg = MeasureConfig(targets=["cpu"], isolate=False, **{**FAST, "points": [[1, 16]]})
    add_validation(drop_validation(prepared_sst2))  # validation := all of dev
    (rec,) = measure(art, prepared_sst2, cfg)
    dev = {k: rec[k] for k in ("accuracy", "macro_f1", "accuracy_ci95_low", "accuracy_ci95_high",
                               "macro_f1_ci95_low", "macro_f1_ci95_high")}
    assert rec["validation_metrics"] == dev and rec["validation_rows"] == rec["eval_rows"] == 8
    (capped,) = measure(art, prepared_sst2, dataclasses.replace(cfg, eval_max_rows=3))
    assert capped["validation_rows"] == capped["eval_rows"] == 3
    (off,) = measure(art, prepared_sst2, dataclasses.replace(cfg, validation=False))
    assert off["validation_metrics"] is None and off["accuracy"] == rec["accuracy"]
    (old,) = measure(art, drop_validation(prepared_sst2), cfg)
    assert old["status"] == "ok" and old["accuracy"] == rec["accuracy"]
    assert (old["validation_metrics"], old["validation_rows"], old["validation_sha256"]) == (None, None, None)
    Record.from_dict(old)
