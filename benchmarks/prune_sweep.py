"""Pruning recipe sweep: each setting prunes the same student with the pipeline's own verb
(compress.training.prune.prune_student) and is scored on the validation split (what the
choice reads) and on dev (what the reports print), side by side, one after another in one
process.

    python benchmarks/prune_sweep.py --json reports/prune_sweep.json \
        --setting "importance_rows=2048" --setting "importance_rows=8192" \
        --setting "importance_rows=8192,recover=true"

Settings are comma-separated dotted keys over the `prune` section of params.yaml (with the
active task's preset applied first), e.g. `recovery.lr=1e-4`. The inputs are what
`dvc repro distill` left: data/prepared, models/student and the teacher-logits cache.
`best_on_validation` names the setting with the highest validation primary metric (the
earliest on a tie); dev never takes part in it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.distill_levers import best_on_validation, dev_metrics, parse_setting, write_record  # noqa: E402
from compress.core.config import load_params, section  # noqa: E402
from compress.data.prepare import Prepared  # noqa: E402
from compress.training.prune import PruneConfig, prune_student  # noqa: E402


def sweep(prepared_dir: Path, student: Path, cache: Path, base: dict, settings: list[str], work: Path,
          eval_max_length: int = 128) -> dict:
    """Prune `student` once per setting (each from the same saved student); returns the
    sweep's record: a row per setting and the one best on validation."""
    prepared = Prepared.open(prepared_dir)
    metric = prepared.task.primary_metric
    base = {**base, "prepare": {**(base.get("prepare") or {}), "task": prepared.task.name}}
    rows = []
    for i, text in enumerate(settings):
        # the setting wins over the task's preset, which wins over the base keys
        cfg = section(base, "prune", PruneConfig, parse_setting(text) if text else None)
        out = work / str(i)
        t0 = time.perf_counter()
        summary = prune_student(cfg, student, cache, prepared, out / "model", out / "plots", eval_max_length)
        p = summary["pruned"]
        row = {"setting": text or "(params.yaml)", "heads_removed": p["heads_removed"],
               "heads_total": p["heads_total"], "heads_per_layer": p["heads_per_layer"],
               "intermediate_size": p["intermediate_size"], "params": p["params"],
               "wall_s": round(time.perf_counter() - t0, 1),
               "validation_before_pruning": summary["before"]["validation"],
               "validation_before_recovery": p["validation_before_recovery"],
               "validation": summary["after"]["validation"],
               "dev": dev_metrics(out / "model", prepared, eval_max_length)}
        if "steps" in summary["recovery"]:
            row["recovery_steps"] = summary["recovery"]["steps"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"task": prepared.task.name, "student": str(student), "metric": metric, "chosen_on": "validation",
            "best_on_validation": best_on_validation(rows, lambda r: r["validation"][metric]), "results": rows}


def markdown(record: dict) -> str:
    """One table: validation (chooses) and dev (reports) for each setting."""
    m = record["metric"]

    def pct(d):
        return f"{100 * d[m]:.2f}"

    lines = [f"# Pruning sweep ({record['task']}, {m} in %; chosen on validation, dev only reports)", "",
             "| setting | heads removed | student val | before recovery val | val | dev | wall s |",
             "|---|---|---|---|---|---|---|"]
    for r in record["results"]:
        star = " **(best on validation)**" if r["setting"] == record["best_on_validation"] else ""
        lines.append(f"| `{r['setting']}`{star} | {r['heads_removed']}/{r['heads_total']} | "
                     f"{pct(r['validation_before_pruning'])} | {pct(r['validation_before_recovery'])} | "
                     f"{pct(r['validation'])} | {pct(r['dev'])} | {r['wall_s']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepared", default="data/prepared")
    ap.add_argument("--student", default="models/student")
    ap.add_argument("--cache", default="data/teacher_logits")
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--setting", action="append", required=True,
                    help='dotted prune keys, e.g. "importance_rows=2048,recover=true"; "" = params.yaml as is')
    ap.add_argument("--json", help="write the record here and its table beside it (.md)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        record = sweep(Path(args.prepared), Path(args.student), Path(args.cache), load_params(args.params),
                       args.setting, Path(tmp))
    write_record(args.json, record, markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
