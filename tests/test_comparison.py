"""The comparison (stage reports joined with the one-run benchmark) and its renderings:
Markdown, the self-contained HTML page, the CSVs behind dvc.yaml's plots, the README
block; all from the fixture reports in tests/fixtures/reports."""
import csv
import json
import re
import shutil

import pytest

from compress.report import comparison as C
from compress.measure.benchmark import BenchmarkConfig
from compress.cli import main
from compress.core.config import ConfigError, build
from compress.report.html import render_html
from compress.report.schema import read_report
from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "reports"
STAGES = ["teacher", "distill", "onnx_int8", "tensorrt"]


@pytest.fixture()
def comp():
    return C.build([read_report(FIXTURES / f"{s}.json") for s in STAGES], read_report(FIXTURES / "benchmark.json"))


def test_latency_comes_from_the_one_run_accuracy_from_the_stage(comp):
    stage = {r["artifact"]: r for r in read_report(FIXTURES / "onnx_int8.json")["records"] if r["target"] == "cpu"}
    bench = {r["artifact"]: r for r in read_report(FIXTURES / "benchmark.json")["records"] if r["target"] == "cpu"}
    row = next(r for r in comp["records"] if r["artifact"] == "student_onnx_int8" and r["target"] == "cpu")
    assert row["accuracy"] == stage["student_onnx_int8"]["accuracy"]  # the benchmark has no accuracy
    assert row["latency_ms_p50"] == bench["student_onnx_int8"]["latency_ms_p50"] != stage["student_onnx_int8"][
        "latency_ms_p50"]
    assert row["points"] == bench["student_onnx_int8"]["points"] and row["stage"] == "onnx_int8"
    assert comp["stages"][-1] == "benchmark" and comp["references"] == ["bert_base_reference"]
    ref = next(r for r in comp["records"] if r["artifact"] == "bert_base_reference" and r["target"] == "cpu")
    assert ref["accuracy"] is None and ref["num_params"] > 100_000_000
    assert comp["latency_from_stage"] == []


def test_same_run_speedups_divide_the_benchmark_p50s(comp):
    bench = {r["artifact"]: r["latency_ms_p50"] for r in read_report(FIXTURES / "benchmark.json")["records"]
             if r["target"] == "cpu" and r["status"] == "ok"}
    s = comp["same_run_speedups"]
    assert s["vs_teacher"]["student_pruned_onnx_int8"]["cpu"] == round(
        bench["teacher"] / bench["student_pruned_onnx_int8"], 3)
    assert s["vs_bert_base_reference"]["student_pruned_onnx_int8"]["cpu"] == round(
        bench["bert_base_reference"] / bench["student_pruned_onnx_int8"], 3)
    assert "gpu" not in s["vs_teacher"]["teacher"]  # skipped there


def test_without_a_benchmark_rows_say_their_latency_is_from_the_stage():
    comp = C.build([read_report(FIXTURES / f"{s}.json") for s in STAGES], None)
    assert "student/cpu" in comp["latency_from_stage"] and comp["same_run_speedups"] == {}
    assert all(not x["same_run"] for x in C.table_rows(comp, "cpu"))
    assert "student † |" in C.render_markdown(comp)


def test_pareto_front():
    rows = [{"artifact": a, "score": acc, "latency_ms_p50": ms} for a, acc, ms in
            [("slow_best", 0.90, 20), ("mid", 0.89, 5), ("dominated", 0.88, 6), ("fast", 0.85, 1),
             ("tie_slower", 0.85, 2), ("ref", None, 100)]]
    assert C.pareto_front(rows) == ["fast", "mid", "slow_best"]


def test_table_rows_fastest_first_with_references_last(comp):
    rows = C.table_rows(comp, "cpu")
    names = [r["artifact"] for r in rows]
    assert names == ["student_pruned_onnx_int8", "student_onnx_int8", "student", "teacher", "bert_base_reference"]
    teacher = next(r for r in rows if r["artifact"] == "teacher")
    pruned = rows[0]
    assert teacher["score_delta_pts"] == 0.0 and pruned["score_delta_pts"] == round(100 * (0.8899 - 0.8956), 2)
    assert rows[-1]["reference"] and rows[-1]["score_delta_pts"] is None
    assert C.table_rows(comp, "gpu") == [] and C.targets_measured(comp) == ["cpu"]


def test_sweeps(comp):
    seq = C.sweep(comp, "cpu", "seq")
    assert [x for x, _ in seq["teacher"]] == [16, 32, 64, 128, 256, 512]
    assert all(a < b for (_, a), (_, b) in zip(seq["teacher"], seq["teacher"][1:]))  # longer: slower
    batch = C.sweep(comp, "cpu", "batch")
    assert [x for x, _ in batch["student"]] == [1, 4, 16, 32]


