#!/usr/bin/env python
"""Peer check: the project's student against Hugging Face Optimum's own routes, in one run.

Two checks, both by default (``--checks all|onnx|openvino``), each building the peer from the
same float checkpoint (``--model``) and measuring it beside the project's artifact:

**onnx** -- the project's ONNX INT8 graph against Optimum's ONNX route:

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

**openvino** -- the project's OpenVINO artifacts (``student_ov`` FP32 IR, ``student_ov_bf16``
the same IR run at bf16, ``student_ov_int8``; ``--project-ov``, ``--project-ov-int8``) against
optimum-intel's route:

  1. ``OVModelForSequenceClassification.from_pretrained(model, export=True)``: FP32 IR
     (weights kept FP32), run at ``INFERENCE_PRECISION_HINT`` f32 and, as the project's bf16
     row, bf16 (CPUs with native bf16 only, the project's rule);
  2. ``OVQuantizer(fp32 model).quantize(calibration_dataset=nncf.Dataset(rows),
     ov_config=OVConfig(quantization_config=OVQuantizationConfig(num_samples=N)))``: NNCF
     static post-training quantization with optimum-intel's defaults (preset "mixed": INT8
     weights symmetric per-channel, activations asymmetric; model_type transformer, so
     SmoothQuant; fast bias correction), calibrated on ``--calibration-rows`` TRAINING rows
     (the same seeded sample as the project's INT8 IR) padded to ``--eval-max-length``
     tokens, optimum-intel's documented text-classification recipe.

  Every route, project and peer, is measured by the project's harness itself,
  ``compress.measure.harness.measure`` (the benchmark stage's accuracy pass and latency points
  [1, ``--seq``] and [``--batch``, ``--seq``], same dev sentences), through a runner: the
  project's via ``compress.backends.base.load_runner(Artifact(name, path, "openvino", precision))``,
  optimum-intel's via ``OptimumIntelRunner`` below (its ``OVModelForSequenceClassification``
  compiled with ``INFERENCE_NUM_THREADS=--threads, NUM_STREAMS=1, PERFORMANCE_HINT=LATENCY``
  and the project row's runtime settings: its ``INFERENCE_PRECISION_HINT`` and CPU pinning as
  the project's openvino.json records them, else the project's rule (f32, bf16, and for INT8
  bf16 where the CPU has native bf16, else f32); written beside the peer IR as
  peer_runtime.json), registered with the harness for the duration of the run. Left to its
  defaults optimum-intel would let the CPU plugin choose (bf16 on CPUs with native bf16): the
  result records that choice too.
  Measurement runs in this process (``isolate=False``; peak memory is not compared) in
  ``--rounds`` interleaved rounds (project fp32, peer fp32, project bf16, ...): round 1 runs
  the whole dev split; later rounds only re-time. Reported: accuracy, p50 ms at 1 x ``--seq``
  (median of the round p50s), sequences/s at ``--batch`` x ``--seq`` (all rounds pooled),
  size on disk (model.xml + model.bin), prediction agreement project vs peer, and the
  inference precision each compiled model reports. Missing project artifacts (no
  ``dvc repro`` yet) are reported as such and the peer is still measured.

It is a benchmark, not a gate: the exit status is 0 whatever the numbers say; it is non-zero
only for bad inputs (2) or when a peer route cannot be built (1).

    python benchmarks/optimum_peer.py --model models/student \\
        --project-onnx models/student_onnx_int8/model.onnx --data data/prepared \\
        --project-ov models/student_ov --project-ov-int8 models/student_ov_int8 --json peer.json

Needs the ``peer`` extra: ``pip install -e ".[peer]"`` (optimum, optimum-onnx, optimum-intel[openvino]).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import logging
import math
import os
import random
import shutil
import sys
import tempfile
import types
from importlib import metadata
from pathlib import Path

import numpy as np

QUANT_PRESET = "avx512_vnni"
QUANT_OPTIONS = {"is_static": False, "per_channel": False}
EXPORT_TASK = "text-classification"
ROUTES = ("project", "optimum")
INSTALL_HINT = 'pip install -e ".[peer]"'
CHECKS = {"all": ("onnx", "openvino"), "onnx": ("onnx",), "openvino": ("openvino",)}

# The OpenVINO check: (precision, project artifact, optimum-intel artifact), measured in this order.
OV_PAIRS = (("fp32", "student_ov", "optimum_intel_ov"),
            ("bf16", "student_ov_bf16", "optimum_intel_ov_bf16"),
            ("int8", "student_ov_int8", "optimum_intel_ov_int8"))
OV_PEER_FORMAT = "optimum_intel_openvino"  # the peer runner's format while it is registered
OV_RUNNER_MODULE = "_optimum_peer_openvino_runner"  # the module name it is registered under
OV_BUILD_HINT = ("the project's OpenVINO artifacts are built by the openvino stage "
                 "(compress/backends/openvino_ir.py; dvc repro)")
OV_SEED = 0  # the calibration sample of the training split (compress.backends.openvino_ir's default seed)
OV_RUNTIME_FILE = "peer_runtime.json"  # beside a peer IR: what each precision is compiled with


class InputError(Exception):
    """A bad argument or input file; the message names it. Exit status 2."""


class PeerBuildError(Exception):
    """Optimum's route could not be built from --model. Exit status 1."""


