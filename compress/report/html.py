"""The comparison as one self-contained HTML page: tables, plots (inline SVG drawn by
matplotlib), environment and hashes. No script, stylesheet, font or image is fetched,
so the file can be mailed, attached to a CI run or opened offline.

Everything shown is derived from ``reports/comparison.json`` by `compress.report.comparison`;
this module only lays it out. The SVG output is made deterministic (fixed ids, no date)
so an unchanged comparison renders to the same bytes.
"""
from __future__ import annotations

import html
import io

from compress.report import comparison as C, gpu_check
from compress.report.schema import (CI_NOTE, METRIC_LABELS, VALIDATION_NOTE, _fmt, _pct_ci, has_interval, has_metric,
                                    has_validation, metric_header, primary_metric, validation_cell, validation_header)



def format_color(fmt: str | None) -> str:
    """The format's colour from its backend's descriptor; grey for a format no backend
    registered here (a plugin's report read without the plugin)."""
    from compress.backends import registry

    return registry.get(fmt).color if fmt and registry.known(fmt) else "#777"

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;
color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
p.note{color:#555;font-size:.92em;max-width:1000px}
table{border-collapse:collapse;font-size:.85em;margin:8px 0 16px}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:right;white-space:nowrap}
td.w{text-align:left;white-space:normal;max-width:1000px}
th{background:#f3f5f7;text-align:center;white-space:normal;min-width:48px}
.scroll{overflow-x:auto} td.l{text-align:left}
tr.front td:first-child{font-weight:600} tr.ref td{color:#666;font-style:italic}
.plots{display:flex;flex-wrap:wrap;gap:12px} .plots figure{margin:0;flex:1 1 600px}
figcaption{font-size:.85em;color:#555} code{font-size:.9em}
.chip{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}
"""


def _e(v) -> str:
    return html.escape(str(v))


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inline SVG


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "compress", "font.size": 9})
    return plt


def accuracy_latency_svg(comp: dict, target: str) -> str:
    """Accuracy against p50 latency (log x), point area by weight size, the accuracy's 95%
    interval as a vertical bar, the Pareto front as a step line, reference rows (no
    accuracy) as vertical lines."""
    plt = _mpl()
    rows = C.table_rows(comp, target)
    front = C.pareto_front(rows)
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    metric, metric_label = primary_metric(comp["records"])  # accuracy, or entity F1 for a tagger
    scored = [r for r in rows if r["score"] is not None and r["latency_ms_p50"]]
    number = {r["artifact"]: i for i, r in enumerate(rows, 1)}  # the table's "#" column
    for r in scored:
        if r.get(f"{metric}_ci95_low") is not None:  # the dev split's sampling error: which gaps are real
            y = 100 * r["score"]
            ax.errorbar(r["latency_ms_p50"], y, yerr=[[y - 100 * r[f"{metric}_ci95_low"]],
                                                      [100 * r[f"{metric}_ci95_high"] - y]],
                        fmt="none", ecolor="#999", elinewidth=.8, capsize=2, zorder=1)
        ax.scatter(r["latency_ms_p50"], 100 * r["score"], s=8 + 2.2 * (r["size_mb"] or 0),
                   color=format_color(r["format"]), alpha=.75,
                   edgecolors="black" if r["artifact"] in front else "none", linewidths=1.2, zorder=3)
        # Names for the front and the teacher; the rest (often a dense cluster) by table row.
        named = r["artifact"] in front or r["artifact"] == C.TEACHER
        label = f"{number[r['artifact']]} {r['artifact']}" if named else str(number[r["artifact"]])
        ax.annotate(label, (r["latency_ms_p50"], 100 * r["score"]), fontsize=7 if named else 6.5,
                    color="black" if named else "#555", xytext=(4, 4), textcoords="offset points")
    pts = [(r["latency_ms_p50"], 100 * r["score"]) for r in scored if r["artifact"] in front]
    if pts:
        xs, ys = zip(*pts)
        ax.step(xs, ys, where="post", color="black", linestyle="--", linewidth=1, label="Pareto front", zorder=2)
    for r in rows:
        if r["reference"] and r["latency_ms_p50"]:
            ax.axvline(r["latency_ms_p50"], color="#999", linestyle=":", linewidth=1.2)
            ax.annotate(f"{r['artifact']} (random weights)", (r["latency_ms_p50"], 0.02),
                        xycoords=("data", "axes fraction"), rotation=90, fontsize=7, color="#666",
                        xytext=(-10, 0), textcoords="offset points")
    for fmt in dict.fromkeys(r["format"] for r in scored):  # a legend entry per format shown
        ax.scatter([], [], color=format_color(fmt), label=fmt, s=30)
    ax.set_xscale("log")
    ax.set_xlabel(f"p50 latency, ms (batch 1, seq 128, {target}; log scale)")
    ax.set_ylabel(f"dev {metric_label}, %")
    ax.grid(True, which="both", alpha=.3)
    ax.legend(fontsize=7, loc="lower right")
    return _svg(fig)


def sweep_svg(comp: dict, target: str, kind: str) -> str | None:
    data = C.sweep(comp, target, kind)
    if not data:
        return None
    plt = _mpl()
    from cycler import cycler

    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    # 10 colours, solid then dashed: up to 20 distinguishable curves
    ax.set_prop_cycle(cycler(linestyle=["-", "--"]) * cycler(color=plt.get_cmap("tab10").colors))
    formats = {r["artifact"]: (r.get("format"), r["artifact"] in comp.get("references", []))
               for r in comp["records"]}
    for name, pts in data.items():
        xs, ys = zip(*pts)
        fmt, ref = formats.get(name, (None, False))
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, linestyle=":" if ref else "-",
                color="#999" if ref else None, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({x for pts in data.values() for x, _ in pts}))
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax.set_yscale("log")
    if kind == "seq":
        ax.set_xlabel("sequence length (tokens), batch 1")
        ax.set_ylabel(f"p50 latency, ms ({target}; log scale)")
    else:
        ax.set_xlabel("batch size, seq 128")
        ax.set_ylabel(f"throughput, sequences/s ({target}; log scale)")
    ax.grid(True, which="both", alpha=.3)
    ax.legend(fontsize=6.5, ncol=2, loc="upper left" if kind == "seq" else "lower right")
    return _svg(fig)


def _table(comp: dict, target: str) -> str:
    rows = C.table_rows(comp, target)
    front = set(C.pareto_front(rows))
    metric, label = primary_metric(comp["records"])
    # the task's other metrics beside the main one (F1 of binary pairs, macro-F1); a tagger's F1 is the main one
    extra = [m for m in ("f1", "macro_f1") if m != metric and has_metric(rows, m)]
    val = has_validation(rows, metric)  # the split that chose, after the dev columns that report
    head = ["#", "artifact", "format", "precision", "size MiB", "params", metric_header(rows, metric, label),
            "Δ vs teacher (points)", *[metric_header(rows, m, METRIC_LABELS[m]) for m in extra],
            *([validation_header(rows, metric, label)] if val else []),
            "p50 ms", "p90 ms", "p99 ms", "real-length p50 / p99 ms (batch 1)", "throughput seq/s (32×128)",
            "dev stream sent/s (real lengths)",
            "speedup vs teacher", "peak RSS MiB"]
    if target == "gpu":
        head.append("peak GPU MiB")
    out = ['<div class="scroll"><table><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, x in enumerate(rows, 1):
        cls = "ref" if x["reference"] or x["baseline"] else ("front" if x["artifact"] in front else "")
        name = _e(x["artifact"]) + (" ★" if x["artifact"] in front else "") + ("" if x["same_run"] else " †")
        chip = f'<span class="chip" style="background:{format_color(x["format"])}"></span>'
        cells = [f"<td>{i}</td>", f'<td class="l">{chip}{name}</td>', f'<td class="l">{_e(x["format"])}</td>',
                 f'<td class="l">{_e(x["precision"])}</td>', f"<td>{_fmt(x['size_mb'], 1)}</td>",
                 f"<td>{_fmt(x['num_params'])}</td>",
                 f"<td>{'n/a (random weights)' if x['reference'] else _pct_ci(x, metric)}</td>",
                 f"<td>{'–' if x['score_delta_pts'] is None else format(x['score_delta_pts'], '+.2f')}</td>",
                 *[f"<td>{_pct_ci(x, m)}</td>" for m in extra],
                 *([f"<td>{validation_cell(x, metric)}</td>"] if val else []),
                 f"<td>{_fmt(x['latency_ms_p50'])}</td>", f"<td>{_fmt(x['latency_ms_p90'])}</td>",
                 f"<td>{_fmt(x['latency_ms_p99'])}</td>", f"<td>{C.real_length_cell(x)}</td>",
                 f"<td>{_fmt(x['throughput_seq_per_s'], 1)}</td>",
                 f"<td>{_fmt(x['dev_stream_seq_per_s'], 1)}</td>",
                 f"<td>{C._x(x['speedup_vs_teacher'])}</td>", f"<td>{_fmt(x['peak_mem_mb'], 0)}</td>"]
        if target == "gpu":
            cells.append(f"<td>{_fmt(x['peak_gpu_mem_mb'], 0)}</td>")
        out.append(f'<tr class="{cls}">' + "".join(cells) + "</tr>")
    out.append("</table></div>")
    return "\n".join(out)


def _hashes(comp: dict) -> str:
    val = any(r.get("validation_sha256") for r in comp["records"])  # reports from before the split: no column
    out = ["<table><tr><th>artifact</th><th>target</th><th>stage</th><th>weights sha256 (first file)</th>"
           "<th>dev data sha256</th>" + ("<th>validation data sha256</th>" if val else "") + "</tr>"]
    for r in comp["records"]:
        if r["status"] == "ok":
            out.append(f'<tr><td class="l">{_e(r["artifact"])}</td><td class="l">{_e(r["target"])}</td>'
                       f'<td class="l">{_e(r.get("stage"))}</td><td class="l"><code>{_e(r.get("artifact_sha256"))}'
                       f'</code></td><td class="l"><code>{_e(r.get("data_sha256"))}</code></td>'
                       + (f'<td class="l"><code>{_e(r.get("validation_sha256"))}</code></td>' if val else "")
                       + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _environment(env: dict) -> str:
    flags = ", ".join(k for k, v in env.get("cpu_flags", {}).items() if v) or "none of interest"
    libs = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items() if v)
    engines = env.get("matrix_engines")
    if engines is None and env.get("cpu_flags"):  # reports written before the field existed
        from compress.core.env import matrix_engines

        engines = matrix_engines(env["cpu_flags"])
    engines_text = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in (engines or {}).items()) or "unknown"
    items = [("CPU", f"{env.get('cpu_model')} ({env.get('cpu_count')} logical CPUs)"), ("CPU flags", flags),
             ("matrix engines", engines_text),
             ("GPU", env.get("gpu_name") or "none (CUDA not available)"), ("threads", env.get("threads")),
             ("OS", env.get("os")), ("libraries", libs)]
    return "<table>" + "".join(f'<tr><th>{_e(k)}</th><td class="w">{_e(v)}</td></tr>' for k, v in items) + "</table>"


def render_html(comp: dict) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>BERT compression: comparison of all artifacts</title>", f"<style>{CSS}</style></head><body>",
             "<h1>Comparison of all artifacts</h1>",
             f'<p class="note">Stages: {_e(", ".join(comp["stages"]))}. Latency (batch 1, seq 128) and throughput '
             "(batch 32, seq 128) come from the <code>benchmark</code> stage, which measures every artifact one "
             "after another in one run, so any two rows compare; accuracy, size and peak memory come from the "
             "stage that built each artifact. ★ marks the latency/accuracy Pareto front (no artifact is both "
             "faster and more accurate); † a row whose latency comes from its own stage's run. Reference rows "
             "have random weights: latency and memory only. The production choice is in "
             "<code>reports/selection.md</code>. Generated from <code>reports/comparison.json</code>."
             + (" " + _e(CI_NOTE) if has_interval(comp["records"]) else "")
             + (" " + _e(VALIDATION_NOTE) if has_validation(comp["records"], primary_metric(comp["records"])[0])
                else "") + "</p>"]
    for target in C.targets_measured(comp):
        parts += [f"<h2>{target.upper()}</h2>", _table(comp, target), '<div class="plots">',
                  f"<figure>{accuracy_latency_svg(comp, target)}<figcaption>Accuracy against latency on {target}; "
                  "point area is proportional to the weight size; outlined points and the dashed line are the "
                  "Pareto front; numbers are the table's rows"
                  + ("; vertical bars are the accuracy's 95% bootstrap intervals" if has_interval(comp["records"])
                     else "") + ".</figcaption></figure>"]
        for kind, caption in (("seq", "Latency against sequence length (batch 1)"),
                              ("batch", "Throughput against batch size (seq 128)")):
            svg = sweep_svg(comp, target, kind)
            if svg:
                parts.append(f"<figure>{svg}<figcaption>{caption}, {target}.</figcaption></figure>")
        parts.append("</div>")
    missing = [r for r in comp["records"] if r["status"] != "ok"]
    if missing:
        parts += ["<h2>Not measured</h2>", "<table><tr><th>artifact</th><th>target</th><th>status</th>"
                  "<th>reason</th></tr>"]
        parts += [f'<tr><td class="l">{_e(r["artifact"])}</td><td class="l">{_e(r["target"])}</td>'
                  f'<td class="l">{_e(r["status"])}</td><td class="l">{_e(r["reason"])}</td></tr>' for r in missing]
        parts.append("</table>")
    parts += gpu_check.html_section(comp, _e)
    parts += ["<h2>Environment</h2>", _environment(comp.get("environment", {})),
              "<h2>What each number belongs to</h2>", _hashes(comp), "</body></html>", ""]
    return "\n".join(parts)
