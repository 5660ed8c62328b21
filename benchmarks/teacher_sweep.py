"""Teacher fine-tuning sweep on one task: validation and dev accuracy/F1 and wall time per setting.

Each setting fine-tunes the packaged teacher with the pipeline's own code (compress.training.teacher)
on a task prepared with the pipeline's prepare verb, one after another in one process.
Pick a setting by its validation figures (carved from the training rows, as the stages
choose); the dev figures are what the pipeline's reports would print.

    python benchmarks/teacher_sweep.py --task mrpc --source ../shared/data/mrpc \
        --setting lr=5e-5,epochs=5 --setting lr=1e-4,max_steps=600 --json reports/mrpc/teacher_sweep.json

A setting is comma-separated `key=value` over teacher.train keys (lr, epochs, max_steps,
warmup_ratio, batch_size, ...) plus `max_length`, set over params.yaml's `teacher` section
with the task's preset applied (the setting wins over the preset). The data is prepared as
the pipeline prepares it: params.yaml's `prepare` section with the task's preset and
`--source` (so the validation split is the pipeline's). "" is the preset as it is; `seed=N`
sweeps the fine-tuning seed. `best_on_validation` names the setting with the highest
validation primary metric (the earliest on a tie); --json also writes its table (.md).
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

from benchmarks.distill_levers import (best_on_validation, dev_metrics, parse_value, split_setting,  # noqa: E402
                                      write_record)
from compress.cli import prepare_config  # noqa: E402
from compress.core.config import load_params, section  # noqa: E402
from compress.data.prepare import Prepared, prepare  # noqa: E402
from compress.training.teacher import TeacherConfig, build_teacher  # noqa: E402


def parse_setting(text: str) -> dict:
    """`lr=5e-5,max_steps=575` -> {"lr": 5e-05, "max_steps": 575} (teacher.train keys)."""
    return {key: parse_value(value) for key, value in split_setting(text)} if text else {}


def markdown(record: dict) -> str:
    """One table: validation (chooses) and dev (reports) for each setting."""
    m = record["metric"]
    keys = [m] + [k for k in ("f1", "macro_f1") if k != m and record["results"]
                  and record["results"][0]["dev"].get(k) is not None][:1]
    lines = [f"# Teacher sweep ({record['task']}, {record['model']}; in %; chosen on validation, dev only reports)",
             "", "| setting | steps | " + " | ".join(f"val {k}" for k in keys) + " | "
             + " | ".join(f"dev {k}" for k in keys) + " | train s |", "|---" * (3 + 2 * len(keys)) + "|"]
    for r in record["results"]:
        star = " **(best on validation)**" if r["setting"] == record["best_on_validation"] else ""
        lines.append(f"| `{r['setting']}`{star} | {r['steps']} | "
                     + " | ".join(f"{100 * r['validation'][k]:.2f}" for k in keys) + " | "
                     + " | ".join(f"{100 * r['dev'][k]:.2f}" for k in keys) + f" | {r['train_wall_s']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="mrpc")
    ap.add_argument("--source", default="../shared/data/mrpc")
    ap.add_argument("--model", default=None, help="default: params.yaml's teacher.model")
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--setting", action="append", required=True)
    ap.add_argument("--json")
    ap.add_argument("--keep", help="save each setting's teacher under KEEP/<index>")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pcfg = prepare_config(args.params, args.task, args.source)
        prepare(pcfg, tmp / "prepared")
        if args.keep:
            prepare(pcfg, Path(args.keep) / "prepared")
        prepared = Prepared.open(tmp / "prepared")
        metric = prepared.task.primary_metric
        params = load_params(args.params)
        params["prepare"] = {**(params.get("prepare") or {}), "task": args.task}
        for text in args.setting:
            s = parse_setting(text)
            length = {"max_length": s.pop("max_length")} if "max_length" in s else {}
            override = {"train": {"eval_every_steps": 0, **s}, "seeds": None, **length}
            if args.model:
                override["model"] = args.model
            cfg = section(params, "teacher", TeacherConfig, override)
            max_length = cfg.max_length
            t0 = time.perf_counter()
            out = Path(args.keep) / str(len(results)) if args.keep else tmp / "teacher"
            summary = build_teacher(cfg, prepared, out, tmp / "curves")
            tr = summary["training"]
            row = {"setting": text or "(params.yaml)", "max_length": max_length, **s, "steps": tr["steps"],
                   "epochs": tr["epochs"], "train_wall_s": tr["train_wall_s"],
                   "stage_s": round(time.perf_counter() - t0, 1), "validation": tr["final_validation"],
                   "dev": dev_metrics(out, prepared)}
            results.append(row)
            print(json.dumps(row), flush=True)
    record = {"task": args.task, "model": cfg.model, "metric": metric, "chosen_on": "validation",
              "best_on_validation": best_on_validation(results, lambda r: r["validation"][metric]),
              "results": results}
    write_record(args.json, record, markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