# --- arguments ---------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="optimum_peer.py",
        description="Compare the project's student with the same student built by Hugging Face Optimum, "
                    "in one run. onnx check: the project's ONNX INT8 against optimum-onnx export + "
                    "ORTQuantizer avx512_vnni (is_static=False, per_channel=False), interleaved batch-1 "
                    "latency. openvino check: the project's OpenVINO IR (FP32, BF16, INT8) against "
                    "optimum-intel (OVModelForSequenceClassification export=True, OVQuantizer static "
                    "INT8 PTQ on training rows), all measured by compress.measure.harness.measure with the same "
                    "threads. Both: accuracy on the dev split, prediction agreement, latency, size.",
        epilog=f"Needs the peer extra: {INSTALL_HINT}",
    )
    p.add_argument("--model", required=True, type=Path,
                   help="float HF checkpoint directory of the student (config.json, *.safetensors, tokenizer)")
    p.add_argument("--checks", choices=sorted(CHECKS), default="all",
                   help="which peer checks to run (default all: onnx and openvino)")
    p.add_argument("--project-onnx", type=Path, default=None,
                   help="the project's INT8 ONNX file, e.g. models/student_onnx_int8/model.onnx "
                        "(required by the onnx check)")
    p.add_argument("--project-ov", type=Path, default=Path("models/student_ov"),
                   help="the project's FP32 OpenVINO IR directory (model.xml, model.bin, tokenizer); "
                        "measured as student_ov (f32) and student_ov_bf16 (default models/student_ov)")
    p.add_argument("--project-ov-int8", type=Path, default=Path("models/student_ov_int8"),
                   help="the project's INT8 OpenVINO IR directory (default models/student_ov_int8)")
    p.add_argument("--data", required=True, type=Path,
                   help="prepared data directory (card.json, dev.jsonl), e.g. data/prepared")
    p.add_argument("--threads", type=int, default=2,
                   help="intra-op threads of both ONNX sessions and inference threads of every OpenVINO "
                        "route (default 2)")
    p.add_argument("--seq", type=int, default=128, help="sequence length of the latency point (default 128)")
    p.add_argument("--min-queries", type=int, default=200,
                   help="onnx check: timed queries per route, all rounds together (default 200)")
    p.add_argument("--min-duration-s", type=float, default=10.0,
                   help="onnx check: timed seconds per route, all rounds together (default 10)")
    p.add_argument("--max-duration-s", type=float, default=120.0,
                   help="onnx check: cap on timed seconds per route, all rounds together (default 120)")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds per route, A/B/A/B... (default 5); the openvino check measures every "
                        "route once per round")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed queries before each round (default 5)")
    p.add_argument("--eval-max-length", type=int, default=128,
                   help="truncation length for the accuracy pass (default 128, as measure.eval_max_length)")
    p.add_argument("--eval-batch-size", type=int, default=64,
                   help="batch size of the accuracy pass (default 64, as measure.eval_batch_size)")
    p.add_argument("--batch", type=int, default=32,
                   help="openvino check: batch of the throughput point --batch x --seq (default 32)")
    p.add_argument("--ov-min-queries", type=int, default=50,
                   help="openvino check: timed queries per latency point and route, all rounds together "
                        "(default 50)")
    p.add_argument("--ov-min-duration-s", type=float, default=5.0,
                   help="openvino check: timed seconds per latency point and route, all rounds together "
                        "(default 5)")
    p.add_argument("--ov-max-duration-s", type=float, default=60.0,
                   help="openvino check: cap on timed seconds per latency point and route (default 60)")
    p.add_argument("--calibration-rows", type=int, default=300,
                   help="openvino check: training rows calibrating optimum-intel's static INT8 (default 300)")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--readme", type=Path, default=None,
                   help="also replace the <!-- peer:start --> ... <!-- peer:end --> block of this file")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep Optimum's exports and INT8 models here (default: a temporary directory, removed)")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Every problem a user fixes from the message alone, before anything slow runs."""
    for name, value, low in (("--threads", args.threads, 1), ("--seq", args.seq, 2),
                             ("--min-queries", args.min_queries, 1), ("--rounds", args.rounds, 1),
                             ("--warmup", args.warmup, 0), ("--eval-max-length", args.eval_max_length, 8),
                             ("--eval-batch-size", args.eval_batch_size, 1), ("--batch", args.batch, 2),
                             ("--ov-min-queries", args.ov_min_queries, 1),
                             ("--calibration-rows", args.calibration_rows, 1)):
        if value < low:
            raise InputError(f"{name} must be >= {low}, got {value}")
    for prefix in ("", "ov_"):
        flag = "--" + prefix.replace("_", "-")
        low, high = getattr(args, prefix + "min_duration_s"), getattr(args, prefix + "max_duration_s")
        if low < 0:
            raise InputError(f"{flag}min-duration-s must be >= 0, got {low}")
        if high < low:
            raise InputError(f"{flag}max-duration-s ({high}) must be >= {flag}min-duration-s ({low})")
    checks = CHECKS[args.checks]
    if "onnx" in checks:
        if args.project_onnx is None:
            raise InputError("--project-onnx is required by the onnx check (or run only the other one: "
                             "--checks openvino)")
        if not args.project_onnx.is_file():
            what = "is a directory, not an .onnx file" if args.project_onnx.is_dir() else "not found"
            raise InputError(f"--project-onnx {args.project_onnx}: {what}")
    if "openvino" in checks:
        for flag, path in (("--project-ov", args.project_ov), ("--project-ov-int8", args.project_ov_int8)):
            if path.exists() and not path.is_dir():  # missing is reported in the results, not an error
                raise InputError(f"{flag} {path}: not a directory (an OpenVINO IR directory with model.xml)")
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
    if "openvino" in checks and not (args.data / "train.jsonl").is_file():
        raise InputError(f"--data {args.data}: {args.data / 'train.jsonl'} not found (optimum-intel's INT8 "
                         "calibrates on training rows); run the prepare stage first")
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


