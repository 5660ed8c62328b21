"""The production policy (including nothing-qualifies), promotion with hashes and a model
card, and `compress predict` / `evaluate` on a tiny model."""
import json
import subprocess
import sys

import pytest

from compress.cli import main
from compress.core.config import ConfigError, build
from compress.predict import IntegrityError, load, parse_lines, predict
from compress.tasks.base import get_kind
from compress.report.select import SelectPolicy, promote, select
from conftest import REPO
from test_report import ENV


def rec(name, acc, p50, size=10.0, target="cpu", status="ok", reason=None, fmt="onnx", precision="int8", val="dev"):
    """A comparison record; `val` is its validation accuracy ("dev": the same as dev's, None: no validation figures)."""
    val = acc if val == "dev" else val
    return {"artifact": name, "target": target, "status": status, "reason": reason, "stage": "x",
            "backend": "b", "format": fmt, "precision": precision, "task": "sst2", "accuracy": acc, "f1": None,
            "validation_metrics": None if val is None else {"accuracy": val}, "validation_rows": 2000,
            "parent": "student", "latency_ms_p50": p50, "latency_ms_p99": p50 and p50 * 1.5,
            # real lengths are shorter than 128 tokens: the same order here, unless a test says
            "real_latency_ms_p50": p50 and p50 * 0.4, "real_latency_ms_p99": p50 and p50 * 0.8,
            "throughput_seq_per_s": 100.0, "size_mb": size, "num_params": 1000, "peak_mem_mb": 500.0,
            "threads": 2}


COMPARISON = {"environment": ENV, "records": [
    rec("teacher", 0.90, 20.0, 80, fmt="pytorch", precision="fp32"),
    rec("student", 0.895, 9.0, 60, fmt="pytorch", precision="fp32"),
    rec("student_control", 0.89, 8.9, 60, fmt="pytorch", precision="fp32"),
    rec("fast_but_bad", 0.80, 2.0, 10),
    rec("int8", 0.890, 4.0, 50),
    rec("smaller_int8", 0.889, 4.5, 15),
    rec("gpu_only", None, None, target="cpu", status="skipped", reason="TensorRT engines run on NVIDIA GPUs only"),
    rec("teacher", None, None, target="gpu", status="skipped", reason="no CUDA"),
]}


def test_fastest_artifact_above_the_floor_wins_with_reasons():
    sel = select(COMPARISON, SelectPolicy(exclude=["student_control"]))
    assert sel["chosen"] == "int8" and sel["qualified"] == ["int8", "smaller_int8", "student", "teacher"]
    rules = {r["artifact"]: r["rule"] for r in sel["rejected"]}
    assert rules == {"fast_but_bad": "accuracy_floor", "gpu_only": "not_measured", "student_control": "excluded"}
    assert any("5.00x faster than teacher (pytorch fp32, p50 20.00 ms, a different run)" in r
               for r in sel["reasons"])
    assert sel["speedup_vs"] == {"teacher": 5.0}


def test_speedups_vs_teacher_and_reference_from_the_one_run():
    """With the benchmark in the comparison, the choice is divided by the teacher and the
    bert-base reference of the same run; the reference itself is never a candidate."""
    comp = {**COMPARISON, "stages": ["teacher", "benchmark"], "references": ["bert_base_reference"],
            "latency_from_stage": [],
            "records": COMPARISON["records"] + [rec("bert_base_reference", None, 110.0, 418, fmt="pytorch",
                                                    precision="fp32")]}
    sel = select(comp, SelectPolicy(exclude=["student_control"]))
    assert sel["chosen"] == "int8" and sel["speedup_vs"] == {"teacher": 5.0, "bert_base_reference": 27.5}
    assert {r["artifact"]: r["rule"] for r in sel["rejected"]}["bert_base_reference"] == "no_accuracy"
    assert any("27.50x faster than bert_base_reference (pytorch fp32, p50 110.00 ms, same run)" in r
               for r in sel["reasons"])


