"""One report schema, one rendering; the comparison merges records by artifact/target."""
import json

import pytest

from compress.report.schema import (LatencyPoint, Record, build_comparison, make_report, read_report,
                             render_markdown, write_report)

ENV = {"cpu_model": "Test CPU", "cpu_flags": {"avx512_vnni": True, "amx_int8": False}, "cpu_count": 2,
       "threads": 2, "os": "Linux", "libraries": {"torch": "2.13.0"}}


def ok_record(artifact="teacher", target="cpu", acc=0.9):
    pts = [LatencyPoint(1, 128, latency_ms_p50=10.0, latency_ms_p90=11.0, latency_ms_p99=12.0,
                        latency_ms_mean=10.5, throughput_seq_per_s=95.0, queries=30, duration_s=0.3),
           LatencyPoint(32, 128, latency_ms_p50=200.0, latency_ms_p90=210.0, latency_ms_p99=220.0,
                        latency_ms_mean=205.0, throughput_seq_per_s=160.0, queries=30, duration_s=6.0)]
    return Record(artifact=artifact, target=target, status="ok", accuracy=acc, size_mb=86.7,
                  num_params=22_000_000, peak_mem_mb=900.0, points=pts).with_headline((1, 128), (32, 128))


def test_headline_fields_come_from_points():
    r = ok_record()
    assert (r.latency_ms_p50, r.latency_ms_p99, r.throughput_seq_per_s) == (10.0, 12.0, 160.0)


def test_skipped_record_needs_reason_and_status_is_checked():
    with pytest.raises(ValueError, match="needs a reason"):
        Record(artifact="a", target="gpu", status="skipped")
    with pytest.raises(ValueError, match="status must be one of"):
        Record(artifact="a", target="gpu", status="maybe", reason="x")


def test_report_roundtrip_and_markdown(tmp_path):
    recs = [ok_record().to_dict(), Record.skipped("teacher", "gpu", "no CUDA device visible").to_dict()]
    report = make_report("teacher", recs, ENV, {"training": {"steps": 10}})
    path = write_report(report, tmp_path)
    again = read_report(path)
    assert again == json.loads(json.dumps(report))
    assert again["summary"]["teacher"]["cpu"]["latency_ms_p50"] == 10.0
    assert again["summary"]["teacher"]["gpu"] == {"status": "skipped"}
    md = (tmp_path / "teacher.md").read_text()
    assert md == render_markdown(report)
    assert "| teacher | cpu | ok | – | – | 90.00% |" in md
    assert "skipped: no CUDA device visible" in md
    assert "| teacher | cpu | 32 | 128 | 200.00 | 210.00 | 220.00 | 160.0 | 30 |" in md
    assert "Test CPU" in md and "avx512_vnni" in md and "amx_int8" not in md.split("ISA:")[1].split("\n")[0]