# --- optimum-intel's OpenVINO route ------------------------------------------------------

def import_optimum_intel():
    """optimum-intel's entry points, imported only here so --help works without the extra."""
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
        from optimum.intel import OVConfig, OVModelForSequenceClassification, OVQuantizationConfig, OVQuantizer
    except ImportError as e:
        raise InputError(f"optimum-intel's OpenVINO route is not installed ({e}); install it with: "
                         f"{INSTALL_HINT}") from None
    quiet = logging.getLogger("optimum.intel.openvino.modeling_base")
    if not any(isinstance(f, _LocalDirCheckFilter) for f in quiet.filters):
        quiet.addFilter(_LocalDirCheckFilter())
    return OVModelForSequenceClassification, OVQuantizer, OVConfig, OVQuantizationConfig


class _LocalDirCheckFilter(logging.Filter):
    """Offline, optimum-intel 1.27's from_pretrained looks a local directory up in the Hub cache
    first and warns "Could not infer whether the model was already converted ..." although the
    explicit export= it then keeps is right; that warning only confuses a reader here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Could not infer whether the model was already converted" not in record.getMessage()


def calibration_rows(prepared, tokenizer, rows: int, max_length: int) -> list[dict[str, np.ndarray]]:
    """`rows` TRAINING rows, the same seeded sample the project's INT8 IR calibrates on with
    its defaults (the first rows of random.Random(0).sample of the split, as
    compress.backends.openvino_ir.training_slices), each one item (1, max_length) padded to max_length
    as optimum-intel's documented text-classification recipe does (padding="max_length")."""
    from compress.data.tokens import collate, encode

    train = prepared.split("train")
    if not train:
        raise InputError("the training split is empty: nothing to calibrate optimum-intel's INT8 on")
    idx = random.Random(OV_SEED).sample(range(len(train)), len(train))[:rows]
    enc = encode(tokenizer, [train[i] for i in idx], max_length)
    return [collate(enc, [j], pad_to=max_length) for j in range(len(enc))]


def build_optimum_intel(model_dir: Path, work_dir: Path, tokenizer, calibration: list[dict]) -> dict:
    """optimum-intel's FP32 IR export of model_dir and its static INT8 (OVQuantizer, NNCF PTQ on
    `calibration`). Each directory holds openvino_model.xml/.bin, config.json and the tokenizer.
    Returns the directories and the exact options used."""
    OVModel, OVQuantizer, OVConfig, OVQuantizationConfig = import_optimum_intel()
    import nncf

    fp32_dir, int8_dir = work_dir / "optimum_intel_ov", work_dir / "optimum_intel_ov_int8"
    for d in (fp32_dir, int8_dir):
        if d.exists():
            shutil.rmtree(d)
    try:
        exported = OVModel.from_pretrained(str(model_dir), export=True, compile=False, local_files_only=True)
        exported.save_pretrained(fp32_dir)
        tokenizer.save_pretrained(fp32_dir)
        del exported
        qconfig = OVQuantizationConfig(num_samples=len(calibration))
        float_model = OVModel.from_pretrained(str(fp32_dir), compile=False, local_files_only=True)
        names = set(float_model.input_names)
        dataset = nncf.Dataset([{k: v for k, v in row.items() if k in names} for row in calibration])
        OVQuantizer(float_model).quantize(calibration_dataset=dataset,
                                          ov_config=OVConfig(quantization_config=qconfig), save_directory=int8_dir)
        tokenizer.save_pretrained(int8_dir)
        nncf_args = qconfig.to_nncf_dict()
    except Exception as e:  # noqa: BLE001 - any failure inside optimum-intel is reported as such
        raise PeerBuildError(f"building optimum-intel's route from {model_dir} failed: "
                             f"{type(e).__name__}: {e}") from e
    for d in (fp32_dir, int8_dir):
        if not (d / "openvino_model.xml").is_file():
            raise PeerBuildError(f"optimum-intel wrote no openvino_model.xml into {d}")
    return {
        "fp32_dir": fp32_dir,
        "int8_dir": int8_dir,
        "export": {"call": "OVModelForSequenceClassification.from_pretrained(model, export=True)",
                   "task": "text-classification", "weights": "fp32 (no compression)"},
        "quantization": {
            "call": "OVQuantizer(fp32 model).quantize(calibration_dataset=nncf.Dataset(rows), ov_config="
                    f"OVConfig(quantization_config=OVQuantizationConfig(num_samples={len(calibration)})))",
            "method": "NNCF static post-training quantization (weights and activations INT8)",
            **{f: _plain(getattr(qconfig, f, None)) for f in ("bits", "sym", "dtype", "model_type",
                                                              "fast_bias_correction", "overflow_fix",
                                                              "smooth_quant_alpha", "num_samples")},
            "nncf_preset": _plain(getattr(nncf_args.get("preset"), "value", nncf_args.get("preset"))),
            "nncf_subset_size": nncf_args.get("subset_size"),
            "calibration": {"split": "train", "rows": len(calibration), "seed": OV_SEED,
                            "padding": "max_length",
                            "seq_len": int(calibration[0]["input_ids"].shape[1]) if calibration else None},
        },
    }