def test_markdown_shows_tables_sweeps_and_what_was_not_measured(comp):
    md = C.render_markdown(comp)
    assert "| student_pruned_onnx_int8 ★ | onnx | int8 | 50.2 | 16,818,818 | 88.99% | -0.57 |" in md
    assert "| bert_base_reference | pytorch | fp32 | 417.7 | 109,483,778 | n/a (random weights) | – |" in md
    assert "### Latency p50 (ms) against sequence length, batch 1, cpu" in md and "| seq 512 |" in md
    assert "- student_trt_fp16 / cpu: skipped: TensorRT engines run on NVIDIA GPUs only" in md


def test_html_page_is_self_contained_and_complete(comp):
    page = render_html(comp)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # nothing fetched: no scripts, stylesheets, images or fonts by URL
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)", page)  # url(#id): in-page SVG
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)
    assert page.count("<svg") == 3  # accuracy/latency, latency/seq, throughput/batch on the CPU
    for text in ("student_pruned_onnx_int8", "Pareto front", "n/a (random weights)", "Test CPU",
                 "avx512_vnni", "torch 2.13.0+cpu", "ab" * 32, "cd" * 32, "TensorRT engines run on NVIDIA GPUs only",
                 "sequence length", "batch size"):
        assert text in page, text
    assert render_html(comp) == page  # deterministic: an unchanged comparison gives the same bytes


def test_plot_csvs_for_dvc(comp, tmp_path):
    names = ["bert_base_reference", "teacher", "student", "student_int8_torch"]
    files = C.write_plot_data(comp, tmp_path, names)
    assert sorted(f.name for f in files) == ["accuracy_latency_cpu.csv", "accuracy_latency_gpu.csv",
                                             "latency_vs_seq_cpu.csv", "throughput_vs_batch_cpu.csv"]
    rows = list(csv.DictReader(open(tmp_path / "accuracy_latency_cpu.csv")))
    assert {r["artifact"] for r in rows} == {"teacher", "student", "student_onnx_int8", "student_pruned_onnx_int8"}
    assert {r["artifact"] for r in rows if r["pareto"] == "1"} == {"teacher", "student_onnx_int8",
                                                                 "student_pruned_onnx_int8"}
    seq = list(csv.DictReader(open(tmp_path / "latency_vs_seq_cpu.csv")))
    assert [int(r["seq_len"]) for r in seq] == [16, 32, 64, 128, 256, 512]
    assert seq[0]["student_int8_torch"] == ""  # not in this comparison: an empty column, not missing
    assert list(csv.DictReader(open(tmp_path / "accuracy_latency_gpu.csv"))) == []


def test_readme_block_is_rewritten_in_place(comp, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- results:start -->\nold\n<!-- results:end -->\noutro\n")
    assert C.update_readme(readme, comp) is True
    text = readme.read_text()
    assert text.startswith("intro\n<!-- results:start -->\n**CPU**") and text.endswith("<!-- results:end -->\noutro\n")
    assert "| teacher ★ | pytorch | fp32 |" in text and "old" not in text
    assert C.update_readme(readme, comp) is False
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="no '<!-- results:start -->'"):
        C.update_readme(readme, comp)


def test_cli_report_rerenders_markdown_html_and_readme(comp, tmp_path, capsys):
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(comp))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    assert main(["report", str(path), "--readme", str(readme)]) == 0
    assert (tmp_path / "comparison.md").read_text() == C.render_markdown(comp)
    assert (tmp_path / "comparison.html").read_text() == render_html(comp)
    assert "**CPU**" in readme.read_text()
    shutil.copy(FIXTURES / "teacher.json", tmp_path / "teacher.json")
    assert main(["report", str(tmp_path / "teacher.json")]) == 0
    assert (tmp_path / "teacher.md").read_text().startswith("# Report: teacher")
    assert not (tmp_path / "teacher.html").exists()


@pytest.mark.parametrize("data, message", [
    ({"seq_lens": [16, 64]}, "must include 128"),
    ({"batch_sizes": [1, 8]}, "must include 32"),
    ({"seq_lens": [128, 1024]}, "512 positions"),
    ({"targets": ["tpu"]}, "targets must be"),
    ({"min_duration_s": 5, "max_duration_s": 1}, "min_duration_s"),
    ({"seq_len": [128]}, "Did you mean 'seq_lens'"),
])
def test_benchmark_config_rejects_bad_params(data, message):
    with pytest.raises(ConfigError, match=message):
        build(BenchmarkConfig, data, "benchmark")


def test_benchmark_points_cover_both_sweeps_once():
    cfg = BenchmarkConfig(seq_lens=[128, 16], batch_sizes=[32, 1])
    assert cfg.points() == [[1, 16], [1, 128], [32, 128]]


