"""End to end: `dvc repro` of the backbone in a temporary copy of the repository, with a
tiny params override (a slice of the real SST-2 data), then the DVC read-outs users run."""
from __future__ import annotations

import json
import time

import pytest
import yaml

from compress.backends.torchao import int8_unavailable
from conftest import SHARED_DATA
from e2e import BENCH_EXCLUDE, TINY_MEASURE, copy_repo, dvc, tiny_params

pytestmark = pytest.mark.slow


@pytest.mark.timeout(2400)  # every stage: 510 s alone on an AVX2-only 2-core EPYC, 1010 s when loaded
def test_full_pipeline_repro_offline(tmp_path):
    repo = copy_repo(tmp_path / "repo", tiny_params("sst2"))
    dvc(repo, "repro", timeout=2100)

    teacher = json.loads((repo / "reports/teacher.json").read_text())
    cpu = next(r for r in teacher["records"] if r["target"] == "cpu")
    gpu = next(r for r in teacher["records"] if r["target"] == "gpu")
    assert cpu["status"] == "ok" and 0 < cpu["accuracy"] <= 1 and cpu["eval_rows"] == 64
    assert cpu["latency_ms_p50"] > 0 and cpu["throughput_seq_per_s"] > 0 and cpu["peak_mem_mb"] > 0
    assert gpu["status"] in ("ok", "skipped") and (gpu["status"] == "ok" or gpu["reason"])
    assert teacher["details"]["training"]["steps"] == 8
    assert (repo / "models/teacher/model.safetensors").is_file()
    assert (repo / "reports/teacher.md").read_text().startswith("# Report: teacher")
    card = json.loads((repo / "data/prepared/card.json").read_text())
    assert card["splits"]["train"]["rows"] == 256
    distill = json.loads((repo / "reports/distill.json").read_text())
    assert {(r["artifact"], r["target"]) for r in distill["records"]} == {
        (a, t) for a in ("student", "student_control") for t in ("cpu", "gpu")} | {
        ("student_fp16", "gpu"), ("student_control_fp16", "gpu"),  # FP16 runs on the GPU only
        ("student_cudagraph", "gpu"), ("student_control_cudagraph", "gpu")}  # so do CUDA graphs
    assert distill["details"]["speedup_vs_teacher"]["student.cpu.b1_s128"] > 0
    assert distill["details"]["student"]["steps"] == distill["details"]["control"]["steps"] == 8
    prune = json.loads((repo / "reports/prune.json").read_text())
    assert prune["details"]["pruned"]["heads_removed"] == 12  # 34% of 3 layers x 12 heads
    assert sum(prune["details"]["pruned"]["heads_per_layer"]) == 24
    assert (repo / "reports/plots/prune/head_importance.png").stat().st_size > 1000
    # The deployable artifacts: three INT8 routes, ONNX FP32/INT8, TensorRT built or skipped.
    quantize = json.loads((repo / "reports/quantize.json").read_text())
    q = next(r for r in quantize["records"] if r["artifact"] == "student_int8_torch" and r["target"] == "cpu")
    assert q["precision"] == "int8" and q["format"] == "pytorch_int8"
    assert (repo / "models/student_int8_torch/quantization.json").is_file()  # built (and verified) on any CPU
    if int8_unavailable():  # measured only where the CPU has INT8 dot products (compress.backends.torchao)
        assert q["status"] == "skipped" and q["reason"] == int8_unavailable()
    else:
        assert q["status"] == "ok" and q["parent"] == "student" and 0 <= q["agreement_with_parent"] <= 1
        assert "student_int8_torch" in quantize["details"]["accuracy_retained_vs_parent"]
    inc = json.loads((repo / "reports/inc.json").read_text())
    assert len(inc["details"]["tuning"]["trials"]) >= 1
    export = json.loads((repo / "reports/export_onnx.json").read_text())
    for p in ("student", "student_pruned"):
        e = export["details"]["exports"][p]
        assert e["parity"]["max_abs_diff"] <= 1e-4 and e["attention_fused"] == "3/3 layers"
    onnx_int8 = json.loads((repo / "reports/onnx_int8.json").read_text())
    assert onnx_int8["details"]["speedup_vs_parent"]["student_onnx_int8.cpu.b1_s128"] > 0
    # BF16 beside INT8 in the quantize stage: measured where the CPU has native bf16, else skipped.
    from compress.core.env import bf16_unavailable

    bf16 = next(r for r in quantize["records"] if r["artifact"] == "student_bf16" and r["target"] == "cpu")
    assert bf16["status"] == ("skipped" if bf16_unavailable() else "ok") and bf16["precision"] == "bf16"
    ov = json.loads((repo / "reports/openvino.json").read_text())
    ov_cpu = {r["artifact"]: r for r in ov["records"] if r["target"] == "cpu"}
    assert {"student_ov", "student_ov_int8", "student_pruned_ov", "student_pruned_ov_int8"} <= set(ov_cpu)
    assert ov_cpu["student_ov"]["status"] == "ok" and ov_cpu["student_ov"]["parent"] == "student_onnx"
    assert ov_cpu["student_ov_int8"]["size_mb"] < ov_cpu["student_ov"]["size_mb"]
    assert all(r["status"] == "skipped" and "Intel GPUs" in r["reason"] for r in ov["records"] if r["target"] == "gpu")
    trt = json.loads((repo / "reports/tensorrt.json").read_text())
    assert all(r["status"] == "ok" or r["reason"] for r in trt["records"]) and len(trt["records"]) == 8
    comparison = json.loads((repo / "reports/comparison.json").read_text())
    artifacts = {r["artifact"] for r in comparison["records"]}
    assert artifacts >= {"teacher", "student", "student_control", "student_pruned", "student_int8_torch",
                         "student_pruned_int8_torch", "student_int8_inc", "student_onnx", "student_pruned_onnx",
                         "student_onnx_int8", "student_pruned_onnx_int8", "student_trt_fp16",
                         "student_ov", "student_ov_bf16", "student_ov_int8", "student_pruned_ov_int8", "student_bf16",
                         "student_trt_int8", "student_pruned_trt_fp16", "student_pruned_trt_int8"}

    # One run measured every artifact and the reference; the comparison divides its figures.
    bench = json.loads((repo / "reports/benchmark.json").read_text())
    ref = next(r for r in bench["records"] if r["artifact"] == "bert_base_reference" and r["target"] == "cpu")
    assert ref["status"] == "ok" and ref["accuracy"] is None and len(ref["points"]) == 3  # 1x16, 1x128, 32x128
    assert "student_control" not in {r["artifact"] for r in bench["records"]}  # params: exclude
    ov_bench = next(r for r in bench["records"] if r["artifact"] == "student_ov_int8" and r["target"] == "cpu")
    assert ov_bench["dev_stream_seq_per_s"] > 0  # real-length throughput over the dev split
    assert comparison["same_run_speedups"]["vs_teacher"]["student_onnx_int8"]["cpu"] > 0
    assert "student_control/cpu" in comparison["latency_from_stage"]  # not benchmarked: its stage's figure
    assert {x.split("/")[0] for x in comparison["latency_from_stage"]} <= set(BENCH_EXCLUDE)
    page = (repo / "reports/comparison.html").read_text()
    assert page.count("<svg") == 3 and "student_pruned_onnx_int8" in page
    # the majority-class yardstick on the targets measured, and artifacts found by path and manifest
    base = [r for r in comparison["records"] if r["artifact"] == "majority_baseline"]
    assert comparison["baselines"] == ["majority_baseline"] and [r["target"] for r in base] == ["cpu"]
    assert ov_bench["real_latency_ms_p50"] <= ov_bench["real_latency_ms_p99"]
    onnx_int8 = next(r for r in comparison["records"] if r["artifact"] == "student_onnx_int8" and r["target"] == "cpu")
    assert onnx_int8["path"] == "models/student_onnx_int8"
    assert json.loads((repo / onnx_int8["path"] / "manifest.json").read_text())["format"] == "onnx"
    seq_csv = (repo / "reports/plots/compare/latency_vs_seq_cpu.csv").read_text().splitlines()
    assert seq_csv[0].startswith("seq_len,bert_base_reference,teacher,") and len(seq_csv) == 3

    # The policy's choice (or a clear "nothing qualifies"), promoted with hashes.
    selection = json.loads((repo / "reports/selection.json").read_text())
    assert selection["reasons"] and len(selection["rejected"]) + len(selection["qualified"]) == selection["candidates"]
    if selection["chosen"]:
        assert json.loads((repo / "models/production/artifact.json").read_text())["artifact"] == selection["chosen"]

    # Nothing changed: the second run does nothing, fast.
    t = time.perf_counter()
    again = dvc(repo, "repro")
    assert time.perf_counter() - t < 10
    assert "Running stage" not in again.stdout

    metrics = dvc(repo, "metrics", "show", "--json").stdout
    shown = json.loads(metrics)[""]["data"]["reports/teacher.json"]["data"]
    assert shown["summary"]["teacher"]["cpu"]["accuracy"] == cpu["accuracy"]
    dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()

    # Each stage depends on its own params only: pruning params never rerun distillation,
    # measurement params rerun the measuring stages but never prepare or the logits cache.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["prune"]["head_fraction"] = 0.5
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(json.loads(dvc(repo, "status", "--json").stdout)) == {"prune"}
    params["onnx_int8"]["per_channel"] = not params["onnx_int8"]["per_channel"]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(json.loads(dvc(repo, "status", "--json").stdout)) == {"prune", "onnx_int8"}
    params["select"]["max_size_mb"] = 1000.0
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(json.loads(dvc(repo, "status", "--json").stdout)) == {"prune", "onnx_int8", "select"}
    params["benchmark"]["min_queries"] = 4
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(json.loads(dvc(repo, "status", "--json").stdout)) == {"prune", "onnx_int8", "select", "benchmark"}
    params["measure"]["min_queries"] = 4
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(json.loads(dvc(repo, "status", "--json").stdout)) == {
        "teacher", "distill", "prune", "quantize", "inc", "export_onnx", "onnx_int8", "openvino", "tensorrt",
        "select", "benchmark"}  # select, benchmark: their own params changed above


