"""One report schema, one rendering; the comparison merges records by artifact/target."""
import json

import pytest

from compress.report import (LatencyPoint, Record, build_comparison, make_report, read_report,
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