def test_latency_and_size_rules():
    sel = select(COMPARISON, SelectPolicy(max_size_mb=20))
    assert sel["chosen"] == "smaller_int8"
    assert {r["artifact"]: r["rule"] for r in sel["rejected"]}["int8"] == "size_cap"
    sel = select(COMPARISON, SelectPolicy(max_latency_ms=4.2, max_size_mb=20))
    assert sel["chosen"] is None and "size_cap" in sel["reasons"][0] and "latency_limit" in sel["reasons"][0]


def test_nothing_qualifies_is_a_result_not_an_error(tmp_path):
    sel = select(COMPARISON, SelectPolicy(target="gpu"))
    assert sel["chosen"] is None and sel["record"] is None
    assert "no artifact on gpu meets the policy" in sel["reasons"][0]
    (tmp_path / "production").mkdir()
    assert promote(sel, ENV, tmp_path / "production") is None
    assert not (tmp_path / "production").exists()  # a stale promotion never survives


@pytest.mark.parametrize("data, message", [
    ({"target": "tpu"}, "target must be one of"),
    ({"accuracy_floor_vs_teacher": 0}, "accuracy_floor_vs_teacher"),
    ({"max_latency_ms": -1}, "max_latency_ms"),
    ({"max_size": 3}, "max_size_mb"),
])
def test_policy_rejects_bad_params(data, message):
    with pytest.raises(ConfigError, match=message):
        build(SelectPolicy, data, "select")


def test_gpu_target_selects_among_gpu_rows_and_the_comparison_shows_them():
    """With GPU records measured (a GPU machine's reports), the comparison gets a GPU table
    and `select` with target gpu ranks the GPU rows: here the CUDA-graph FP16 student."""
    from compress.report import comparison as C

    gpu = [rec("teacher", 0.90, 4.7, 80, target="gpu", fmt="pytorch", precision="fp32"),
           rec("student", 0.895, 1.7, 60, target="gpu", fmt="pytorch", precision="fp32"),
           rec("student_fp16", 0.895, 1.8, 60, target="gpu", fmt="pytorch", precision="fp16"),
           rec("student_cudagraph", 0.895, 0.4, 60, target="gpu", fmt="pytorch_cudagraph", precision="fp16")]
    comp = {**COMPARISON, "stages": ["teacher", "distill"],
            "records": [r for r in COMPARISON["records"] if r["target"] == "cpu"] + gpu}
    assert C.targets_measured(comp) == ["cpu", "gpu"]
    md = C.render_markdown(comp)
    assert "## GPU" in md and "| student_cudagraph" in md
    sel = select(comp, SelectPolicy(target="gpu"))
    assert sel["chosen"] == "student_cudagraph" and sel["speedup_vs"]["teacher"] == round(4.7 / 0.4, 3)


def test_artifacts_are_found_by_the_path_their_records_carry():
    """No name parsing: a variant sharing its parent's files (bf16) and an engine in its own
    folder are where their records say; a measured record without a path is refused."""
    from compress.measure.benchmark import artifacts_from_reports

    def r(name, target, path, fmt="pytorch", precision="fp32", status="ok"):
        return {"artifact": name, "target": target, "status": status, "reason": None if status == "ok" else "no GPU",
                "format": fmt, "precision": precision, "parent": None, "path": path}

    reports = [{"stage": "distill", "records": [r("student", "cpu", "models/student"),
                                                r("student_bf16", "cpu", "models/student", precision="bf16")]},
               {"stage": "tensorrt", "records": [r("student_trt_fp16", "gpu", "models/trt/student-fp16", "tensorrt",
                                                   "fp16"),
                                                 r("student_trt_fp16", "cpu", None, "tensorrt", "fp16", "skipped")]}]
    found = {a.name: (str(a.path), a.format, a.precision, sorted(recs)) for a, recs in artifacts_from_reports(reports)}
    assert found == {"student": ("models/student", "pytorch", "fp32", ["cpu"]),
                     "student_bf16": ("models/student", "pytorch", "bf16", ["cpu"]),
                     "student_trt_fp16": ("models/trt/student-fp16", "tensorrt", "fp16", ["cpu", "gpu"])}
    reports[0]["records"][0]["path"] = None
    with pytest.raises(ValueError, match="distill.json: student/cpu records no path"):
        artifacts_from_reports(reports)


