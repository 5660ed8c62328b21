#!/usr/bin/env python
"""Peer check: the project's ONNX INT8 student against Hugging Face Optimum's own route.

Optimum's route, built here from the same float checkpoint (``--model``):

  1. ``optimum.exporters.onnx.main_export(model, task="text-classification")`` (optimum-onnx)
  2. ``ORTQuantizer.from_pretrained(export_dir).quantize(quantization_config=
     AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False))``:
     dynamic quantization, QOperator format (MatMulInteger), weights QInt8 symmetric
     per-tensor, activations QUInt8 asymmetric, reduce_range off.

Both INT8 graphs are then loaded with plain ``onnxruntime.InferenceSession`` and identical
SessionOptions (CPUExecutionProvider, intra-op threads = ``--threads``, inter-op 1,
ORT_ENABLE_ALL, sequential), fed by one tokenizer (the one in ``--model``), so the only
difference measured is the graph. Accuracy and latency use the project's own harness
pieces (``compress.tokens`` encode/collate/eval_batches, ``compress.measure.time_queries``
and ``latency_point``, ``compress.metrics.classification_metrics``):

* accuracy: the whole dev split of ``--data`` (plus the float Optimum export, for
  reference), and prediction agreement between the two INT8 graphs;
* latency: batch 1 x ``--seq`` tokens (a real dev sentence padded to ``--seq``),
  interleaved A/B/A/B in ``--rounds`` rounds per route, so machine noise hits both routes
  equally; p50/p90/p99 over all rounds, and the per-round p50 ratio as a noise gauge.

It is a benchmark, not a gate: the exit status is 0 whatever the numbers say; it is non-zero
only for bad inputs (2) or when Optimum's route cannot be built (1).

    python benchmarks/optimum_peer.py --model models/student \\
        --project-onnx models/student_onnx_int8/model.onnx --data data/prepared --json peer.json

Needs the ``peer`` extra: ``pip install -e ".[peer]"`` (optimum, optimum-onnx).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

QUANT_PRESET = "avx512_vnni"
QUANT_OPTIONS = {"is_static": False, "per_channel": False}
EXPORT_TASK = "text-classification"
ROUTES = ("project", "optimum")
INSTALL_HINT = 'pip install -e ".[peer]"'


class InputError(Exception):
    """A bad argument or input file; the message names it. Exit status 2."""


class PeerBuildError(Exception):
    """Optimum's route could not be built from --model. Exit status 1."""


# --- arguments ---------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="optimum_peer.py",
        description="Compare the project's ONNX INT8 student with the same student exported and "
                    "dynamically quantized by Hugging Face Optimum (optimum-onnx export + ORTQuantizer "
                    "avx512_vnni, is_static=False, per_channel=False): accuracy on the dev split, "
                    "prediction agreement, interleaved batch-1 latency, model size.",
        epilog=f"Needs the peer extra: {INSTALL_HINT}",
    )
    p.add_argument("--model", required=True, type=Path,
                   help="float HF checkpoint directory of the student (config.json, *.safetensors, tokenizer)")
    p.add_argument("--project-onnx", required=True, type=Path,
                   help="the project's INT8 ONNX file, e.g. models/student_onnx_int8/model.onnx")
    p.add_argument("--data", required=True, type=Path,
                   help="prepared data directory (card.json, dev.jsonl), e.g. data/prepared")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of both sessions (default 2)")
    p.add_argument("--seq", type=int, default=128, help="sequence length of the latency point (default 128)")
    p.add_argument("--min-queries", type=int, default=200,
                   help="timed queries per route, all rounds together (default 200)")
    p.add_argument("--min-duration-s", type=float, default=10.0,
                   help="timed seconds per route, all rounds together (default 10)")
    p.add_argument("--max-duration-s", type=float, default=120.0,
                   help="cap on timed seconds per route, all rounds together (default 120)")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds per route, A/B/A/B... (default 5)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed queries before each round (default 5)")
    p.add_argument("--eval-max-length", type=int, default=128,
                   help="truncation length for the accuracy pass (default 128, as measure.eval_max_length)")
    p.add_argument("--eval-batch-size", type=int, default=64,
                   help="batch size of the accuracy pass (default 64, as measure.eval_batch_size)")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--readme", type=Path, default=None,
                   help="also replace the <!-- peer:start --> ... <!-- peer:end --> block of this file")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep Optimum's export and INT8 model here (default: a temporary directory, removed)")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Every problem a user fixes from the message alone, before anything slow runs."""
    for name, value, low in (("--threads", args.threads, 1), ("--seq", args.seq, 2),
                             ("--min-queries", args.min_queries, 1), ("--rounds", args.rounds, 1),
                             ("--warmup", args.warmup, 0), ("--eval-max-length", args.eval_max_length, 8),
                             ("--eval-batch-size", args.eval_batch_size, 1)):
        if value < low:
            raise InputError(f"{name} must be >= {low}, got {value}")
    if args.min_duration_s < 0:
        raise InputError(f"--min-duration-s must be >= 0, got {args.min_duration_s}")
    if args.max_duration_s < args.min_duration_s:
        raise InputError(f"--max-duration-s ({args.max_duration_s}) must be >= --min-duration-s "
                         f"({args.min_duration_s})")
    if not args.project_onnx.is_file():
        what = "is a directory, not an .onnx file" if args.project_onnx.is_dir() else "not found"
        raise InputError(f"--project-onnx {args.project_onnx}: {what}")
    if not args.model.is_dir():
        raise InputError(f"--model {args.model}: directory not found (a float checkpoint written by save_pretrained)")
    if not (args.model / "config.json").is_file():
        raise InputError(f"--model {args.model}: no config.json (a float checkpoint written by save_pretrained)")
    if not any(args.model.glob("*.safetensors")):
        raise InputError(f"--model {args.model}: no *.safetensors weights")
    if not (args.data / "card.json").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'card.json'} not found; run the prepare stage first")
    if not (args.data / "dev.jsonl").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'dev.jsonl'} not found; run the prepare stage first")
    if args.work_dir is not None and args.work_dir.exists() and not args.work_dir.is_dir():
        raise InputError(f"--work-dir {args.work_dir}: exists and is not a directory")


