"""Stage `select`: apply the production policy from params to reports/comparison.json,
write reports/selection.json with the choice, the reasons and every rejected candidate
with the rule it failed, and promote the chosen artifact to models/production/.

The choice is made on the validation split; reports/selection.md says so and quotes the
choice's ratios to the teacher on validation (what chose) and on dev (what to expect)."""
from compress.core.config import section
from compress.core.io import atomic_write_json, atomic_write_text
from compress.report.schema import read_report
from compress.report.select import CHOSEN_ON, FLOOR_METRICS, RANKINGS, REPORTED_ON, SelectPolicy, promote, select

from .common import MODELS, REPORTS, run


def render(sel: dict) -> str:
    p = sel["policy"]
    metrics, at = p.get("floor_metrics", ["accuracy"]), p.get("floor_at", "point")
    # a floor metric the teacher's validation figures lack (F1 on a single-sentence task) was not checked
    teacher = sel.get(f"teacher_{CHOSEN_ON}") or {}
    unchecked = [m for m in metrics if teacher and m not in teacher]
    lines = ["# Production selection", "",
             f"Policy: target `{p['target']}`, " + " and ".join(FLOOR_METRICS[m] for m in metrics)
             + f" >= {p['accuracy_floor_vs_teacher']:.1%} of the teacher's on the {CHOSEN_ON} split "
             + f"(floor_metrics [{', '.join(metrics)}], "
             + f"floor_at {at}: the artifact's "
             + ("95% interval low end" if at == "lower_bound" else "measured value") + " over the teacher's"
             + "".join(f"; {FLOOR_METRICS[m]} not checked, the task does not report it" for m in unchecked) + ")"
             + (f", p50 <= {p['max_latency_ms']} ms" if p["max_latency_ms"] else "")
             + (f", size <= {p['max_size_mb']} MiB" if p["max_size_mb"] else "")
             + ("; the qualifying artifact with the highest dev-split throughput at real lengths wins "
                "(rank_by dev_stream_throughput)." if p.get("rank_by") == "dev_stream_throughput"
                else f"; the fastest qualifying artifact ({RANKINGS[p.get('rank_by', 'p50_1x128')][2]}) wins."), ""]
    lines += [split_line(sel), ""]
    lines.append(f"**Chosen: `{sel['chosen']}`**" if sel["chosen"] else "**Nothing qualifies.**")
    lines += [""] + [f"- {r}" for r in sel["reasons"]]
    lines += ratios_table(sel)
    if sel.get("promoted"):
        lines += ["", "Promoted to `models/production/` (sha256 of every file in `artifact.json`, "
                      "model card in `MODEL_CARD.md`)."]
    lines += ["", "| rejected | rule | detail |", "|---|---|---|"]
    lines += [f"| {r['artifact']} | {r['rule']} | {r['detail']} |" for r in sel["rejected"]]
    lines += ["", f"Qualified, best first: {', '.join(sel['qualified']) or 'none'}.", ""]
    return "\n".join(lines)


def split_line(sel: dict) -> str:
    return (f"Chosen on the **{sel.get('chosen_on', CHOSEN_ON)}** split: every floor and filter above reads "
            f"validation figures only. The {REPORTED_ON} split played no part in the choice; its figures are "
            "what a user can expect (the comparison tables and the model card lead with them).")


def ratios_table(sel: dict) -> list[str]:
    """The choice's share of the teacher's metrics on both splits, validation's first."""
    ratios = sel.get("ratios_vs_teacher") or {}
    chose, report = ratios.get(CHOSEN_ON) or {}, ratios.get(REPORTED_ON) or {}
    if not chose:
        return []
    at = " (interval low end)" if sel["policy"].get("floor_at") == "lower_bound" else ""

    def pct(v):
        return "–" if v is None else f"{v:.2%}"

    return ["", f"| share of the teacher's{at} | {CHOSEN_ON} (chose) | {REPORTED_ON} (to expect) |", "|---|---|---|",
            *[f"| {FLOOR_METRICS[m]} | {pct(v)} | {pct(report.get(m))} |" for m, v in chose.items()]]


def main(params: dict) -> None:
    policy = section(params, "select", SelectPolicy)
    comparison = read_report(REPORTS / "comparison.json")
    sel = select(comparison, policy)
    sel["promoted"] = promote(sel, comparison.get("environment", {}), MODELS / "production")
    if sel["promoted"] is None:  # DVC wants the output to exist: an empty folder says "nothing"
        (MODELS / "production").mkdir(parents=True, exist_ok=True)
    # dvc metrics read numbers: the headline of the choice, flat
    rec = sel["record"] or {}
    validation = rec.get("validation_metrics") or {}
    sel["summary"] = {"chosen": sel["chosen"], "chosen_on": sel["chosen_on"], "accuracy": rec.get("accuracy"),
                      # the intervals and F1 where the task has them (dvc metrics read numbers, not nulls)
                      **{k: rec[k] for k in ("accuracy_ci95_low", "accuracy_ci95_high", "f1", "f1_ci95_low",
                                             "f1_ci95_high", "macro_f1", "macro_f1_ci95_low",
                                             "macro_f1_ci95_high") if rec.get(k) is not None},
                      # the figures that chose (validation), beside the dev ones that report
                      **{f"validation_{k}": v for k, v in validation.items() if v is not None},
                      "latency_ms_p50": rec.get("latency_ms_p50"), "size_mb": rec.get("size_mb"),
                      "dev_stream_seq_per_s": rec.get("dev_stream_seq_per_s"),
                      **{f"speedup_vs_{k}": v for k, v in sel["speedup_vs"].items()}}
    atomic_write_json(REPORTS / "selection.json", sel)
    atomic_write_text(REPORTS / "selection.md", render(sel))
    print(render(sel))


if __name__ == "__main__":
    run(main)
