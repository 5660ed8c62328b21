"""The GPU check's figures on the comparison page.

`benchmarks/gpu_check.py` measures the GPU side of an installation in a run of its own
(eager FP32/FP16, CUDA-graph FP16, TensorRT / ONNX Runtime CUDA where installed) and writes
``reports/gpu/gpu_check.json``. The `compare` stage folds a summary of that file into
``comparison.json`` (`gpu_check`), and the Markdown and HTML renderings show it as its own
table: a separate run on a separate machine, so its rows never divide against the
benchmark's, and geometries with random weights carry latency and memory only.
"""
from __future__ import annotations

import json
from pathlib import Path

from compress.core.errors import DataError

POINTS = ("1x16", "1x128", "1x512", "32x128", "256x128")


def load(path: str | Path) -> dict | None:
    """The check's JSON, or None when there is none; a file without its rows is refused."""
    path = Path(path)
    if not path.is_file():
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list) or "cuda" not in result:
        raise DataError(f"{path}: not a GPU check result (no 'cuda' or 'rows'); rerun python benchmarks/gpu_check.py")
    return result


def summary(result: dict, source: str) -> dict:
    """What the page shows: the device, per measured row the p50 at each point, the
    256x128 throughput, the peak GPU memory at 1x128 and the agreement with eager FP32;
    skipped rows with their reason."""
    rows = []
    for r in result["rows"]:
        row = {"geometry": r["geometry"], "variant": r["variant"], "status": r["status"]}
        if r["status"] != "ok":
            rows.append({**row, "reason": r.get("reason")})
            continue
        pts = {p["point"]: p for p in r["points"]}
        row["latency_ms_p50"] = {k: pts[k].get("latency_ms_p50") for k in POINTS if k in pts}
        row["throughput_256x128"] = pts.get("256x128", {}).get("throughput_seq_per_s")
        row["peak_gpu_mem_mb_1x128"] = pts.get("1x128", {}).get("peak_gpu_mem_mb")
        row["agreement_vs_eager_fp32"] = r.get("agreement_vs_eager_fp32")
        row["weights"] = r.get("source")
        rows.append(row)
    return {"source": source, "device": result["cuda"].get("device"), "cuda": result["cuda"],
            "libraries": result.get("libraries", {}), "tests": (result.get("tests") or {}).get("summary"),
            "agreement_inputs": result.get("agreement_inputs"), "speedups": result.get("speedups", {}),
            "published_reference": result.get("published_reference"), "rows": rows}


def _lines(s: dict) -> tuple[str, list[str], list[list[str]], list[str]]:
    """(intro, header, table cells, notes): the one layout both renderings draw."""
    libs = ", ".join(f"{k} {v}" for k, v in s["libraries"].items())
    intro = (f"Measured by `benchmarks/gpu_check.py` in a run of its own on {s['device'] or 'no GPU'} ({libs}); "
             f"source `{s['source']}`. Not comparable row by row with the comparison's tables (another run, another "
             "machine). Rows with random weights give latency and memory only; agreement is the argmax "
             f"agreement with eager FP32 on {s['agreement_inputs'] or 'the same inputs'}.")
    header = ["geometry", "variant", *(f"p50 {p} (ms)" for p in POINTS), "seq/s 256x128", "peak GPU MiB 1x128",
              "agreement", "weights"]
    cells = []
    for r in s["rows"]:
        if r["status"] != "ok":
            cells.append([r["geometry"], r["variant"], *("-" for _ in POINTS), "-", "-", "-", f"skipped: {r['reason']}"])
            continue
        p50 = r["latency_ms_p50"]
        cells.append([r["geometry"], r["variant"],
                      *(f"{p50[p]:.3f}" if p50.get(p) is not None else "does not fit" for p in POINTS),
                      f"{r['throughput_256x128']:,.0f}" if r["throughput_256x128"] else "-",
                      f"{r['peak_gpu_mem_mb_1x128']:.0f}" if r["peak_gpu_mem_mb_1x128"] is not None else "-",
                      f"{r['agreement_vs_eager_fp32']:.2%}" if r["agreement_vs_eager_fp32"] is not None else "-",
                      r["weights"] or "-"])
    notes = []
    if s["tests"]:
        notes.append(f"Suite GPU tests on that machine: {s['tests']}.")
    if s["speedups"]:
        notes.append("CUDA-graph FP16 vs eager FP32 at 1x128 p50: " +
                     ", ".join(f"{k} {v}x" for k, v in s["speedups"].items()) + ".")
    ref = s["published_reference"]
    if ref:
        notes.append(f"bert-base CUDA-graph FP16 at 1x128: {ref['measured_ms']} ms; the published {ref['engine']} "
                     f"figure on an {ref['gpu']} is {ref['latency_ms']} ms (a yardstick, not measured here).")
    return intro, header, cells, notes


def _table_lines(s: dict) -> list[str]:
    intro, header, cells, notes = _lines(s)
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(row) + " |" for row in cells]
    return [intro, "", *table, "", *notes]


def standalone_markdown(result: dict, source: str) -> str:
    """benchmarks/gpu_check.py's own page: the command, what CUDA torch saw, the suite's
    GPU tests with every skip and failure, then the table the comparison page shows."""
    tests = result.get("tests") or {}
    lines = ["# GPU check", "", f"Command: `{result.get('command', 'python benchmarks/gpu_check.py')}`", "",
             f"CUDA: {json.dumps(result['cuda'])}", ""]
    if tests:
        lines += [f"- {x}" for x in tests.get("skips", []) + tests.get("failures", [])] + [""]
    return "\n".join(lines + _table_lines(summary(result, source))) + "\n"


def markdown_section(comp: dict) -> list[str]:
    s = comp.get("gpu_check")
    if not s:
        return []
    return ["## GPU check (separate run)", "", *_table_lines(s), ""]


def html_section(comp: dict, escape) -> list[str]:
    s = comp.get("gpu_check")
    if not s:
        return []
    intro, header, cells, notes = _lines(s)
    rows = "".join("<tr>" + "".join(f'<td class="l">{escape(c)}</td>' if i < 2 or i == len(row) - 1
                                     else f"<td>{escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                   for row in cells)
    return ["<h2>GPU check (separate run)</h2>", f'<p class="note">{escape(intro)}</p>',
            "<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" + rows + "</table>",
            *(f'<p class="note">{escape(n)}</p>' for n in notes)]