def test_promotion_writes_hashes_and_a_model_card(production):
    card = (production / "MODEL_CARD.md").read_text()
    assert "# Model card: tiny" in card and "How to load it" in card and "load_saved" in card
    assert json.loads((production / "artifact.json").read_text())["format"] == "pytorch"


def test_predict_on_the_production_artifact(production):
    loaded = load(production)
    out = predict(loaded, list(parse_lines(["a gorgeous movie", "x" * 100_000], get_kind("classification"), "test")))
    assert [r["label"] in ("negative", "positive") for r in out] == [True, True]
    assert abs(sum(out[0]["probabilities"].values()) - 1) < 1e-5  # a 100,000-character line is truncated


def test_predict_refuses_a_tampered_artifact(production):
    with open(production / "model.safetensors", "ab") as f:
        f.write(b"\0")
    with pytest.raises(IntegrityError, match="does not match artifact.json"):
        load(production)


def test_input_errors_name_the_line():
    with pytest.raises(Exception, match=r"in.txt:2: not valid UTF-8"):
        list(parse_lines([b"fine\n", b"bad \xff byte\n"], get_kind("classification"), "in.txt"))
    with pytest.raises(Exception, match=r"in.txt:1: this task takes sentence pairs"):
        list(parse_lines(["only one sentence\n"], get_kind("pair_classification"), "in.txt"))
    assert [e.text_b for e in parse_lines(["a\tb\n"], get_kind("pair_classification"), "in.txt")] == ["b"]


