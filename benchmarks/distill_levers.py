"""Which distillation lever buys how much: transfer-set augmentation, intermediate-layer
terms, training length. Each setting builds the teacher-logits cache (with its
augmentation) and distils a student with the pipeline's own verbs, one after another in
one process, from one teacher; the label-only control is trained once per distinct budget
(its training does not read the loss terms or the augmented rows).
Each student is scored on the validation split (what a choice between settings should
read) and on dev (what the reports print), side by side.

    python benchmarks/distill_levers.py --prepared data/prepared --teacher models/teacher \
        --setting "teacher_logits.augment.size=0" \
        --setting "teacher_logits.augment.size=4" \
        --setting "teacher_logits.augment.kinds=[swap,cross_pair]" \
        --setting "distill.loss.hidden_mse_weight=1" \
        --json reports/mrpc/distill_levers.json

Settings are comma-separated dotted keys over the `teacher_logits` and `distill` sections
of params.yaml (with the active task's presets applied first; the setting wins); commas
inside brackets belong to a list value; "" is params.yaml as it is. `best_on_validation`
names the setting whose student scores highest on validation (the earliest on a tie).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
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


def split_setting(text: str) -> list[tuple[str, str]]:
    """`a=1,b.c=[x,y]` -> [("a", "1"), ("b.c", "[x,y]")]: commas inside brackets belong to
    the value (a list of augmentation kinds), the others separate keys."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    out = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"setting {text!r}: {part!r} is not key=value")
        out.append((key.strip(), value))
    return out


def parse_setting(text: str) -> dict:
    """Dotted keys into nested mappings: `distill.loss.hidden_mse_weight=1`."""
    out: dict = {}
    for key, value in split_setting(text):
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_value(value)
    return out


def best_on_validation(rows: list[dict], score) -> str:
    """The setting of the row with the highest `score(row)` (a validation figure; the
    earliest on a tie): what every sweep here names, dev never taking part."""
    return rows[max(range(len(rows)), key=lambda i: (score(rows[i]), -i))]["setting"]


def write_record(path: str | None, record: dict, table: str) -> None:
    """Print the sweep's table; with --json, write the record there and the table beside it (.md)."""
    print(table)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        path.with_suffix(".md").write_text(table)


def control_key(dcfg: DistillConfig, ccfg: CacheConfig) -> str:
    """What the label-only control depends on: its budget, the student's shape and the
    length its gold rows are encoded at, not the loss terms or the augmentation."""
    return json.dumps([asdict(dcfg.train), dcfg.student_layers, dcfg.intermediate_size,
                       dcfg.freeze_word_embeddings, ccfg.max_length], sort_keys=True)


