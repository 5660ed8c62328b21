"""Which distillation lever buys how much: transfer-set augmentation, intermediate-layer
terms, training length. Each setting builds the teacher-logits cache (with its
augmentation) and distils a student with the pipeline's own verbs, one after another in
one process, from one teacher; the label-only control is trained once per distinct budget.
Each student is scored on the validation split (what a choice between settings should
read) and on dev (what the reports print), side by side.

    python benchmarks/distill_levers.py --prepared data/prepared --teacher models/teacher \
        --setting "teacher_logits.augment.size=0" \
        --setting "teacher_logits.augment.size=4" \
        --setting "teacher_logits.augment.size=4,distill.loss.hidden_mse_weight=1" \
        --json reports/mrpc/distill_levers.json

Settings are comma-separated dotted keys over the `teacher_logits` and `distill` sections
of params.yaml (with the active task's presets applied first).
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

import yaml  # noqa: E402

from compress.core.config import load_params, section  # noqa: E402
from compress.data.prepare import Prepared  # noqa: E402
from compress.training.distill import CacheConfig, DistillConfig, cache_teacher_outputs, distill  # noqa: E402


def parse_value(value: str):
    """A command-line value: int, float (YAML 1.1 would read 5e-5 as a string), else YAML."""
    value = value.strip()
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return yaml.safe_load(value)  # lists, null, true/false


def dev_metrics(model_dir: Path, prepared: Prepared, max_length: int = 128) -> dict:
    """A saved model's task metrics on the dev split: reported beside the validation
    figures the stages chose on, never used to choose."""
    from compress.data.tokens import encode
    from compress.measure.metrics import task_metrics
    from compress.training.models import load_saved
    from compress.training.train import predict_logits

    model, tokenizer = load_saved(model_dir)
    dev = encode(tokenizer, prepared.split("dev"), max_length)
    return task_metrics(prepared.task, dev, predict_logits(model, dev))


def parse_setting(text: str) -> dict:
    out: dict = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_value(value)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepared", default="data/prepared")
    ap.add_argument("--teacher", default="models/teacher")
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--setting", action="append", required=True)
    ap.add_argument("--no-control", action="store_true", help="skip the label-only control")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    prepared = Prepared.open(args.prepared)
    base = load_params(args.params)
    base["prepare"] = {**(base.get("prepare") or {}), "task": prepared.task.name}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for text in args.setting:
            # the setting wins over the task's preset (a preset key would otherwise win over it)
            setting = parse_setting(text)
            if set(setting) - {"teacher_logits", "distill"}:
                ap.error(f"--setting {text!r}: keys must start with teacher_logits. or distill.")
            ccfg = section(base, "teacher_logits", CacheConfig, setting.get("teacher_logits"))
            dcfg = section(base, "distill", DistillConfig, setting.get("distill"))
            t0 = time.perf_counter()
            meta = cache_teacher_outputs(Path(args.teacher), prepared, tmp / "cache", ccfg)
            cache_s = time.perf_counter() - t0
            summary = distill(dcfg, Path(args.teacher), tmp / "cache", prepared, tmp / "student",
                              tmp / "curves", tmp / "control", tmp / "control_curves",
                              train_control=not args.no_control)
            st = summary["student"]
            row = {"setting": text, "transfer_rows": summary["transfer_rows"], "steps": st["steps"],
                   "cache_s": round(cache_s, 1), "student_train_s": st["train_wall_s"],
                   "student": {"validation": st["final_validation"], "dev": dev_metrics(tmp / "student", prepared)}}
            if "control" in summary:
                row["control"] = {"validation": summary["control"]["final_validation"],
                                  "dev": dev_metrics(tmp / "control", prepared)}
                row["control_train_s"] = summary["control"]["train_wall_s"]
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"task": prepared.task.name, "teacher": args.teacher,
                                               "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