def default_runtime(precision: str) -> dict:
    """The project's rule (compress.backends.openvino_ir.runtime_settings with its defaults): fp32 runs
    at f32, bf16 at bf16, and what an INT8 graph leaves in float at bf16 where the CPU has
    native bf16, else f32; no CPU pinning."""
    if precision == "int8":
        from compress.core.env import bf16_unavailable

        hint = "f32" if bf16_unavailable() else "bf16"
    else:
        hint = "bf16" if precision == "bf16" else "f32"
    return {"inference_precision": hint, "cpu_pinning": False}


def project_runtime(ir_dir: Path, precision: str) -> dict | None:
    """The runtime settings the project's IR records for `precision` (openvino.json "runtime"),
    or None when it records none."""
    try:
        meta = json.loads((ir_dir / "openvino.json").read_text(encoding="utf-8"))
        got = meta["runtime"][precision]
        return {"inference_precision": str(got["inference_precision"]), "cpu_pinning": bool(got.get("cpu_pinning"))}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def peer_ov_config(threads: int, runtime: dict) -> dict:
    """The compile options of optimum-intel's model: the project's runtime settings (threads,
    one stream, latency hint, CPU pinning) and the inference precision of the row."""
    return {"INFERENCE_NUM_THREADS": int(threads), "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": runtime["inference_precision"],
            "ENABLE_CPU_PINNING": bool(runtime.get("cpu_pinning", False))}


def write_peer_runtime(ir_dir: Path, runtime: dict[str, dict]) -> None:
    """Records, beside a peer IR, what each precision is compiled with ({precision: runtime})."""
    (ir_dir / OV_RUNTIME_FILE).write_text(json.dumps(runtime, indent=2) + "\n", encoding="utf-8")


def peer_runtime(ir_dir: Path, precision: str) -> dict:
    try:
        return json.loads((ir_dir / OV_RUNTIME_FILE).read_text(encoding="utf-8"))[precision]
    except (OSError, ValueError, KeyError):
        return default_runtime(precision)


def ir_constant_count(model) -> int:
    """Elements of the weight-like constants (float or 8/4-bit) of an openvino.Model."""
    total = 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        etype = op.get_output_element_type(0)
        if not (etype.is_real() or etype.get_type_name() in ("i8", "u8", "i4", "u4")):
            continue
        shape = op.get_output_shape(0)
        if len(shape) >= 1:
            total += math.prod(int(d) for d in shape)
    return total


class OptimumIntelRunner:
    """optimum-intel's OVModelForSequenceClassification as a runner of compress.backends.base: the
    harness (compress.measure.harness) feeds it the project's collated int64 batches and reads fp32
    logits (batch, labels), exactly as it does the project's OpenVinoRunner."""
    backend = "optimum-intel-openvino-cpu"

    def __init__(self, artifact, target: str, threads: int):
        reason = self.unavailable(target)
        if reason:
            raise RuntimeError(reason)
        from compress.training.models import load_tokenizer

        OVModelForSequenceClassification = import_optimum_intel()[0]
        self.runtime = peer_runtime(Path(artifact.path), artifact.precision)
        self.ov_config = peer_ov_config(threads, self.runtime)
        self.model = OVModelForSequenceClassification.from_pretrained(
            str(artifact.path), ov_config=dict(self.ov_config), device="CPU", compile=True, local_files_only=True)
        self.model.compile()
        self.inputs = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in self.model.input_names]
        self.tokenizer = load_tokenizer(artifact.path)
        self.num_labels = int(self.model.config.num_labels)
        self.num_params = ir_constant_count(self.model.model)

    @staticmethod
    def unavailable(target: str) -> str | None:
        if target != "cpu":
            return "optimum-intel's peer route is measured on the CPU only"
        try:
            import optimum.intel.openvino  # noqa: F401
        except ImportError as e:
            return f"optimum-intel is not installed ({e}); {INSTALL_HINT}"
        return None

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        out = self.model(**{n: np.ascontiguousarray(batch[n], dtype=np.int64) for n in self.inputs})
        return np.asarray(out.logits, dtype=np.float32)

    def synchronize(self) -> None:
        return None


def optimum_intel_default_precision(ir_dir: Path, threads: int) -> str | None:
    """The inference precision optimum-intel would run this IR at left to its defaults (it sets
    only PERFORMANCE_HINT=LATENCY; the CPU plugin then picks bf16 on CPUs with native bf16)."""
    import openvino as ov

    try:
        compiled = ov.Core().compile_model(str(ir_dir / "openvino_model.xml"), "CPU",
                                           {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(threads)})
    except Exception:  # noqa: BLE001 - informative only
        return None
    return compiled_properties(compiled).get("INFERENCE_PRECISION_HINT")


def find_compiled_model(runner, depth: int = 3):
    """The openvino.CompiledModel a runner holds (any attribute, a few levels down), or None."""
    import openvino as ov

    seen: set[int] = set()

    def walk(obj, level):
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, Path, np.ndarray)):
            return None
        seen.add(id(obj))
        if isinstance(obj, ov.CompiledModel):
            return obj
        if isinstance(obj, ov.InferRequest):
            return obj.get_compiled_model()
        if level == 0 or isinstance(obj, types.ModuleType) or not hasattr(obj, "__dict__"):
            return None
        for value in vars(obj).values():
            found = walk(value, level - 1)
            if found is not None:
                return found
        return None

    return walk(runner, depth)