def levers(prepared_dir: Path, teacher: Path, base: dict, settings: list[str], work: Path,
           train_control: bool = True) -> dict:
    """Distil one student per setting (a teacher-logits cache per distinct cache config) and train the
    label-only control once per distinct budget; returns the record: a row per setting and
    the one best on validation (dev never takes part in it)."""
    prepared = Prepared.open(prepared_dir)
    metric = prepared.task.primary_metric
    base = {**base, "prepare": {**(base.get("prepare") or {}), "task": prepared.task.name}}
    rows, controls, caches = [], {}, {}
    for i, text in enumerate(settings):
        # the setting wins over the task's preset (a preset key would otherwise win over it)
        setting = parse_setting(text) if text else {}
        if set(setting) - {"teacher_logits", "distill"}:
            raise ValueError(f"setting {text!r}: keys must start with teacher_logits. or distill.")
        ccfg = section(base, "teacher_logits", CacheConfig, setting.get("teacher_logits"))
        dcfg = section(base, "distill", DistillConfig, setting.get("distill"))
        key = control_key(dcfg, ccfg)
        need_control = train_control and key not in controls
        out = work / str(i)
        # settings that differ only in the distill section label the same transfer set: the
        # teacher pass is built once per cache config (minutes on SST-2's 60k rows) and shared
        cache_cfg = json.dumps(asdict(ccfg), sort_keys=True)
        if cache_cfg not in caches:
            t0 = time.perf_counter()
            cache_teacher_outputs(teacher, prepared, out / "cache", ccfg)
            caches[cache_cfg] = {"dir": out / "cache", "setting": text or "(params.yaml)",
                                 "cache_s": round(time.perf_counter() - t0, 1)}
        cache = caches[cache_cfg]
        shared = cache["dir"] != out / "cache"
        summary = distill(dcfg, teacher, cache["dir"], prepared, out / "student", out / "curves",
                          out / "control", out / "control_curves", train_control=need_control)
        st = summary["student"]
        if need_control:
            controls[key] = {"setting": text or "(params.yaml)",
                             "validation": summary["control"]["final_validation"],
                             "dev": dev_metrics(out / "control", prepared),
                             "train_s": summary["control"]["train_wall_s"]}
        row = {"setting": text or "(params.yaml)", "transfer_rows": summary["transfer_rows"],
               "steps": st["steps"], "cache_s": 0.0 if shared else cache["cache_s"],
               "cache_from": cache["setting"], "student_train_s": st["train_wall_s"],
               "intermediate_terms": summary["intermediate_terms"],
               "student": {"validation": st["final_validation"], "dev": dev_metrics(out / "student", prepared)}}
        if key in controls:  # the control trained for this budget (here or by an earlier setting)
            row["control"] = controls[key]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"task": prepared.task.name, "teacher": str(teacher), "metric": metric, "chosen_on": "validation",
            "best_on_validation": best_on_validation(rows, lambda r: r["student"]["validation"][metric]),
            "results": rows}


def cache_cell(row: dict) -> str:
    """The teacher pass's wall, or whose cache the row shared (older records lack cache_from)."""
    origin = row.get("cache_from", row["setting"])
    return str(row["cache_s"]) if origin == row["setting"] else f"shared ({origin})"


def markdown(record: dict) -> str:
    """One table: the student and its control on validation (chooses) and dev (reports)."""
    m = record["metric"]

    def pct(d, k=m):
        return f"{100 * d[k]:.2f}" if d.get(k) is not None else "-"

    extra = [k for k in ("f1", "macro_f1") if k != m and record["results"]
             and record["results"][0]["student"]["dev"].get(k) is not None][:1]
    head = f"| setting | transfer rows | steps | val {m} | dev {m} |" + "".join(f" dev {k} |" for k in extra)
    lines = [f"# Distillation levers ({record['task']}, in %; chosen on validation, dev only reports)", "",
             head + f" control val {m} | control dev {m} | student - control (dev) | cache s | train s |",
             "|---" * (10 + len(extra)) + "|"]
    for r in record["results"]:
        st, c = r["student"], r.get("control")
        star = " **(best on validation)**" if r["setting"] == record["best_on_validation"] else ""
        gap = f"{100 * (st['dev'][m] - c['dev'][m]):+.2f}" if c else "-"
        lines.append(f"| `{r['setting']}`{star} | {r['transfer_rows']} | {r['steps']} | {pct(st['validation'])} | "
                     f"{pct(st['dev'])} |" + "".join(f" {pct(st['dev'], k)} |" for k in extra)
                     + f" {pct(c['validation']) if c else '-'} | {pct(c['dev']) if c else '-'} | {gap} | "
                     f"{cache_cell(r)} | {r['student_train_s']} |")
    lines += ["", "The control is the same student trained on the gold labels only, once per training budget "
              "(the row that trained it is named in the JSON). Settings that differ only in the distill "
              "section share the teacher-logits cache of the first of them (its cache s; theirs say whose)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepared", default="data/prepared")
    ap.add_argument("--teacher", default="models/teacher")
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--setting", action="append", required=True,
                    help='dotted keys, e.g. "teacher_logits.augment.kinds=[swap,cross_pair]"; "" = params.yaml as is')
    ap.add_argument("--no-control", action="store_true", help="skip the label-only control")
    ap.add_argument("--json", help="write the record here and its table beside it (.md)")
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            record = levers(Path(args.prepared), Path(args.teacher), load_params(args.params), args.setting,
                            Path(tmp), train_control=not args.no_control)
    except ValueError as e:
        ap.error(str(e))
    write_record(args.json, record, markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