def test_cli_predict_file_jsonl_and_empty_input(production, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("a gorgeous movie\n\nboring and far too long\n", encoding="utf-8")
    assert main(["predict", "--artifact", str(production), "--file", str(f), "--format", "jsonl"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == ["a gorgeous movie", "boring and far too long"]
    f.write_text("\n", encoding="utf-8")
    assert main(["predict", "--artifact", str(production), "--file", str(f)]) == 2
    assert "no input texts" in capsys.readouterr().err


def test_cli_predict_reads_standard_input(production):
    proc = subprocess.run([sys.executable, "-m", "compress.cli", "predict", "--artifact", str(production)],
                          input="what a film\n", capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    label, probs, text = proc.stdout.strip().split("\t")
    assert label in ("negative", "positive") and text == "what a film" and "positive=" in probs


def test_cli_evaluate_scores_a_glue_split(production, sst2_dir, capsys):
    assert main(["evaluate", "--artifact", str(production), "--data", str(sst2_dir)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows"] == 8 and 0 <= res["accuracy"] <= 1


def test_rank_by_dev_stream_throughput_picks_the_highest_real_length_throughput():
    """rank_by: the default ranks by 1x128 p50; dev_stream_throughput by sentences/s over the
    dev split at real lengths, and a candidate without that figure is not_measured."""
    stream = {"teacher": 200.0, "student": 900.0, "int8": 1500.0, "smaller_int8": 2500.0}
    comp = {"environment": ENV, "records": [
        {**r, "dev_stream_seq_per_s": stream.get(r["artifact"])} for r in COMPARISON["records"]]}
    assert select(comp, SelectPolicy(exclude=["student_control"]))["chosen"] == "int8"
    sel = select(comp, SelectPolicy(exclude=["student_control"], rank_by="dev_stream_throughput"))
    assert sel["chosen"] == "smaller_int8"
    assert sel["qualified"] == ["smaller_int8", "int8", "student", "teacher"]
    assert "2,500.0 sentences/s" in sel["reasons"][0] and "next: int8 at 1,500.0 sentences/s" in sel["reasons"]
    comp["records"] = [{**r, "dev_stream_seq_per_s": None} if r["artifact"] == "smaller_int8" else r
                       for r in comp["records"]]
    sel = select(comp, SelectPolicy(exclude=["student_control"], rank_by="dev_stream_throughput"))
    assert sel["chosen"] == "int8"
    assert {"artifact": "smaller_int8", "rule": "not_measured",
            "detail": "no dev-split throughput at real lengths (rank_by dev_stream_throughput)"} in sel["rejected"]
    with pytest.raises(ConfigError, match="rank_by must be one of p50_real_length, p50_1x128, dev_stream_throughput"):
        build(SelectPolicy, {"rank_by": "p99"}, "select")


# --- floors on accuracy and F1, at the point or the interval's lower bound -------------------

def pair_rec(name, acc, f1, p50, acc_low=None, f1_low=None):
    """A pair-task record: accuracy and F1, with their intervals' low ends when given, the
    same on validation as on dev."""
    r = {**rec(name, acc, p50), "task": "mrpc", "f1": f1}
    if acc_low is not None:
        r.update(accuracy_ci95_low=acc_low, accuracy_ci95_high=acc + 0.02)
    if f1_low is not None:
        r.update(f1_ci95_low=f1_low, f1_ci95_high=f1 + 0.02)
    r["validation_metrics"] = {k: v for k, v in r.items() if k.startswith(("accuracy", "f1")) and v is not None}
    return r


MRPC = {"environment": ENV, "records": [
    pair_rec("teacher", 0.86, 0.90, 20.0, acc_low=0.85, f1_low=0.89),
    pair_rec("good_acc_low_f1", 0.855, 0.85, 2.0, acc_low=0.85, f1_low=0.84),  # 99.4% acc, 94.4% F1
    pair_rec("wide_interval", 0.86, 0.90, 3.0, acc_low=0.83, f1_low=0.89),  # 96.5% acc at its low end
    pair_rec("steady", 0.86, 0.90, 4.0, acc_low=0.85, f1_low=0.89),
]}


def test_f1_floor_rejects_good_accuracy_with_low_f1():
    sel = select(MRPC, SelectPolicy())
    assert sel["chosen"] == "wide_interval"
    assert {"artifact": "good_acc_low_f1", "rule": "f1_floor",
            "detail": "keeps 94.44% of the teacher's F1 on validation < 98.50%"} in sel["rejected"]
    # the reasons list every floor the choice keeps, on validation, with the dev ratio beside
    assert "keeps 100.00% of the teacher's accuracy on validation (floor 98.50%; on dev: 100.00%)" in sel["reasons"]
    assert "keeps 100.00% of the teacher's F1 on validation (floor 98.50%; on dev: 100.00%)" in sel["reasons"]
    assert sel["teacher_f1"] == 0.90 and sel["teacher_validation"] == {"accuracy": 0.86, "f1": 0.90}
    # accuracy only: the low F1 no longer counts
    sel = select(MRPC, SelectPolicy(floor_metrics=["accuracy"]))
    assert sel["chosen"] == "good_acc_low_f1" and not any("F1" in r for r in sel["reasons"])


def test_lower_bound_floor_rejects_what_the_point_floor_accepts():
    policy = SelectPolicy(floor_at="lower_bound", accuracy_floor_vs_teacher=0.97)
    sel = select(MRPC, policy)
    assert sel["chosen"] == "steady"
    rejected = {r["artifact"]: r for r in sel["rejected"]}
    assert rejected["wide_interval"] == {
        "artifact": "wide_interval", "rule": "accuracy_floor",
        "detail": "keeps 96.51% of the teacher's accuracy on validation < 97.00% (at the interval's lower bound)"}
    assert rejected["good_acc_low_f1"]["rule"] == "f1_floor"
    assert "(at the interval's lower bound)" in rejected["good_acc_low_f1"]["detail"]
    assert ("keeps 98.84% of the teacher's accuracy on validation (floor 97.00%, at the interval's lower bound; "
            "on dev: 98.84%)") in sel["reasons"]
    # a record without an interval (a report from before intervals) cannot be judged at its lower bound
    comp = {**MRPC, "records": MRPC["records"] + [pair_rec("no_interval", 0.86, 0.90, 1.0)]}
    rejected = {r["artifact"]: r for r in select(comp, policy)["rejected"]}
    assert rejected["no_interval"]["rule"] == "accuracy_floor"
    assert "no 95% interval of its validation accuracy" in rejected["no_interval"]["detail"]
    assert select(comp, SelectPolicy())["chosen"] == "no_interval"  # at the point it qualifies


def test_f1_is_not_checked_where_the_task_has_none():
    """SST-2 records carry no F1: the default floor_metrics [accuracy, f1] checks accuracy only,
    exactly as before F1 floors existed."""
    both = select(COMPARISON, SelectPolicy(exclude=["student_control"]))
    accuracy_only = select(COMPARISON, SelectPolicy(exclude=["student_control"], floor_metrics=["accuracy"]))
    without_policy = [{k: v for k, v in x.items() if k != "policy"} for x in (both, accuracy_only)]
    assert without_policy[0] == without_policy[1]
    assert {"artifact": "fast_but_bad", "rule": "accuracy_floor",
            "detail": "keeps 88.89% of the teacher's accuracy on validation < 98.50%"} in both["rejected"]
    sel = select(COMPARISON, SelectPolicy(floor_metrics=["f1"], accuracy_floor_vs_teacher=0.5))
    assert sel["chosen"] == "fast_but_bad"  # no F1 anywhere: no floor applies


def test_selection_markdown_and_model_card_name_the_floors():
    from compress.report.select import model_card
    from pipelines.select import render

    sel = select(MRPC, SelectPolicy(floor_metrics=["accuracy", "f1"], floor_at="lower_bound",
                                    accuracy_floor_vs_teacher=0.97))
    md = render(sel)
    assert ("accuracy and F1 >= 97.0% of the teacher's on the validation split (floor_metrics [accuracy, f1], "
            "floor_at lower_bound: the artifact's 95% interval low end over the teacher's)") in md
    card = model_card(sel, ENV)
    assert "of the teacher's accuracy and F1 at the low end of its 95% interval on the validation split" in card
    assert "- accuracy 86.00% [85.0–88.0], F1 90.00% [89.0–92.0] (accuracy 100.00% and F1 100.00% of the teacher's" \
        in card
    md = render(select(COMPARISON, SelectPolicy()))
    assert "floor_at point: the artifact's measured value" in md and "F1 not checked, the task does not report it" in md


@pytest.mark.parametrize("data, message", [
    ({"floor_metrics": []}, "floor_metrics must be a non-empty list of accuracy, f1"),
    ({"floor_metrics": ["mcc"]}, "floor_metrics must be a non-empty list"),
    ({"floor_metrics": ["f1", "f1"]}, "floor_metrics repeat"),
    ({"floor_at": "upper_bound"}, "floor_at must be one of point, lower_bound"),
    ({"floor_metric": ["f1"]}, "Did you mean 'floor_metrics'"),
])
def test_floor_params_are_checked(data, message):
    with pytest.raises(ConfigError, match=message):
        build(SelectPolicy, data, "select")


def test_rank_by_real_length_p50_by_default_can_reverse_the_1x128_order():
    """Real sentences are short: an artifact slower at 1x128 can be faster at their own
    lengths (the pruned ONNX Runtime INT8 vs the OpenVINO BF16 IR on SST-2). The default
    ranks by the real-length p50; p50_1x128 keeps the padded point."""
    records = [dict(r) for r in COMPARISON["records"]]
    small = next(r for r in records if r["artifact"] == "smaller_int8")
    small["real_latency_ms_p50"], small["real_latency_ms_p99"] = 0.69, 1.2  # int8's is 1.6
    comp = {**COMPARISON, "records": records}
    sel = select(comp, SelectPolicy(exclude=["student_control"]))
    assert sel["chosen"] == "smaller_int8" and "p50 0.69 ms, p99 1.20 ms at batch 1 over dev texts" in sel["reasons"][0]
    assert select(comp, SelectPolicy(exclude=["student_control"], rank_by="p50_1x128"))["chosen"] == "int8"
    del small["real_latency_ms_p50"]
    sel = select(comp, SelectPolicy(exclude=["student_control"]))
    assert {r["artifact"]: r["rule"] for r in sel["rejected"]}["smaller_int8"] == "not_measured"


# --- chosen on validation, reported on dev ------------------------------------------------------

SPLIT = {"environment": ENV, "records": [
    rec("teacher", 0.90, 20.0, 80, fmt="pytorch", precision="fp32", val=0.92),
    # dev flatters it (98.9% of the teacher's), validation does not (95.7%)
    rec("lucky_on_dev", 0.890, 2.0, 10, val=0.880),
    # dev alone would reject it (97.8%); validation keeps it (99.5%)
    rec("steady_int8", 0.880, 4.0, 10, val=0.915),
    rec("student", 0.895, 9.0, 60, fmt="pytorch", precision="fp32", val=0.918),
]}


def test_the_choice_is_made_on_validation_where_dev_would_choose_differently():
    """Floors read validation figures only: the artifact dev would pick (fastest above the
    dev floor) fails it on validation, and the one dev would reject wins; selection.json
    says so and carries the dev ratios beside the validation ones."""
    def dev_only(r):  # the same records judged on dev: validation := dev
        return {**r, "validation_metrics": {"accuracy": r["accuracy"]}}

    on_dev = select({**SPLIT, "records": [dev_only(r) for r in SPLIT["records"]]}, SelectPolicy())
    assert on_dev["chosen"] == "lucky_on_dev"
    assert {r["artifact"]: r["rule"] for r in on_dev["rejected"]} == {"steady_int8": "accuracy_floor"}
    sel = select(SPLIT, SelectPolicy())
    assert sel["chosen"] == "steady_int8" and sel["chosen_on"] == "validation" and sel["reported_on"] == "dev"
    assert {"artifact": "lucky_on_dev", "rule": "accuracy_floor",
            "detail": "keeps 95.65% of the teacher's accuracy on validation < 98.50%"} in sel["rejected"]
    assert sel["ratios_vs_teacher"] == {"validation": {"accuracy": 0.915 / 0.92}, "dev": {"accuracy": 0.880 / 0.90}}
    assert sel["teacher_validation"] == {"accuracy": 0.92} and sel["teacher_dev"] == {"accuracy": 0.90}
    assert sel["teacher_accuracy"] == 0.90  # the flat teacher figures stay dev's, as the card divides by them
    assert "keeps 99.46% of the teacher's accuracy on validation (floor 98.50%; on dev: 97.78%)" in sel["reasons"]


def test_a_record_without_validation_figures_is_rejected_no_validation():
    """A record from before the validation split (or data prepared without one) cannot be
    judged on the split that chooses; a random-weight reference scored nothing anywhere
    (no_accuracy); a teacher without validation figures leaves nothing to compare with."""
    comp = {**SPLIT, "records": SPLIT["records"] + [rec("old_report", 0.90, 1.0, val=None),
                                                    rec("bert_base_reference", None, 110.0, 418, val=None)]}
    sel = select(comp, SelectPolicy())
    rejected = {r["artifact"]: r for r in sel["rejected"]}
    assert rejected["old_report"]["rule"] == "no_validation"
    assert "no accuracy on the validation split, which chooses" in rejected["old_report"]["detail"]
    assert rejected["bert_base_reference"]["rule"] == "no_accuracy" and sel["chosen"] == "steady_int8"
    no_teacher = {**SPLIT, "records": [{**r, "validation_metrics": None} if r["artifact"] == "teacher" else r
                                       for r in SPLIT["records"]]}
    sel = select(no_teacher, SelectPolicy())
    assert sel["chosen"] is None
    assert {"artifact": "student", "rule": "accuracy_floor",
            "detail": "no teacher accuracy on validation on cpu to compare with"} in sel["rejected"]
    assert {r["artifact"]: r["rule"] for r in sel["rejected"]}["teacher"] == "no_validation"


def test_selection_markdown_quotes_both_splits_and_the_card_leads_with_dev():
    from compress.report.select import model_card
    from pipelines.select import render

    sel = select(SPLIT, SelectPolicy())
    md = render(sel)
    assert "Chosen on the **validation** split" in md and "of the teacher's on the validation split" in md
    assert "| share of the teacher's | validation (chose) | dev (to expect) |" in md
    assert "| accuracy | 99.46% | 97.78% |" in md
    assert "| lucky_on_dev | accuracy_floor | keeps 95.65% of the teacher's accuracy on validation < 98.50% |" in md
    card = model_card(sel, ENV)
    metrics = card.split("## Metrics (task sst2, dev split)\n")[1]
    assert metrics.startswith("- accuracy 88.00% (accuracy 97.78% of the teacher's)")  # dev first: what to expect
    assert ("- on the validation split (2000 rows), which chose it: accuracy 91.50% (accuracy 99.46% of the "
            "teacher's)") in metrics
    assert "The metrics below are the dev split's, which played no part in the choice" in card