def compiled_properties(compiled) -> dict:
    """What the compiled model reports it runs with (precision, threads, streams, hint)."""
    out = {}
    if compiled is None:
        return out
    for key in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT",
                "EXECUTION_MODE_HINT", "ENABLE_CPU_PINNING"):
        try:
            value = compiled.get_property(key)
        except Exception:  # noqa: BLE001 - a property this plugin does not report
            continue
        if hasattr(value, "get_type_name"):
            value = value.get_type_name()
        elif hasattr(value, "name") and not isinstance(value, (int, str)):
            value = value.name
        out[key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


@contextlib.contextmanager
def peer_runner_registered():
    """Registers OptimumIntelRunner with compress.backends.base (format OV_PEER_FORMAT) for the
    duration, so compress.measure.harness.measure loads it like any project runner; restores after."""
    import compress.backends.base as runners

    module = types.ModuleType(OV_RUNNER_MODULE)
    module.OptimumIntelRunner = OptimumIntelRunner
    added = {(OV_PEER_FORMAT, "cpu"): f"{OV_RUNNER_MODULE}:OptimumIntelRunner",
             (OV_PEER_FORMAT, "gpu"): "skip:optimum-intel's peer route is measured on the CPU only"}
    before_module = sys.modules.get(OV_RUNNER_MODULE)
    before = {k: runners.RUNNERS[k] for k in added if k in runners.RUNNERS}
    sys.modules[OV_RUNNER_MODULE] = module
    runners.RUNNERS.update(added)
    try:
        yield
    finally:
        for k in added:
            runners.RUNNERS.pop(k, None)
        runners.RUNNERS.update(before)
        if before_module is None:
            sys.modules.pop(OV_RUNNER_MODULE, None)
        else:
            sys.modules[OV_RUNNER_MODULE] = before_module


_PEER_ARTIFACT = None


def peer_artifact(name: str, path: Path, precision: str, parent: str | None = None):
    """An Artifact of the peer format (compress.backends.base.Artifact accepts only the project's
    FORMATS, so a subclass checks the precision alone)."""
    global _PEER_ARTIFACT
    if _PEER_ARTIFACT is None:
        from compress.backends.base import PRECISIONS, Artifact

        @dataclasses.dataclass(frozen=True)
        class PeerArtifact(Artifact):
            def __post_init__(self):
                if self.precision not in PRECISIONS:
                    raise ValueError(f"artifact {self.name}: unknown precision {self.precision!r}")

        _PEER_ARTIFACT = PeerArtifact
    return _PEER_ARTIFACT(name, Path(path), OV_PEER_FORMAT, precision, parent)


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
    from compress.backends.onnx_export import cpu_session  # the session options every project measurement uses

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
    from compress.data.tokens import collate

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
    from compress.measure.harness import latency_point, time_queries

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
    checks = CHECKS[args.checks]
    # fail fast, before reading data, when the extra is missing
    if "onnx" in checks:
        import_optimum()
    if "openvino" in checks:
        import_optimum_intel()

    from compress.data.prepare import DataError, Prepared
    from compress.core.env import cpu_info, library_versions
    from compress.training.models import load_tokenizer

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

    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="optimum_peer_")
        work_dir = Path(tmp.name)
    else:
        work_dir = args.work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
    res: dict = {"benchmark": "optimum_peer", "checks": list(checks), "task": prepared.task.name,
                 "dev_rows": len(dev), "data_sha256": prepared.sha256("dev"), "model": str(args.model)}
    try:
        if "onnx" in checks:
            res.update(run_onnx(args, prepared, dev, tokenizer, work_dir, temporary=tmp is not None))
        if "openvino" in checks:
            res["openvino"] = run_openvino(args, prepared, tokenizer, work_dir, temporary=tmp is not None)
    finally:
        if tmp is not None:
            tmp.cleanup()
    res["environment"] = {
        "threads": args.threads,
        **{name: _version(name) for name in ("onnxruntime", "optimum", "optimum-onnx", "optimum-intel",
                                             "openvino", "nncf")},
        **{k: v for k, v in library_versions().items()
           if k in ("python", "torch", "transformers", "onnx", "numpy")},
        **cpu_info(),
    }
    return res


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
    opsets = {"project": _opset(args.project_onnx), "optimum": _opset(peer["int8_path"])}
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
    }


def _median(values: list[float]) -> float:
    return round(float(np.median(values)), 4)