def test_mrpc_sentence_pairs_flow_through_distill_and_prune(tmp_path):
    repo = copy_repo(tmp_path / "repo", tiny_params("mrpc", train_rows=128))
    dvc(repo, "repro", "prune")
    for stage, artifact in (("teacher", "teacher"), ("distill", "student"), ("prune", "student_pruned")):
        report = json.loads((repo / f"reports/{stage}.json").read_text())
        rec = next(r for r in report["records"] if r["artifact"] == artifact and r["target"] == "cpu")
        assert rec["task"] == "mrpc" and rec["status"] == "ok"
        assert 0 <= rec["f1"] <= 1 and 0 <= rec["accuracy"] <= 1  # MRPC reports F1 too
    # the shrunk preset ran (1 epoch of 128 pairs at batch 32), not the full MRPC recipe
    assert json.loads((repo / "reports/teacher.json").read_text())["details"]["training"]["steps"] == 4
    meta = json.loads((repo / "data/teacher_logits/meta.json").read_text())
    assert meta["max_length"] == 128 and meta["augmentation"]["augmented_rows"] == 64
    assert meta["rows"] == 128 + 64  # gold pairs, then the augmented ones the teacher labelled


def test_bert_base_geometry_flows_through_prepare_and_teacher(tmp_path):
    repo = copy_repo(tmp_path / "repo", {
        "prepare": {"source": str(SHARED_DATA / "sst2"), "max_train_rows": 32, "max_dev_rows": 32},
        "teacher": {"model": "random:bert-base", "train": {"epochs": 1.0, "min_steps": 0, "batch_size": 16}},
        "measure": {**TINY_MEASURE, "min_queries": 2, "targets": ["cpu"]},
    })
    dvc(repo, "repro", "teacher")
    teacher = json.loads((repo / "reports/teacher.json").read_text())
    (cpu,) = teacher["records"]
    assert cpu["status"] == "ok" and cpu["num_params"] > 100_000_000  # 12x768: ~109M
    assert teacher["details"]["source"]["random_init"] is True
    assert cpu["latency_ms_p50"] > 0 and cpu["throughput_seq_per_s"] > 0
