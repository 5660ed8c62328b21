"""The `compress` command. Stages run through `dvc repro`; this command is for using and
inspecting what they build."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compress.core.errors import UserError

# Heavy libraries (torch, transformers, the runtimes) are imported by the commands that use
# them, after their arguments are checked: a bad path is refused in a fraction of a second.


def artifact_at(path: Path, name: str | None = None):
    """compress.predict.artifact_at, imported when a command needs it."""
    from compress.predict import artifact_at as at

    return at(path, name)


def _artifact_dir(path: str) -> Path:
    if not Path(path).is_dir():
        raise UserError(f"{path}: no such artifact directory (the production artifact is written by "
                        "`dvc repro select`; any directory a stage wrote under models/ works too)")
    return Path(path)


def _points(text: str) -> list[int]:
    try:
        b, s = text.lower().split("x")
        return [int(b), int(s)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"point '{text}' must be BATCHxSEQ, e.g. 1x128") from None


def cmd_env(args) -> None:
    from compress.core.env import environment

    print(json.dumps(environment(all_backends=True), indent=2))


def prepare_config(params_path: str, task: str | None, source: str | None, sets: list[str] | None = None):
    """The prepare section of params (the `task` preset applied, default prepare.task) with
    `source` and `KEY=VALUE` settings over it."""
    import yaml

    from compress.core.config import ConfigError, build, load_params, resolve_preset, task_names

    params = load_params(params_path)
    prep = dict(params.get("prepare") or {})
    task = task or prep.get("task") or ""
    prep["task"] = task
    params["prepare"] = prep
    data = resolve_preset(prep, "prepare", task, task_names(params))
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: write KEY=VALUE, e.g. --set dev=null")
        data[key] = yaml.safe_load(value)
    if source:
        data["source"] = source
    from compress.data.prepare import PrepareConfig

    return build(PrepareConfig, data, "prepare")


def cmd_validate_data(args) -> None:
    from compress.data.prepare import label_set, read_split

    cfg = prepare_config(args.params, args.task, args.source, args.set)
    task, facts = label_set(cfg)
    print(f"task {task.name} ({task.kind}): {task.num_labels} labels: {', '.join(task.labels[:20])}"
          f"{' ...' if task.num_labels > 20 else ''}")
    for split in ("train", "dev", "test"):
        if getattr(cfg, split) is None:
            print(f"{split}: none" + (f" (prepare carves {cfg.dev_fraction:.0%} of train)" if split == "dev" else ""))
            continue
        n = sum(1 for _ in read_split(cfg, split, task))
        print(f"{split}: {n} rows OK")
    cap = f", at most {cfg.max_validation_rows} rows" if cfg.max_validation_rows is not None else ""
    print(f"validation: prepare carves {cfg.validation_fraction:.0%} of train{cap} (what every choice reads)")


def cmd_measure(args) -> None:
    from compress.core.config import build
    from compress.core.env import environment
    from compress.measure.harness import MeasureConfig, measure
    from compress.report.schema import make_report, render_markdown

    overrides = {"targets": args.targets, "threads": args.threads}
    if args.points:
        overrides["points"] = args.points
    cfg = build(MeasureConfig, overrides, "measure")
    path = Path(args.artifact)
    records = measure(artifact_at(path, args.name), args.data, cfg)
    report = make_report("measure", records, environment(cfg.threads))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render_markdown(report))


def cmd_report(args) -> None:
    from compress.report import comparison
    from compress.report.html import render_html
    from compress.core.io import atomic_write_text
    from compress.report.schema import read_report, render_markdown

    for p in args.reports:
        report = read_report(p)
        out = Path(p).with_suffix(".md")
        if report["stage"] == "comparison":
            atomic_write_text(out, comparison.render_markdown(report))
            html = out.with_suffix(".html")
            atomic_write_text(html, render_html(report))
            print(f"wrote {html}")
        else:
            atomic_write_text(out, render_markdown(report))
        print(f"wrote {out}")
        if args.readme and report["stage"] == "comparison":
            changed = comparison.update_readme(args.readme, report)
            print(f"{'updated' if changed else 'unchanged'}: results table in {args.readme}")


def cmd_predict(args) -> None:
    from contextlib import ExitStack

    _artifact_dir(args.artifact)
    from compress.predict import load, parse_lines, predict_stream

    loaded = load(args.artifact, args.task, args.target, args.threads)
    kind = loaded.task.kind_impl
    with ExitStack() as stack:
        total = None
        if args.texts:
            # an argument is one input: a line break inside it is a space (a pair's TAB stays)
            examples = parse_lines([t.replace("\n", " ") for t in args.texts], kind, "argument")
        elif args.file:
            path = Path(args.file)
            if not path.is_file():
                raise UserError(f"{path}: no such input file")
            with open(path, "rb") as f:
                total = sum(1 for _ in f)  # for the progress bar; the texts are streamed below
            examples = parse_lines(stack.enter_context(open(path, "rb")), kind, str(path))
        else:
            examples = parse_lines(sys.stdin.buffer, kind, "<stdin>")
        # Results are printed as each chunk is computed: memory stays flat for any input size.
        for r in predict_stream(loaded, examples, args.batch_size, args.max_length, progress=total is not None,
                                total=total):
            if args.format == "jsonl":
                print(json.dumps(r, ensure_ascii=False))
            elif "entities" in r:  # a tagger: one line per text, its entities as TYPE[start:end]=text
                found = "  ".join(f"{e['type']}[{e['start']}:{e['end']}]={e['text']}" for e in r["entities"])
                print(f"{found or '(no entities)'}\t{r['text'][:120]}")
            else:
                probs = " ".join(f"{k}={v:.3f}" for k, v in r["probabilities"].items())
                text = r["text"] if isinstance(r["text"], str) else " ||| ".join(r["text"])
                print(f"{r['label']}\t{probs}\t{text[:120]}")


def cmd_link_sources(args) -> None:
    from compress.core.config import load_params
    from compress.core.experiments import link_source

    source = str((load_params(args.params).get("prepare") or {}).get("source") or ".")
    link = link_source(source)
    print(f"{link} -> {link.resolve()}: queued experiments resolve prepare.source '{source}' as the checkout does"
          if link else f"prepare.source '{source}' needs no link (absolute, Hub or inside the repository)")


def cmd_evaluate(args) -> None:
    _artifact_dir(args.artifact)
    from compress.predict import evaluate, load

    loaded = load(args.artifact, args.task, args.target, args.threads)
    sets = (args.set or []) + ([f"{args.split}={args.file}"] if args.file else [])
    cfg = prepare_config(args.params, loaded.task.name, args.data, sets)
    res = evaluate(loaded, cfg, args.split, max_length=args.max_length)
    print(json.dumps(res, indent=2))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compress",
        description="Compress a BERT classifier and measure every artifact. Build the "
                    "artifacts with `dvc repro`; use this command to inspect and measure them.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("env", help="print the machine, GPU and library versions measurements record")
    s.set_defaults(func=cmd_env)

    s = sub.add_parser("validate-data", help="check a task's data files (any kind and format) as prepare reads them")
    s.add_argument("source", nargs="?", help="directory of split files, or hub:<id> (default: prepare.source)")
    s.add_argument("--task", help="the params preset to read it with (default prepare.task)")
    s.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a prepare key, e.g. --set train=all.csv --set dev=null (repeatable)")
    s.set_defaults(func=cmd_validate_data)

    s = sub.add_parser("measure", help="measure accuracy, latency and memory of a model directory")
    s.add_argument("artifact", help="model directory (config.json, *.safetensors, tokenizer)")
    s.add_argument("--data", default="data/prepared", help="prepared data directory (default data/prepared)")
    s.add_argument("--name", help="artifact name in the report (default: directory name)")
    s.add_argument("--targets", nargs="+", default=["cpu", "gpu"], help="cpu and/or gpu")
    s.add_argument("--points", nargs="+", type=_points, help="latency points as BATCHxSEQ (default 1x128 32x128)")
    s.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    s.add_argument("--json", help="also write the report JSON here")
    s.set_defaults(func=cmd_measure)

    s = sub.add_parser("report", help="re-render Markdown reports (and the comparison's HTML page) from their JSON")
    s.add_argument("reports", nargs="+", help="report JSON files, e.g. reports/teacher.json")
    s.add_argument("--readme", help="also refresh the results table in this README from comparison.json")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("predict", help="classify texts (or tag their entities) with the production artifact (or any artifact)")
    s.add_argument("texts", nargs="*", help="texts to classify (pair tasks: 'text_a<TAB>text_b'); "
                                            "without texts or --file, lines are read from standard input")
    s.add_argument("--file", help="a UTF-8 file with one text (or tab-separated pair) per line")
    s.add_argument("--artifact", default="models/production", help="artifact directory (default models/production)")
    s.add_argument("--task", help="the task name (default: the artifact's own task, recorded in "
                                  "artifact.json or config.json; a --task that contradicts it is refused)")
    s.add_argument("--format", choices=["text", "jsonl"], default="text", help="output format (default text)")
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--max-length", type=int, default=128, help="longer texts are truncated (default 128)")
    s.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=cmd_predict)

    s = sub.add_parser("evaluate", help="score an artifact on a labelled split (any format the pipeline reads) "
                                        "with the pipeline's pre-processing")
    s.add_argument("--data", required=True, help="directory of split files (or hub:<id>), read as the "
                                                 "artifact's task preset in params says")
    s.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="default dev")
    s.add_argument("--file", help="the split's file inside --data (default: the preset's prepare.<split>)")
    s.add_argument("--params", default="params.yaml", help="params file with the task's preset (default params.yaml)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a prepare key (repeatable)")
    s.add_argument("--artifact", default="models/production", help="artifact directory (default models/production)")
    s.add_argument("--task", help="the task name (default: the artifact's own task, recorded in "
                                  "artifact.json or config.json; a --task that contradicts it is refused)")
    s.add_argument("--max-length", type=int, default=128)
    s.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("link-sources", help="make a relative prepare.source resolve in queued DVC experiments "
                                            "(`make setup` and the prepare stage do it too)")
    s.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    s.set_defaults(func=cmd_link_sources)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