def _combine_rounds(records: list[dict], seq: int, batch: int) -> dict:
    """One route's harness records (one per round) -> its figures: accuracy from round 1 (the
    whole dev split), p50 as the median of the round p50s, seq/s pooled over all rounds."""
    def point(rec, b):
        return next(p for p in rec["points"] if p["batch_size"] == b and p["seq_len"] == seq)

    first = records[0]
    lat, thr = [point(r, 1) for r in records], [point(r, batch) for r in records]
    return {
        "accuracy": first["accuracy"],
        "f1": first["f1"],
        "eval_rows": first["eval_rows"],
        "agreement_with_parent": first["agreement_with_parent"],
        "size_mb": first["size_mb"],
        "num_params": first["num_params"],
        "backend": first["backend"],
        "threads": first["threads"],
        "artifact_sha256": first["artifact_sha256"],
        "latency": {"batch_size": 1, "seq_len": seq,
                    "latency_ms_p50": _median([p["latency_ms_p50"] for p in lat]),
                    "latency_ms_p90": _median([p["latency_ms_p90"] for p in lat]),
                    "round_p50_ms": [p["latency_ms_p50"] for p in lat],
                    "queries": sum(p["queries"] for p in lat)},
        "throughput": {"batch_size": batch, "seq_len": seq,
                       # pooled: all timed queries of all rounds (mean x queries = their time)
                       "throughput_seq_per_s": round(batch * sum(p["queries"] for p in thr) * 1000.0
                                                     / sum(p["latency_ms_mean"] * p["queries"] for p in thr), 2),
                       "latency_ms_p50": _median([p["latency_ms_p50"] for p in thr]),
                       "round_seq_per_s": [p["throughput_seq_per_s"] for p in thr],
                       "queries": sum(p["queries"] for p in thr)},
    }