# --- Optimum's route ---------------------------------------------------------------------

def import_optimum():
    """Optimum's entry points, imported only here so --help works without the extra."""
    try:
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig
    except ImportError as e:
        raise InputError(f"Optimum's ONNX route is not installed ({e}); install it with: {INSTALL_HINT}") from None
    return main_export, ORTQuantizer, AutoQuantizationConfig


def _plain(value):
    """A JSON-friendly copy of a quantization config field (enums -> their names)."""
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "name", None) or str(value)


def build_optimum_int8(model_dir: Path, work_dir: Path) -> dict:
    """optimum-onnx export of model_dir, then ORTQuantizer dynamic INT8. Returns paths and
    the exact options used."""
    main_export, ORTQuantizer, AutoQuantizationConfig = import_optimum()
    export_dir, int8_dir = work_dir / "optimum_onnx", work_dir / "optimum_onnx_int8"
    for d in (export_dir, int8_dir):
        if d.exists():
            shutil.rmtree(d)
    try:
        main_export(str(model_dir), export_dir, task=EXPORT_TASK, library_name="transformers",
                    local_files_only=True)
        fp32 = export_dir / "model.onnx"
        if not fp32.is_file():
            raise PeerBuildError(f"optimum-onnx export wrote no model.onnx into {export_dir}")
        qconfig = getattr(AutoQuantizationConfig, QUANT_PRESET)(**QUANT_OPTIONS)
        quantizer = ORTQuantizer.from_pretrained(export_dir, file_name="model.onnx")
        quantizer.quantize(save_dir=int8_dir, quantization_config=qconfig)
    except PeerBuildError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure inside Optimum is reported as such
        raise PeerBuildError(f"building Optimum's route from {model_dir} failed: "
                             f"{type(e).__name__}: {e}") from e
    int8 = int8_dir / "model_quantized.onnx"
    if not int8.is_file():
        found = sorted(p.name for p in int8_dir.glob("*.onnx"))
        if len(found) != 1:
            raise PeerBuildError(f"ORTQuantizer wrote {found or 'no .onnx file'} into {int8_dir}")
        int8 = int8_dir / found[0]
    fields = ("is_static", "format", "mode", "activations_dtype", "activations_symmetric", "weights_dtype",
              "weights_symmetric", "per_channel", "reduce_range", "operators_to_quantize")
    return {
        "fp32_path": fp32,
        "int8_path": int8,
        "export": {"function": "optimum.exporters.onnx.main_export", "task": EXPORT_TASK,
                   "opset": _opset(fp32), "optimize": None},
        "quantization": {
            "call": f"AutoQuantizationConfig.{QUANT_PRESET}("
                    + ", ".join(f"{k}={v}" for k, v in QUANT_OPTIONS.items()) + ")",
            **{f: _plain(getattr(qconfig, f, None)) for f in fields},
        },
    }


# --- running a graph ---------------------------------------------------------------------