def test_read_report_rejects_other_schema(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema_version": 99, "records": []}))
    with pytest.raises(ValueError, match="schema_version 99"):
        read_report(p)


def test_comparison_keeps_one_record_per_artifact_and_target():
    a = make_report("teacher", [ok_record(acc=0.9).to_dict()], ENV)
    b = make_report("distill", [ok_record("student", acc=0.88).to_dict(),
                                ok_record("teacher", acc=0.91).to_dict()], ENV)
    comp = build_comparison([a, b])
    keys = [(r["artifact"], r["target"]) for r in comp["records"]]
    assert sorted(keys) == [("student", "cpu"), ("teacher", "cpu")]
    teacher = next(r for r in comp["records"] if r["artifact"] == "teacher")
    assert teacher["accuracy"] == 0.91 and teacher["stage"] == "distill"
    required = {"artifact", "target", "status", "reason", "accuracy", "latency_ms_p50",
                "throughput_seq_per_s", "size_mb", "peak_mem_mb"}
    assert all(required <= set(r) for r in comp["records"])


def test_intervals_are_rendered_and_f1_only_for_pair_tasks():
    """A pair task (F1 set) gets an F1 column with its interval; a single-sentence task none."""
    sst2 = ok_record(acc=0.8865).to_dict() | {"accuracy_ci95_low": 0.865, "accuracy_ci95_high": 0.907}
    md = render_markdown(make_report("teacher", [sst2], ENV))
    assert "| accuracy [95% CI] | agreement with parent |" in md and "| F1" not in md
    assert "| teacher | cpu | ok | – | – | 88.65% [86.5–90.7] | – |" in md
    assert "95% bootstrap interval" in md
    mrpc = sst2 | {"f1": 0.9012, "f1_ci95_low": 0.8801, "f1_ci95_high": 0.9203}
    md = render_markdown(make_report("teacher", [mrpc, Record.skipped("teacher", "gpu", "no CUDA").to_dict()], ENV))
    assert "| accuracy [95% CI] | F1 [95% CI] | agreement with parent |" in md
    assert "| 88.65% [86.5–90.7] | 90.12% [88.0–92.0] | – |" in md
    assert "| teacher | gpu | skipped: no CUDA | – | – | – | – | – |" in md  # the row keeps the column count
    assert make_report("teacher", [mrpc], ENV)["summary"]["teacher"]["cpu"]["f1_ci95_high"] == 0.9203  # dvc metrics
    # an interval without its metric (the benchmark blanks accuracy only) is not announced
    md = render_markdown(make_report("benchmark", [sst2 | {"accuracy": None}], ENV))
    assert "[95% CI]" not in md and "bootstrap" not in md
    # a report written before intervals existed: plain percentages, no bracket note
    md = render_markdown(make_report("teacher", [ok_record().to_dict()], ENV))
    assert "| accuracy | agreement" in md and "[95% CI]" not in md and "bootstrap" not in md


def test_interval_fields_are_checked_and_old_reports_still_load(tmp_path):
    with pytest.raises(ValueError, match="f1_ci95_low/high must both be set"):
        Record(artifact="a", target="cpu", status="ok", f1=0.9, f1_ci95_low=0.88)
    with pytest.raises(ValueError, match="accuracy_ci95_low/high must both be set, low <= high"):
        Record(artifact="a", target="cpu", status="ok", accuracy_ci95_low=0.9, accuracy_ci95_high=0.8)
    old = make_report("teacher", [ok_record().to_dict()], ENV)
    for r in old["records"]:
        for f in ("accuracy_ci95_low", "accuracy_ci95_high", "f1_ci95_low", "f1_ci95_high"):
            del r[f]
    (tmp_path / "teacher.json").write_text(json.dumps(old))
    (rec,) = read_report(tmp_path / "teacher.json")["records"]
    assert Record.from_dict(rec).accuracy_ci95_low is None


def test_version_2_reports_are_upgraded_without_validation_figures_and_newer_ones_refused(tmp_path):
    """Version 3 adds the validation split's figures (what select chooses on): a version 2
    report (and a version 1 one) still loads, its records with none; an unknown version is
    refused with what to do."""
    v2 = make_report("teacher", [ok_record().to_dict()], ENV)
    v2["schema_version"] = 2
    for r in v2["records"]:
        for f in ("validation_metrics", "validation_rows", "validation_sha256"):
            del r[f]
    (tmp_path / "teacher.json").write_text(json.dumps(v2))
    report = read_report(tmp_path / "teacher.json")
    assert report["schema_version"] == 3
    assert report["records"][0]["validation_metrics"] is None and report["records"][0]["accuracy"] == 0.9
    v1 = {**v2, "schema_version": 1, "records": [{k: v for k, v in r.items() if k != "metrics"} for r in v2["records"]]}
    (tmp_path / "teacher.json").write_text(json.dumps(v1))
    (rec,) = read_report(tmp_path / "teacher.json")["records"]
    assert rec["metrics"] == {"accuracy": 0.9} and rec["validation_metrics"] is None
    (tmp_path / "teacher.json").write_text(json.dumps({**v2, "schema_version": 4}))
    with pytest.raises(ValueError, match=r"schema_version 4 is not one this version reads \(1 to 3\).*re-run"):
        read_report(tmp_path / "teacher.json")


def test_validation_figures_are_checked_and_shown_beside_dev():
    """The validation mapping's intervals are checked like dev's; a stage report shows the
    primary metric on validation in its own column after the dev ones (none for old reports)."""
    with pytest.raises(ValueError, match=r"accuracy_ci95_low/high must both be set.*a/cpu, validation"):
        Record(artifact="a", target="cpu", status="ok", validation_metrics={"accuracy": 0.9, "accuracy_ci95_low": 0.8})
    rec = ok_record(acc=0.8865).to_dict() | {"accuracy_ci95_low": 0.865, "accuracy_ci95_high": 0.907,
                                             "validation_metrics": {"accuracy": 0.9012, "accuracy_ci95_low": 0.88,
                                                                    "accuracy_ci95_high": 0.92},
                                             "validation_rows": 2000}
    md = render_markdown(make_report("teacher", [rec, Record.skipped("teacher", "gpu", "no CUDA").to_dict()], ENV))
    assert "| accuracy [95% CI] | validation accuracy [95% CI] (chose) | agreement with parent |" in md
    assert "| 88.65% [86.5–90.7] | 90.12% [88.0–92.0] | – |" in md
    assert "| teacher | gpu | skipped: no CUDA | – | – | – | – | – |" in md and "`select` chooses on it" in md
    md = render_markdown(make_report("teacher", [ok_record().to_dict()], ENV))
    assert "validation" not in md