def run_openvino(args, prepared, tokenizer, work_dir: Path, temporary: bool) -> dict:
    """The openvino check: the project's OpenVINO artifacts against optimum-intel's FP32 IR and
    static INT8, every route measured by compress.measure.harness.measure in interleaved rounds."""
    from compress.measure.harness import MeasureConfig, measure
    from compress.backends.base import Artifact, load_runner, skip_reason

    project_specs = {"student_ov": (args.project_ov, "fp32", None, "--project-ov"),
                     "student_ov_bf16": (args.project_ov, "bf16", "student_ov", "--project-ov"),
                     "student_ov_int8": (args.project_ov_int8, "int8", "student_ov", "--project-ov-int8")}
    routes: dict[str, dict] = {}
    arts: dict = {}
    flags: dict[str, str] = {}
    for name, (path, precision, parent, flag) in project_specs.items():
        routes[name] = {"side": "project", "precision": precision, "path": str(path), "status": "ok",
                        "reason": None}
        flags[name] = f"{flag} {path}"
        if (path / "model.xml").is_file():
            arts[name] = Artifact(name, path, "openvino", precision, parent=parent)
        else:
            routes[name].update(status="missing", reason=f"{flag} {path}: "
                                f"{'no model.xml in it' if path.is_dir() else 'not found'}; {OV_BUILD_HINT}")

    print(f"building optimum-intel's route from {args.model} in {work_dir} "
          f"({args.calibration_rows} calibration rows) ...", file=sys.stderr, flush=True)
    calibration = calibration_rows(prepared, tokenizer, args.calibration_rows, args.eval_max_length)
    peer = build_optimum_intel(args.model, work_dir, tokenizer, calibration)
    shown = {"fp32_dir": "<temporary>/optimum_intel_ov" if temporary else str(peer["fp32_dir"]),
             "int8_dir": "<temporary>/optimum_intel_ov_int8" if temporary else str(peer["int8_dir"])}
    # The peer runs with the project's runtime settings (its openvino.json "runtime", else the
    # project's default rule), so precision, threads, streams and pinning match row by row.
    runtime = {}
    for precision, _, _ in OV_PAIRS:
        src = args.project_ov_int8 if precision == "int8" else args.project_ov
        recorded = project_runtime(src, precision)
        runtime[precision] = {**(recorded or default_runtime(precision)),
                              "from": str(src / "openvino.json") if recorded else
                              "the project's default rule (no recorded runtime found)"}
    for key in ("fp32_dir", "int8_dir"):
        write_peer_runtime(peer[key], runtime)
    optimum_default = optimum_intel_default_precision(peer["fp32_dir"], args.threads)
    for precision, _, name in OV_PAIRS:
        key = "int8_dir" if precision == "int8" else "fp32_dir"
        routes[name] = {"side": "optimum-intel", "precision": precision, "path": shown[key], "status": "ok",
                        "reason": None, "runtime": runtime[precision],
                        "ov_config": peer_ov_config(args.threads, runtime[precision])}
        arts[name] = peer_artifact(name, peer[key], precision, None if precision == "fp32" else "optimum_intel_ov")
        flags[name] = name

    def failed(name: str, what: str, e: Exception) -> Exception:
        msg = f"{what}: {type(e).__name__}: {e}"
        if routes[name]["side"] == "project":
            return InputError(f"{flags[name]}: the project's OpenVINO runner {msg}")
        return PeerBuildError(f"optimum-intel's {name} ({routes[name]['path']}) {msg}")

    base = MeasureConfig(targets=["cpu"], points=[[1, args.seq], [args.batch, args.seq]],
                         eval_max_length=args.eval_max_length, eval_batch_size=args.eval_batch_size,
                         eval_max_rows=None, warmup_queries=args.warmup,
                         min_queries=math.ceil(args.ov_min_queries / args.rounds),
                         min_duration_s=args.ov_min_duration_s / args.rounds,
                         max_duration_s=args.ov_max_duration_s / args.rounds,
                         threads=args.threads, isolate=False, gpu_fp16=False, dev_stream_repeats=0)
    order = [name for _, proj, peer_name in OV_PAIRS for name in (proj, peer_name)]
    predictions: dict[str, list[int]] = {}
    records: dict[str, list[dict]] = {name: [] for name in order}
    with peer_runner_registered():
        # Which routes can run here (bf16 needs native bf16; the project's runner must exist),
        # and what each compiled model reports it runs with.
        for name in order:
            route = routes[name]
            if route["status"] != "ok":
                continue
            try:
                reason = skip_reason(arts[name], "cpu")
            except (ImportError, ValueError) as e:
                if route["side"] != "project":
                    raise failed(name, "cannot be registered", e) from e
                route.update(status="missing", reason="the project's OpenVINO runner (compress.backends.base "
                             f"'openvino' -> compress.backends.openvino_ir) is not available: {type(e).__name__}: {e}")
                continue
            if reason:
                route.update(status="skipped", reason=reason)
                continue
            try:
                runner = load_runner(arts[name], "cpu", args.threads)
            except Exception as e:  # noqa: BLE001 - reported with the artifact's path
                if route["side"] == "project" and type(e).__name__ == "OpenVinoIrError":  # incomplete directory
                    route.update(status="missing", reason=f"{flags[name]}: {e}; {OV_BUILD_HINT}")
                    continue
                raise failed(name, "cannot load it", e) from e
            route["backend"] = runner.backend
            route["inference"] = compiled_properties(find_compiled_model(runner))
            del runner
            gc.collect()
        for name, route in routes.items():
            if route["status"] != "ok":
                print(f"note: {name} not measured ({route['status']}): {route['reason']}", file=sys.stderr, flush=True)

        for r in range(args.rounds):
            # Round 1 runs the whole dev split; later rounds only re-time (eval_max_rows = --batch
            # keeps the latency batches the same dev rows: rows 0 .. batch-1).
            cfg = base if r == 0 else dataclasses.replace(base, eval_max_rows=args.batch)
            print(f"openvino round {r + 1}/{args.rounds}: "
                  + ", ".join(n for n in order if routes[n]["status"] == "ok"), file=sys.stderr, flush=True)
            for name in order:
                if routes[name]["status"] != "ok":
                    continue
                art, out = arts[name], {}
                try:
                    rec = measure(art, args.data, cfg, parent_predictions=predictions.get(art.parent) if r == 0 else None,
                                  predictions_out=out)[0]
                except Exception as e:  # noqa: BLE001 - reported with the artifact's path
                    raise failed(name, "failed while measured", e) from e
                if rec["status"] != "ok":
                    routes[name].update(status=rec["status"], reason=rec["reason"])
                    continue
                if r == 0:
                    predictions[name] = out["cpu"]
                records[name].append(rec)
                gc.collect()

    for name in order:
        if routes[name]["status"] == "ok":
            routes[name].update(_combine_rounds(records[name], args.seq, args.batch))

    pairs = []
    for precision, proj, peer_name in OV_PAIRS:
        a, b = routes[proj], routes[peer_name]
        entry: dict = {"precision": precision, "project": proj, "optimum_intel": peer_name}
        if a["status"] != "ok" or b["status"] != "ok":
            entry.update(status="incomplete", reason="; ".join(f"{n} {routes[n]['status']}" for n in (proj, peer_name)
                                                              if routes[n]["status"] != "ok"))
            pairs.append(entry)
            continue
        pa, pb = np.asarray(predictions[proj]), np.asarray(predictions[peer_name])
        ratio = b["latency"]["latency_ms_p50"] / a["latency"]["latency_ms_p50"]
        round_ratios = [round(y / x, 4) for x, y in zip(a["latency"]["round_p50_ms"], b["latency"]["round_p50_ms"])]
        if min(round_ratios) >= 1.0:
            speed = "project as fast or faster in every round"
        elif max(round_ratios) < 1.0:
            speed = "optimum-intel faster in every round"
        else:
            speed = "mixed across rounds: the difference is within run-to-run noise"
        acc = (a.get("accuracy"), b.get("accuracy"))
        entry.update(
            status="ok",
            prediction_agreement=round(float((pa == pb).mean()), 6),
            disagreements=int((pa != pb).sum()),
            accuracy_delta_project_minus_optimum_intel=(round(acc[0] - acc[1], 6) if None not in acc else None),
            p50_ratio_optimum_intel_over_project=round(ratio, 4),
            round_p50_ratios=round_ratios,
            speed=speed,
            throughput_ratio_project_over_optimum_intel=round(
                a["throughput"]["throughput_seq_per_s"] / b["throughput"]["throughput_seq_per_s"], 4),
            size_ratio_optimum_intel_over_project=round(b["size_mb"] / a["size_mb"], 4),
        )
        pairs.append(entry)

    return {
        "project_artifacts": {"fp32_dir": str(args.project_ov), "int8_dir": str(args.project_ov_int8),
                              "runner": "compress.backends.base.load_runner(Artifact(name, path, 'openvino', precision), "
                                        "'cpu', threads)"},
        "project_measured": any(r["status"] == "ok" for r in routes.values() if r["side"] == "project"),
        "optimum_intel_route": {**{k: v for k, v in peer.items() if not k.endswith("_dir")}, **shown,
                                "runner": "OptimumIntelRunner: OVModelForSequenceClassification.from_pretrained("
                                          "dir, ov_config=..., device='CPU')",
                                "runtime": runtime,
                                "default_inference_precision": optimum_default},
        "measure": {"harness": "compress.measure.harness.measure", "isolate": False, "target": "cpu",
                    "points": base.points, "seq_len": args.seq, "batch_size": args.batch,
                    "eval_max_length": args.eval_max_length, "eval_batch_size": args.eval_batch_size,
                    "threads": args.threads, "rounds": args.rounds,
                    "order": "interleaved " + "/".join(order) + " per round",
                    "warmup_per_round": args.warmup, "queries_per_round_min": base.min_queries,
                    "seconds_per_round_min": round(base.min_duration_s, 3),
                    "seconds_per_round_max": round(base.max_duration_s, 3),
                    "later_rounds_eval_rows": args.batch},
        "routes": routes,
        "pairs": pairs,
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def render(res: dict) -> str:
    """A readable summary of every check that ran."""
    parts = []
    if "routes" in res:
        parts.append(render_onnx(res))
    if "openvino" in res:
        parts.append(render_openvino(res))
    return "\n\n".join(parts)


def render_openvino(res: dict) -> str:
    """The openvino check's table: one row per route, project and optimum-intel side by side."""
    ov, env = res["openvino"], res["environment"]
    m, route_info = ov["measure"], ov["optimum_intel_route"]
    q = route_info["quantization"]
    cal = q["calibration"]
    routes = ov["routes"]
    seq, batch = m["seq_len"], m["batch_size"]
    metric_names = [k for k in ("accuracy", "f1") if any(r.get(k) is not None for r in routes.values())]
    num = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731

    lines = [
        f"OpenVINO peer check: {res['task']}, {res['dev_rows']} dev rows, openvino {env['openvino']} CPU, "
        f"{m['threads']} inference threads (NUM_STREAMS 1, PERFORMANCE_HINT LATENCY), optimum-intel "
        f"{env['optimum-intel']} / nncf {env['nncf']}; every route measured by {m['harness']} in "
        f"{m['rounds']} interleaved rounds",
        f"optimum-intel route: {route_info['export']['call']} (FP32 IR) -> OVQuantizer static INT8 PTQ, "
        f"OVQuantizationConfig(num_samples={q['num_samples']}) [preset {q['nncf_preset']}, model_type "
        f"{q['model_type']}, fast_bias_correction={q['fast_bias_correction']}], calibrated on {cal['rows']} "
        f"training rows padded to {cal['seq_len']}; compiled with the project's runtime settings per row "
        f"(optimum-intel left to its defaults would run at {route_info.get('default_inference_precision')})",
        f"project route: {ov['project_artifacts']['fp32_dir']}, {ov['project_artifacts']['int8_dir']} via "
        "compress.backends.base.load_runner(Artifact(..., 'openvino', precision)); 'runs at' is the inference "
        "precision each compiled model reports",
        "",
        "| | precision | runs at | " + " | ".join(metric_names)
        + f" | p50 ms (1x{seq}) | seq/s ({batch}x{seq}) | size MiB | agreement with float parent |",
        "|---|---|---|" + "---|" * len(metric_names) + "---|---|---|---|",
    ]
    notes = []
    for _, proj, peer in OV_PAIRS:
        for name in (proj, peer):
            r = routes[name]
            label = f"{'project' if r['side'] == 'project' else 'optimum-intel'} {name}"
            if r["status"] != "ok":
                lines.append(f"| {label} | {r['precision']} | {r['status']} | "
                             + " | ".join("n/a" for _ in metric_names) + " | n/a | n/a | n/a | n/a |")
                notes.append(f"{name} {r['status']}: {r['reason']}")
                continue
            runs_at = r.get("inference", {}).get("INFERENCE_PRECISION_HINT", "?")
            lines.append(
                f"| {label} | {r['precision']} | {runs_at} | "
                + " | ".join(num(r.get(k), ".4f") for k in metric_names)
                + f" | {num(r['latency']['latency_ms_p50'], '.3f')} | "
                f"{num(r['throughput']['throughput_seq_per_s'], '.1f')} | {num(r['size_mb'], '.2f')} | "
                f"{num(r['agreement_with_parent'], '.4f') if r['agreement_with_parent'] is not None else '-'} |")
    lines.append("")
    for pair in ov["pairs"]:
        if pair["status"] != "ok":
            lines.append(f"{pair['precision']}: not compared ({pair['reason']})")
            continue
        delta = pair["accuracy_delta_project_minus_optimum_intel"]
        lines.append(
            f"{pair['precision']}: optimum-intel p50 / project p50 = {pair['p50_ratio_optimum_intel_over_project']:.3f} "
            f"(> 1: project faster; per round {pair['round_p50_ratios']}: {pair['speed']}); project seq/s / "
            f"optimum-intel seq/s = {pair['throughput_ratio_project_over_optimum_intel']:.3f}; prediction "
            f"agreement {pair['prediction_agreement']:.4f} ({pair['disagreements']} rows differ); accuracy "
            f"project - optimum-intel {'n/a' if delta is None else format(delta, '+.4f')}")
    if not ov["project_measured"]:
        lines.append("project side NOT measured: its OpenVINO artifacts are missing (see below); "
                     "only optimum-intel's routes ran")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


def render_onnx(res: dict) -> str:
    """The onnx check's summary table."""
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
        from compress.core.io import atomic_write_json

        atomic_write_json(args.json, res)
        print(f"wrote {args.json}")
    if args.readme is not None:
        from compress.core.io import replace_block

        replace_block(args.readme, PEER_START, PEER_END, render(res))
        print(f"updated {args.readme}")
    return 0


PEER_START, PEER_END = "<!-- peer:start -->", "<!-- peer:end -->"


if __name__ == "__main__":
    sys.exit(main())