def _opset(path: Path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def model_size_mb(path: Path) -> float:
    """The .onnx file plus any external-data files it references, in MiB."""
    import onnx

    total = path.stat().st_size
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - size of the file alone is still a fact
        return round(total / 2**20, 3)
    extra = set()
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            extra |= {e.value for e in init.external_data if e.key == "location"}
    total += sum((path.parent / f).stat().st_size for f in extra if (path.parent / f).is_file())
    return round(total / 2**20, 3)


def make_session(path: Path, threads: int, label: str):
    from compress.onnx_export import cpu_session  # the session options every project measurement uses

    try:
        return cpu_session(path, threads)
    except Exception as e:  # noqa: BLE001 - a file onnxruntime cannot load is a bad input
        raise InputError(f"{label} {path}: onnxruntime cannot load it: {type(e).__name__}: {e}") from None


class Graph:
    """One session; takes the project's collated batch and feeds only the inputs the graph
    declares (int64), returns fp32 logits (batch, labels)."""

    def __init__(self, name: str, path: Path, threads: int):
        self.name, self.path = name, path
        self.session = make_session(path, threads, "--project-onnx" if name == "project" else name)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name
        known = {"input_ids", "attention_mask", "token_type_ids"}
        unknown = [n for n in self.inputs if n not in known]
        if unknown:
            raise InputError(f"{path}: graph input(s) {unknown} are not produced by the tokenizer "
                             f"(known: {sorted(known)})")

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        feed = {n: np.ascontiguousarray(batch[n], dtype=np.int64) for n in self.inputs}
        return np.asarray(self.session.run([self.output], feed)[0], dtype=np.float32)


def dev_logits(graph: Graph, enc, batches, num_labels: int) -> np.ndarray:
    from compress.tokens import collate

    logits = np.zeros((len(enc), num_labels), dtype=np.float32)
    for idx in batches:
        out = graph(collate(enc, idx))
        if out.ndim != 2 or out.shape[1] != num_labels:
            raise InputError(f"{graph.path}: output '{graph.output}' has shape {out.shape}, expected "
                             f"(batch, {num_labels}) for task labels {num_labels}")
        logits[idx] = out
    return logits


def interleaved_latency(graphs: dict[str, Graph], batch: dict[str, np.ndarray], args) -> dict:
    """A/B/A/B rounds; every round of every graph gets the same query/time budget."""
    from compress.measure import latency_point, time_queries

    per_q = math.ceil(args.min_queries / args.rounds)
    per_min_s = args.min_duration_s / args.rounds
    per_max_s = args.max_duration_s / args.rounds
    times = {name: [] for name in graphs}
    for _ in range(args.rounds):
        for name, graph in graphs.items():
            times[name].append(time_queries(graph, batch, args.warmup, per_q, per_min_s, per_max_s))
    out = {}
    for name, rounds in times.items():
        point = latency_point(np.concatenate(rounds), 1, args.seq)
        out[name] = {
            **{k: v for k, v in dataclasses.asdict(point).items() if k not in ("status", "reason")},
            "round_p50_ms": [round(float(np.percentile(r, 50)) * 1000.0, 4) for r in rounds],
        }
    return out


# --- the comparison ----------------------------------------------------------------------

def run(args: argparse.Namespace) -> dict:
    check_args(args)
    import_optimum()  # fail fast, before reading data, when the extra is missing
    import onnxruntime as ort

    from compress.data import DataError, Prepared
    from compress.env import cpu_info, library_versions
    from compress.metrics import classification_metrics
    from compress.models import load_tokenizer
    from compress.tokens import collate, encode, eval_batches

    try:
        prepared = Prepared.open(args.data)
        dev = prepared.split("dev")
    except (DataError, OSError, ValueError) as e:
        raise InputError(f"--data {args.data}: {e}") from None
    if not dev:
        raise InputError(f"--data {args.data}: the dev split is empty")
    try:
        tokenizer = load_tokenizer(args.model)
    except Exception as e:  # noqa: BLE001 - ModelError or anything from AutoTokenizer
        raise InputError(f"--model {args.model}: {e}") from None
    num_labels = prepared.task.num_labels

    project = Graph("project", args.project_onnx, args.threads)  # a bad file fails before the build

    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="optimum_peer_")
        work_dir = Path(tmp.name)
    else:
        work_dir = args.work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"building Optimum's route from {args.model} in {work_dir} ...", file=sys.stderr, flush=True)
        peer = build_optimum_int8(args.model, work_dir)
        graphs = {"project": project, "optimum": Graph("optimum", peer["int8_path"], args.threads)}
        reference = Graph("optimum_fp32", peer["fp32_path"], args.threads)

        # Accuracy: the whole dev split, batched and padded exactly as compress.measure does.
        print(f"accuracy on {len(dev)} dev rows ...", file=sys.stderr, flush=True)
        enc = encode(tokenizer, dev, args.eval_max_length)
        batches = eval_batches(enc.lengths(), args.eval_batch_size)
        logits = {name: dev_logits(g, enc, batches, num_labels) for name, g in graphs.items()}
        ref_logits = dev_logits(reference, enc, batches, num_labels)
        metrics = {name: classification_metrics(lg, enc.labels, prepared.task.metrics)
                   for name, lg in logits.items()}
        ref_metrics = classification_metrics(ref_logits, enc.labels, prepared.task.metrics)
        pred = {name: lg.argmax(-1) for name, lg in logits.items()}
        ref_pred = ref_logits.argmax(-1)
        differ = pred["project"] != pred["optimum"]

        # Latency: one real dev sentence, padded to exactly --seq tokens (as compress.measure).
        print(f"latency at batch 1 x seq {args.seq}, {args.rounds} interleaved rounds per route ...",
              file=sys.stderr, flush=True)
        enc_seq = encode(tokenizer, dev, args.seq)
        batch = collate(enc_seq, [0], pad_to=args.seq)
        latency = interleaved_latency(graphs, batch, args)
        # Decide the printed paths before the temporary directory goes away.
        paths = {"project": str(args.project_onnx),
                 "optimum": str(peer["int8_path"]) if tmp is None else f"<temporary>/{peer['int8_path'].relative_to(work_dir)}"}
        sizes = {"project": model_size_mb(args.project_onnx), "optimum": model_size_mb(peer["int8_path"])}
        opsets = {"project": _opset(args.project_onnx), "optimum": _opset(peer["int8_path"])}
        inputs = {name: g.inputs for name, g in graphs.items()}
        ref_size = model_size_mb(peer["fp32_path"])
    finally:
        if tmp is not None:
            tmp.cleanup()

    routes = {}
    for name in ROUTES:
        routes[name] = {
            "onnx": paths[name],
            "size_mb": sizes[name],
            "opset": opsets[name],
            "graph_inputs": inputs[name],
            **metrics[name],
            "agreement_with_fp32_export": round(float((pred[name] == ref_pred).mean()), 6),
            "latency": latency[name],
        }
    ratio = latency["optimum"]["latency_ms_p50"] / latency["project"]["latency_ms_p50"]
    round_ratios = [round(o / p, 4) for o, p in zip(latency["optimum"]["round_p50_ms"],
                                                    latency["project"]["round_p50_ms"])]
    if min(round_ratios) >= 1.0:
        speed = "project as fast or faster in every round"
    elif max(round_ratios) < 1.0:
        speed = "optimum faster in every round"
    else:
        speed = "mixed across rounds: the difference is within run-to-run noise"
    acc = {name: metrics[name].get("accuracy") for name in ROUTES}
    labels = enc.labels
    return {
        "benchmark": "optimum_peer",
        "task": prepared.task.name,
        "dev_rows": int(len(enc)),
        "data_sha256": prepared.sha256("dev"),
        "model": str(args.model),
        "tokenizer": f"{args.model} (one tokenizer feeds both graphs)",
        "session": {"provider": "CPUExecutionProvider", "intra_op_num_threads": args.threads,
                    "inter_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL",
                    "execution_mode": "ORT_SEQUENTIAL"},
        "latency_setup": {"batch_size": 1, "seq_len": args.seq, "rounds_per_route": args.rounds,
                          "order": "interleaved " + "/".join(["project", "optimum"] * 2) + "/...",
                          "warmup_per_round": args.warmup,
                          "queries_per_round_min": math.ceil(args.min_queries / args.rounds),
                          "seconds_per_round_min": round(args.min_duration_s / args.rounds, 3),
                          "seconds_per_round_max": round(args.max_duration_s / args.rounds, 3)},
        "optimum_route": {k: v for k, v in peer.items() if not k.endswith("_path")},
        "routes": routes,
        "reference_fp32_export": {"size_mb": ref_size, **ref_metrics},
        "comparison": {
            "p50_ratio_optimum_over_project": round(ratio, 4),
            "round_p50_ratios": round_ratios,
            "speed": speed,
            "accuracy_delta_project_minus_optimum": (round(acc["project"] - acc["optimum"], 6)
                                                     if None not in acc.values() else None),
            "prediction_agreement": round(float(1.0 - differ.mean()), 6),
            "disagreements": int(differ.sum()),
            "disagreements_project_right": int((differ & (pred["project"] == labels)).sum()),
            "disagreements_optimum_right": int((differ & (pred["optimum"] == labels)).sum()),
            "max_abs_logit_diff": round(float(np.abs(logits["project"] - logits["optimum"]).max()), 6),
            "project_at_least_as_fast": bool(ratio >= 1.0),
            "project_at_least_as_accurate": (bool(acc["project"] >= acc["optimum"])
                                             if None not in acc.values() else None),
        },
        "environment": {
            "threads": args.threads,
            "onnxruntime": ort.__version__,
            "optimum": _version("optimum"),
            "optimum-onnx": _version("optimum-onnx"),
            **{k: v for k, v in library_versions().items()
               if k in ("python", "torch", "transformers", "onnx", "numpy")},
            **cpu_info(),
        },
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def render(res: dict) -> str:
    """A readable summary table."""
    r, c, env = res["routes"], res["comparison"], res["environment"]
    q = res["optimum_route"]["quantization"]
    lat = {n: r[n]["latency"] for n in ROUTES}
    seq = res["latency_setup"]["seq_len"]
    metric_names = [m for m in ("accuracy", "f1") if m in r["project"]]

    def row(label, fmt, key):
        return f"| {label} | " + " | ".join(fmt(key(n)) for n in ROUTES) + " |"

    ms = lambda v: f"{v:.3f}"  # noqa: E731
    lines = [
        f"Optimum peer check: {res['task']}, {res['dev_rows']} dev rows, "
        f"onnxruntime {env['onnxruntime']} CPUExecutionProvider, {env['threads']} intra-op threads, "
        f"optimum {env['optimum']} / optimum-onnx {env['optimum-onnx']}",
        f"Optimum route: main_export(task={res['optimum_route']['export']['task']}, "
        f"opset {res['optimum_route']['export']['opset']}) -> ORTQuantizer with {q['call']} "
        f"[{q['format']}/{q['mode']}, weights {q['weights_dtype']} "
        f"{'symmetric' if q['weights_symmetric'] else 'asymmetric'} "
        f"{'per-channel' if q['per_channel'] else 'per-tensor'}, activations {q['activations_dtype']} "
        f"{'symmetric' if q['activations_symmetric'] else 'asymmetric'}, reduce_range={q['reduce_range']}]",
        f"CPU: {env['cpu_model']} (avx512_vnni={env['cpu_flags'].get('avx512_vnni')}, "
        f"avx_vnni={env['cpu_flags'].get('avx_vnni')})",
        "",
        "| | project INT8 | Optimum INT8 |",
        "|---|---|---|",
        *[row(m, lambda v: "n/a" if v is None else f"{v:.4f}", lambda n, m=m: r[n][m]) for m in metric_names],
        row(f"p50 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p50"]),
        row(f"p90 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p90"]),
        row(f"p99 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p99"]),
        row("timed queries", str, lambda n: lat[n]["queries"]),
        row("size MiB", lambda v: f"{v:.2f}", lambda n: r[n]["size_mb"]),
        row("opset", str, lambda n: r[n]["opset"]),
        row("agreement with fp32 export", lambda v: f"{v:.4f}", lambda n: r[n]["agreement_with_fp32_export"]),
        "",
        f"float reference (Optimum fp32 export): accuracy {res['reference_fp32_export'].get('accuracy')}, "
        f"{res['reference_fp32_export']['size_mb']:.2f} MiB",
        f"optimum p50 / project p50 = {c['p50_ratio_optimum_over_project']:.3f} "
        f"(> 1: project faster); per round {c['round_p50_ratios']}: {c['speed']}",
        f"prediction agreement {c['prediction_agreement']:.4f} ({c['disagreements']} rows differ: "
        f"project right on {c['disagreements_project_right']}, Optimum right on "
        f"{c['disagreements_optimum_right']}); max |logit diff| {c['max_abs_logit_diff']:.4f}",
        f"project at least as fast: {c['project_at_least_as_fast']}; "
        f"at least as accurate: {c['project_at_least_as_accurate']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from local directories
    try:
        res = run(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PeerBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(render(res))
    if args.json is not None:
        from compress.io import atomic_write_json

        atomic_write_json(args.json, res)
        print(f"wrote {args.json}")
    if args.readme is not None:
        from compress.io import replace_block

        replace_block(args.readme, PEER_START, PEER_END, render(res))
        print(f"updated {args.readme}")
    return 0


PEER_START, PEER_END = "<!-- peer:start -->", "<!-- peer:end -->"


if __name__ == "__main__":
    sys.exit(main())