def test_dev_stream_throughput_and_matrix_engines_reach_every_rendering(tmp_path):
    """The benchmark's real-length figure travels into the comparison rows, the Markdown and
    HTML tables; the environment tables say which matrix engines the CPU has."""
    bench = read_report(FIXTURES / "benchmark.json")
    for r in bench["records"]:
        if r["status"] == "ok":
            r["dev_stream_seq_per_s"] = 1234.5 if r["artifact"] == "student_onnx_int8" else 321.0
    bench["environment"] = {**bench["environment"], "matrix_engines": {"AMX-BF16": False, "AVX512-BF16": True}}
    comp = C.build([read_report(FIXTURES / f"{s}.json") for s in STAGES], bench)
    row = next(x for x in C.table_rows(comp, "cpu") if x["artifact"] == "student_onnx_int8")
    assert row["dev_stream_seq_per_s"] == 1234.5
    md = C.render_markdown(comp)
    assert "dev stream sent/s" in md and "1,234.5" in md
    assert "Matrix engines: AMX-BF16 no, AVX512-BF16 yes" in md
    page = render_html(comp)
    assert "dev stream sent/s (real lengths)" in page and "1,234.5" in page
    assert "AMX-BF16 no, AVX512-BF16 yes" in page


def test_sweep_plot_columns_come_from_dvc_yaml():
    from pipelines.compare import plotted_columns

    cols = plotted_columns(REPO / "dvc.yaml")
    assert cols[:2] == ["bert_base_reference", "teacher"]
    assert {"student_bf16", "student_ov_int8", "student_pruned_ov_bf16", "student_onnx_int8"} <= set(cols)
    assert len(cols) == len(set(cols))


def _with_intervals(reports: list[dict], pair_task: bool) -> list[dict]:
    """The fixture stage reports as a run with intervals would write them; pair_task: MRPC-like,
    with F1 and its interval too."""
    for rep in reports:
        for r in rep["records"]:
            if r["status"] == "ok":
                r.update(accuracy_ci95_low=round(r["accuracy"] - 0.021, 6),
                         accuracy_ci95_high=round(r["accuracy"] + 0.02, 6))
                if pair_task:
                    r.update(f1=round(r["accuracy"] + 0.03, 6), f1_ci95_low=round(r["accuracy"] + 0.01, 6),
                             f1_ci95_high=round(r["accuracy"] + 0.05, 6))
    return reports


def _bench_with_warmup_intervals() -> dict:
    """The benchmark blanks accuracy (a few warm-up rows); intervals from those rows must not
    reach the comparison, neither over the stage's nor on the reference rows."""
    bench = read_report(FIXTURES / "benchmark.json")
    for r in bench["records"]:
        if r["status"] == "ok":
            r.update(accuracy_ci95_low=0.1, accuracy_ci95_high=0.2)
    return bench


def test_intervals_travel_from_the_stage_and_render_with_f1_for_pair_tasks():
    stages = _with_intervals([read_report(FIXTURES / f"{s}.json") for s in STAGES], pair_task=True)
    comp = C.build(stages, _bench_with_warmup_intervals())
    row = next(x for x in C.table_rows(comp, "cpu") if x["artifact"] == "student_onnx_int8")
    assert (row["accuracy_ci95_low"], row["accuracy_ci95_high"]) == (0.8723, 0.9133)  # the stage's, not 0.1-0.2
    assert (row["f1"], row["f1_ci95_low"], row["f1_ci95_high"]) == (0.9233, 0.9033, 0.9433)
    ref = next(r for r in comp["records"] if r["artifact"] == "bert_base_reference" and r["target"] == "cpu")
    assert ref["accuracy_ci95_low"] is None and ref["accuracy_ci95_high"] is None
    md = C.render_markdown(comp)
    assert "| accuracy [95% CI] | Δ vs teacher (points) | F1 [95% CI] | p50 ms |" in md
    assert "| 89.33% [87.2–91.3] | -0.23 | 92.33% [90.3–94.3] |" in md
    assert "| n/a (random weights) | – | – |" in md  # the reference: no accuracy, no F1
    assert "95% bootstrap interval" in md and "95% bootstrap interval" in C.readme_table(comp)
    page = render_html(comp)
    assert "<th>F1 [95% CI]</th>" in page and "<td>92.33% [90.3–94.3]</td>" in page
    assert "<td>89.33% [87.2–91.3]</td>" in page and "vertical bars are the accuracy" in page
    assert render_html(comp) == page  # error bars keep the page deterministic


