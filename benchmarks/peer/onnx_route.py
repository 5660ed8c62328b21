"""The onnx check: the project's ONNX INT8 graph against Optimum's ONNX route.

  1. ``optimum.exporters.onnx.main_export(model, task="text-classification")`` (optimum-onnx)
  2. ``ORTQuantizer.from_pretrained(export_dir).quantize(quantization_config=
     AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False))``:
     dynamic quantization, QOperator format (MatMulInteger), weights QInt8 symmetric
     per-tensor, activations QUInt8 asymmetric, reduce_range off.

Both INT8 graphs are then loaded with plain ``onnxruntime.InferenceSession`` and identical
SessionOptions (CPUExecutionProvider, intra-op threads = ``--threads``, inter-op 1,
ORT_ENABLE_ALL, sequential), fed by one tokenizer (the one in ``--model``), so the only
difference measured is the graph. Accuracy and latency use the project's own harness
pieces (``compress.data.tokens`` encode/collate/eval_batches, ``compress.measure.harness.time_queries``
and ``latency_point``, ``compress.measure.metrics.classification_metrics``):

* accuracy: the whole dev split of ``--data`` (plus the float Optimum export, for
  reference), and prediction agreement between the two INT8 graphs;
* latency: batch 1 x ``--seq`` tokens (a real dev sentence padded to ``--seq``),
  interleaved A/B/A/B in ``--rounds`` rounds per route, so machine noise hits both routes
  equally; p50/p90/p99 over all rounds, and the per-round p50 ratio as a noise gauge.

Refused: the extra not installed, a --project-onnx onnxruntime cannot load or whose inputs
the tokenizer does not produce (InputError); Optimum failing to export or quantize
(PeerBuildError).
"""
from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np

from .common import INSTALL_HINT, InputError, PeerBuildError, plain, speed_verdict
from .graphs import Graph, dev_logits, interleaved_latency, model_size_mb, opset

QUANT_PRESET = "avx512_vnni"
QUANT_OPTIONS = {"is_static": False, "per_channel": False}
EXPORT_TASK = "text-classification"
ROUTES = ("project", "optimum")


def import_optimum():
    """Optimum's entry points, imported only here so --help works without the extra."""
    try:
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig
    except ImportError as e:
        raise InputError(f"Optimum's ONNX route is not installed ({e}); install it with: {INSTALL_HINT}") from None
    return main_export, ORTQuantizer, AutoQuantizationConfig


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
                   "opset": opset(fp32), "optimize": None},
        "quantization": {
            "call": f"AutoQuantizationConfig.{QUANT_PRESET}("
                    + ", ".join(f"{k}={v}" for k, v in QUANT_OPTIONS.items()) + ")",
            **{f: plain(getattr(qconfig, f, None)) for f in fields},
        },
    }


def run_onnx(args, prepared, dev, tokenizer, work_dir: Path, temporary: bool) -> dict:
    """The onnx check: the project's ONNX INT8 graph against Optimum's ONNX route."""
    from compress.measure.metrics import classification_metrics
    from compress.data.tokens import collate, encode, eval_batches

    num_labels = prepared.task.num_labels
    project = Graph("project", args.project_onnx, args.threads)  # a bad file fails before the build
    print(f"building Optimum's route from {args.model} in {work_dir} ...", file=sys.stderr, flush=True)
    peer = build_optimum_int8(args.model, work_dir)
    graphs = {"project": project, "optimum": Graph("optimum", peer["int8_path"], args.threads)}
    reference = Graph("optimum_fp32", peer["fp32_path"], args.threads)

    # Accuracy: the whole dev split, batched and padded exactly as compress.measure.harness does.
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

    # Latency: one real dev sentence, padded to exactly --seq tokens (as compress.measure.harness).
    print(f"latency at batch 1 x seq {args.seq}, {args.rounds} interleaved rounds per route ...",
          file=sys.stderr, flush=True)
    enc_seq = encode(tokenizer, dev, args.seq)
    batch = collate(enc_seq, [0], pad_to=args.seq)
    latency = interleaved_latency(graphs, batch, args)
    # Decide the printed paths before the temporary directory goes away.
    paths = {"project": str(args.project_onnx),
             "optimum": str(peer["int8_path"]) if not temporary else f"<temporary>/{peer['int8_path'].relative_to(work_dir)}"}
    sizes = {"project": model_size_mb(args.project_onnx), "optimum": model_size_mb(peer["int8_path"])}
    opsets = {"project": opset(args.project_onnx), "optimum": opset(peer["int8_path"])}
    inputs = {name: g.inputs for name, g in graphs.items()}
    ref_size = model_size_mb(peer["fp32_path"])
    del graphs, reference, project  # free the sessions before the openvino check

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
    speed = speed_verdict(round_ratios, "optimum")
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
    }