def test_single_sentence_tasks_get_no_f1_column():
    stages = _with_intervals([read_report(FIXTURES / f"{s}.json") for s in STAGES], pair_task=False)
    comp = C.build(stages, _bench_with_warmup_intervals())
    md = C.render_markdown(comp)
    assert "| accuracy [95% CI] | Δ vs teacher (points) | p50 ms |" in md and "| F1" not in md
    assert "| 88.99% [86.9–91.0] | -0.57 |" in md
    page = render_html(comp)
    assert ">F1" not in page and "<th>accuracy [95% CI]</th>" in page


def test_gpu_check_result_is_its_own_table_on_both_renderings(tmp_path):
    """The committed H200 run of benchmarks/gpu_check.py is drawn as a separate table
    (measured rows with their p50s, peak memory and agreement; skipped rows with their
    reason), and a file that is not a check result is refused by name."""
    from compress.core.errors import DataError
    from compress.report import gpu_check

    committed = REPO / "reports" / "gpu" / "gpu_check.json"
    result = gpu_check.load(committed)
    comp = {**C.build([], None), "gpu_check": gpu_check.summary(result, "reports/gpu/gpu_check.json")}
    md, page = C.render_markdown(comp), render_html(comp)
    measured = [r for r in result["rows"] if r["status"] == "ok"]
    assert measured, "the committed check measured rows on a GPU"
    for r in measured:
        p50 = next(p["latency_ms_p50"] for p in r["points"] if p["point"] == "1x128")
        assert f"| {r['geometry']} | {r['variant']} |" in md and f"{p50:.3f}" in md and f"{p50:.3f}" in page
    skipped = [r for r in result["rows"] if r["status"] != "ok"]
    assert all(f"skipped: {r['reason']}" in md for r in skipped)
    assert "## GPU check (separate run)" in md and "<h2>GPU check (separate run)</h2>" in page
    assert result["cuda"]["device"] in md
    assert "GPU check" not in C.render_markdown(C.build([], None))  # no result, no section
    assert gpu_check.load(tmp_path / "absent.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"records": []}')
    with pytest.raises(DataError, match="bad.json: not a GPU check result"):
        gpu_check.load(bad)


def _with_validation(reports: list[dict]) -> list[dict]:
    """The fixture stage reports as a run on data with a validation split writes them: the
    validation figures 1 point above dev's, with an interval."""
    for rep in reports:
        for r in rep["records"]:
            if r["status"] == "ok" and r.get("accuracy") is not None:
                v = round(r["accuracy"] + 0.01, 6)
                r.update(validation_metrics={"accuracy": v, "accuracy_ci95_low": round(v - 0.015, 6),
                                             "accuracy_ci95_high": round(v + 0.015, 6)}, validation_rows=2000,
                         validation_sha256="ab" * 32)
    return reports


def test_tables_lead_with_dev_and_add_the_validation_column():
    """Dev stays the main column (deltas, Pareto front); the primary metric on validation, what
    select chose on, follows the dev columns in the Markdown, the README block and the page;
    the benchmark's warm-up figures never stand in for the stage's, and a reference has none.
    Reports from before the split (the fixtures as committed) get no such column."""
    stages = _with_validation(_with_intervals([read_report(FIXTURES / f"{s}.json") for s in STAGES], False))
    bench = _bench_with_warmup_intervals()
    for r in bench["records"]:  # the benchmark keeps no validation figures; were it to, they would not count
        if r["status"] == "ok":
            r["validation_metrics"] = {"accuracy": 0.1}
    comp = C.build(stages, bench)
    row = next(x for x in C.table_rows(comp, "cpu") if x["artifact"] == "student_onnx_int8")
    assert row["score"] == 0.8933 and row["validation_score"] == 0.9033
    ref = next(r for r in comp["records"] if r["artifact"] == "bert_base_reference" and r["target"] == "cpu")
    assert ref["validation_metrics"] is None
    md = C.render_markdown(comp)
    assert ("| accuracy [95% CI] | Δ vs teacher (points) | validation accuracy [95% CI] (chose) | p50 ms |" in md)
    assert "| 89.33% [87.2–91.3] | -0.23 | 90.33% [88.8–91.8] |" in md
    assert "| n/a (random weights) | – | – |" in md and "`select` chooses on it" in md
    assert "validation accuracy [95% CI] (chose)" in C.readme_table(comp)
    page = render_html(comp)
    assert "<th>validation accuracy [95% CI] (chose)</th>" in page and "<td>90.33% [88.8–91.8]</td>" in page
    assert "<th>validation data sha256</th>" in page
    old = C.build([read_report(FIXTURES / f"{s}.json") for s in STAGES], read_report(FIXTURES / "benchmark.json"))
    assert "validation" not in C.render_markdown(old) and "validation" not in render_html(old)
