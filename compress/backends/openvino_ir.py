"""OpenVINO IR (model.xml + model.bin) of the plain ONNX exports: FP32, BF16 and INT8.

Why OpenVINO: on a 2-core CPU the student spends its time in a dozen GEMMs of a 128-token
sequence. OpenVINO's CPU plugin runs them on oneDNN with INT8 (VNNI/AMX) or BF16
(AVX512-BF16/AMX) kernels and fuses attention into one ScaledDotProductAttention node, so
one IR serves three precisions:

- fp32 (`student_ov`): `ov.convert_model` of the plain ONNX export, saved without FP16
  weight compression. The CPU plugin's default inference precision on a CPU with native
  bf16 is bf16, so the runner asks for f32 explicitly; the IR must match ONNX Runtime FP32
  within `parity_atol` or nothing is written and the stage fails.
- bf16 (`student_ov_bf16`): the same files, run with INFERENCE_PRECISION_HINT=bf16. It is
  skipped (by `runners.runner_class`) on CPUs without native bf16, where it would be
  emulated.
- int8 (`student_ov_int8`): NNCF post-training quantization (`nncf.quantize`, transformer
  model type) calibrated on a seeded sample of *training* rows; its accuracy check reads
  the validation split; dev rows are what we report and never reach either. INT8 here
  means per-channel int8 weights for every MatMul, int8 activations at their inputs
  (FakeQuantize), and the embedding tables stored as int8 with one scale per row.

Accuracy: the INT8 IR and the FP32 IR are scored on rows of the validation split (carved
from the training rows by prepare, never calibrated or trained on). When plain PTQ loses
more than `accuracy_control_max_drop` (relative), `nncf.quantize_with_accuracy_control`
re-quantizes on the same data, reverting the most harmful layers to float until the drop is within the
bound. Which route was taken, and the drops seen, go into openvino.json and the report.

Float parts: what INT8 leaves in float (softmax, LayerNorm, GELU, the residual adds) runs
in `int8_inference_precision`. `auto` tries bf16 on a CPU with native bf16 and keeps it only
while the INT8 IR, scored the way the measurement runs it (length-sorted padded batches of
`check_batch_size` validation rows), stays within `accuracy_control_max_drop` of the FP32
IR at 95% confidence (a paired bootstrap over those rows: a point check at the limit passes
half the IRs whose true drop is the limit); otherwise f32, when that does better. On an AMX Xeon the NCBI-disease student's INT8 IR
scored 81.6 validation F1 with bf16 float parts in batches of 64 (85.4 one row at a time)
and 86.8 with f32 ones, beside 86.5 for the FP32 IR: NNCF's check at batch 1 saw a 1.2%
drop and the measurement a 5.7% one. The chosen precision is written to the IR's
openvino.json, so the runner, the parity check and the measurement all use it, and the
figures of both go into the summary (`float_parts`). The rows, both checks and the choice
live in compress.backends.openvino_check.
The metric (`validate`, NNCF's validation_fn: an aggregate and one value per item) is
accuracy, 1/0 per row, for a classifier. For a tagger the aggregate is the task's primary
metric, entity F1 over the validation sentences' kept words (compress.tasks.iob, conlleval
rules), and an item's value is the share of its words tagged right (each word's first
piece): NNCF picks the items where INT8 and FP32 differ most by that value and ranks
layers by the aggregate on them. The summary's `accuracy_*` fields then hold entity F1
and `metric` says so.

Embeddings: the word-embedding table is two thirds of the student's weights (30522 x 384),
so an artifact with a float table cannot be small. NNCF 3.x quantizes Gather weights itself
(int8, symmetric, one scale per row: Constant(int8) -> Convert -> Multiply(scale[rows, 1]),
the decompression pattern the CPU plugin executes directly). `quantize_embeddings: false`
keeps them in float (an NNCF ignored scope); when NNCF leaves a table in float although
quantization was asked for (another NNCF version), `quantize_embedding_tables` writes the
same per-row pattern itself. `embedding_tables(model)` reads back what each table is
stored as, for the summary and the tests.

Parity: each IR runs real validation batches through the runner (the exact runtime configuration
that is measured) beside ONNX Runtime FP32 on the plain export; max |logit difference| and
argmax agreement are recorded per IR (compress.backends.parity); only FP32 is gated. A tagger's
logits are compared at every real token (attention_mask 1).

Runtime (compress.backends.openvino_runner `OpenVinoRunner`): one compiled model per artifact with dynamic batch and sequence
axes (the CPU plugin caches per-shape kernels), INFERENCE_NUM_THREADS pinned to the
harness's `threads`, one stream, LATENCY hint. The settings an IR is run with are written
to its openvino.json (`runtime`), so the runner, the parity check and the measurement all
use the same ones. OpenVINO's GPU plugin drives Intel GPUs only: on the gpu target the
runner is unavailable unless OpenVINO lists a GPU device.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from compress.core.config import check
from compress.backends.parity import check_settings
from compress.backends.registry import write_manifest
from compress.core.env import versions as env_versions
from compress.core.errors import UserError
from compress.core.io import atomic_dir, atomic_write_json, sha256_file
from compress.backends.openvino_check import QuantizationData, choose_float_parts, quantization_slices, score, validate
from compress.backends.openvino_runner import IR_BIN, IR_XML, META_FILE, compile_config, parity_check, read_meta

PRESETS = ("performance", "mixed")
MODEL_TYPES = ("transformer", "none")
ACCURACY_CONTROL = ("auto", "always", "never")
INT8_HINTS = ("auto", "f32", "bf16")
# files of an ONNX directory that are weights, never copied beside an IR
WEIGHT_SUFFIXES = (".onnx", ".onnx_data", ".data", ".bin", ".xml", ".engine", ".safetensors", ".pt", ".pth")


class OpenVinoParityError(UserError):
    """The FP32 IR and ONNX Runtime FP32 disagree beyond parity_atol."""


# --- configuration -----------------------------------------------------------------------

@dataclass(frozen=True)
class OpenVinoConfig:
    calibration_rows: int = 300  # training rows (one per NNCF sample) that set the INT8 ranges
    validation_rows: int = 1000  # validation-split rows (at most): the PTQ accuracy check / accuracy control
    seed: int = 0  # which training rows
    max_length: int = 128  # tokens per calibration / validation row
    preset: str = "mixed"  # NNCF: mixed (asymmetric activations) | performance (symmetric)
    model_type: str = "transformer"  # NNCF model type: transformer | none
    quantize_embeddings: bool = True  # false: embedding tables stay float (a much larger file)
    accuracy_control: str = "auto"  # auto: only when PTQ loses > max drop | always | never
    accuracy_control_max_drop: float = 0.01  # relative accuracy drop allowed on the validation slice
    # precision of what INT8 leaves in float (attention, LayerNorm, GELU): auto = bf16 where
    # the CPU has native bf16 and the INT8 IR keeps its accuracy there (the float-parts check
    # below), else f32
    int8_inference_precision: str = "auto"
    check_batch_size: int = 64  # the float-parts check scores validation in length-sorted batches of this many (measure.eval_batch_size)
    parity_shapes: list[list[int]] = field(default_factory=lambda: [[1, 8], [4, 32], [8, 128], [2, 256]])
    parity_atol: float = 1.0e-4  # max |logit difference| of the FP32 IR vs ONNX Runtime FP32
    cpu_pinning: bool = False  # ENABLE_CPU_PINNING of the runtime (pinning slows a shared machine)
    threads: int = 2  # for building and checking; measurement uses measure.threads

    def __post_init__(self):
        check(self.calibration_rows >= 1, f"calibration_rows must be >= 1, got {self.calibration_rows}")
        check(self.validation_rows >= 1, f"validation_rows must be >= 1, got {self.validation_rows}")
        check(self.max_length >= 8, f"max_length must be >= 8, got {self.max_length}")
        check(self.preset in PRESETS, f"preset must be one of {', '.join(PRESETS)}, got '{self.preset}'")
        check(self.model_type in MODEL_TYPES,
              f"model_type must be one of {', '.join(MODEL_TYPES)}, got '{self.model_type}'")
        check(self.accuracy_control in ACCURACY_CONTROL,
              f"accuracy_control must be one of {', '.join(ACCURACY_CONTROL)}, got '{self.accuracy_control}'")
        check(0 < self.accuracy_control_max_drop < 1,
              f"accuracy_control_max_drop is a relative drop in (0, 1), got {self.accuracy_control_max_drop}")
        check(self.int8_inference_precision in INT8_HINTS,
              f"int8_inference_precision must be one of {', '.join(INT8_HINTS)}, "
              f"got '{self.int8_inference_precision}'")
        check_settings(self.parity_shapes, self.parity_atol)
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")
        check(self.check_batch_size >= 1, f"check_batch_size must be >= 1, got {self.check_batch_size}")


def versions() -> dict[str, str]:
    return env_versions("openvino", "nncf")


# --- runtime settings --------------------------------------------------------------------

def int8_hint(setting: str) -> str:
    """The inference precision for what an INT8 IR leaves in float."""
    if setting != "auto":
        return setting
    from compress.core.env import bf16_unavailable

    return "f32" if bf16_unavailable() else "bf16"


# the inference precision each IR precision runs with; int8's float parts: int8_hint / the check
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}


def runtime_settings(hint: str, cfg: OpenVinoConfig) -> dict:
    """What an IR is compiled with, threads aside: `hint` the inference precision
    (PRECISION_HINTS, or an INT8 IR's chosen float parts)."""
    return {"inference_precision": hint, "cpu_pinning": cfg.cpu_pinning}


# --- IR directories ----------------------------------------------------------------------

def _copy_side_files(src_dir: Path, dst_dir: Path) -> None:
    """Tokenizer and config.json travel with the IR; weights of other formats do not."""
    for f in src_dir.iterdir():
        if f.is_file() and f.suffix not in WEIGHT_SUFFIXES and f.name != META_FILE:
            shutil.copy2(f, dst_dir / f.name)


def _ir_summary(ir_dir: Path) -> dict:
    files = [ir_dir / IR_XML, ir_dir / IR_BIN]
    return {"size_mb": round(sum(f.stat().st_size for f in files) / 2**20, 3), "sha256": sha256_file(ir_dir / IR_BIN)}


# --- embeddings --------------------------------------------------------------------------

def _const_source(output):
    """The Constant a weight input comes from, looking through Convert/Multiply/Subtract of a
    decompression subgraph: (stored constant, scale constant or None)."""
    node = output.get_node()
    scale = None
    if node.get_type_name() == "Multiply":
        a, b = (i.get_source_output().get_node() for i in node.inputs())
        scale, node = (b, a) if b.get_type_name() == "Constant" else (a, b)
    if node.get_type_name() == "Subtract":  # asymmetric: (q - zero_point) * scale
        node = node.input_value(0).get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return (node, scale) if node.get_type_name() == "Constant" else (None, None)


def embedding_tables(model) -> dict[str, dict]:
    """{Gather node name: {"dtype", "shape", "scale_shape"}} for every Gather that reads
    rows of a constant 2-D table (the word, position and token-type embeddings)."""
    out = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather":
            continue
        const, scale = _const_source(op.input_value(0))
        if const is None or len(const.get_output_partial_shape(0)) != 2:
            continue
        out[op.get_friendly_name()] = {
            "dtype": const.get_output_element_type(0).get_type_name(),
            "shape": [int(d) for d in const.get_output_shape(0)],
            "scale_shape": [int(d) for d in scale.get_output_shape(0)] if scale is not None else None}
    return out


def quantize_embedding_tables(model) -> list[str]:
    """Store each float embedding table as int8 with one symmetric scale per row:
    Constant(int8) -> Convert(f32) -> Multiply(Constant f32 [rows, 1]). Returns the Gather
    nodes rewritten. The model is changed in place."""
    import openvino as ov
    import openvino.opset13 as ops
    import torch

    from compress.backends.torchao import quantize_rows  # the one per-row INT8 scheme every route stores

    done = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather":
            continue
        src = op.input_value(0).get_node()
        if src.get_type_name() != "Constant" or src.get_output_element_type(0) != ov.Type.f32:
            continue
        table = src.get_data()
        if table.ndim != 2:
            continue
        q, scale = (t.numpy() for t in quantize_rows(torch.from_numpy(np.ascontiguousarray(table))))
        name = op.get_friendly_name()
        deq = ops.multiply(ops.convert(ops.constant(q, name=f"{name}/int8_table"), ov.Type.f32),
                           ops.constant(scale.astype(np.float32), name=f"{name}/row_scale"))
        op.input(0).replace_source_output(deq.output(0))
        done.append(name)
    return done


# --- the verbs ---------------------------------------------------------------------------

def convert_onnx(src_dir: str | Path, out_dir: str | Path, cfg: OpenVinoConfig,
                 parity_batches: list[dict[str, np.ndarray]] | None = None) -> dict:
    """The `convert` verb: src_dir/model.onnx (a plain FP32 export) to an FP32 IR in out_dir.

    With parity_batches, the IR is run at fp32 and bf16 beside ONNX Runtime FP32 before it
    is written; an fp32 difference above cfg.parity_atol raises OpenVinoParityError and
    leaves out_dir as it was."""
    import openvino as ov

    from compress.backends.onnx_export import check_onnx_file, count_initializer_params

    src_dir, out_dir = Path(src_dir), Path(out_dir)
    onnx_path = src_dir / "model.onnx"
    check_onnx_file(onnx_path)
    summary: dict = {"source": str(onnx_path), "config": asdict(cfg), "versions": versions()}
    with atomic_dir(out_dir) as tmp:
        t0 = time.perf_counter()
        model = ov.convert_model(str(onnx_path))
        # FP32 on disk: save_model's default FP16 weight compression would cost FP32 parity.
        ov.save_model(model, str(tmp / IR_XML), compress_to_fp16=False)
        summary["convert_s"] = round(time.perf_counter() - t0, 2)
        _copy_side_files(src_dir, tmp)
        meta = {"route": "ov.convert_model(onnx)", "precision": "fp32", "source": str(onnx_path),
                "source_sha256": sha256_file(onnx_path), "num_params": count_initializer_params(onnx_path),
                "runtime": {p: runtime_settings(h, cfg) for p, h in PRECISION_HINTS.items()},
                "embedding_tables": embedding_tables(model), "versions": versions()}
        atomic_write_json(tmp / META_FILE, meta)
        write_manifest(tmp, "openvino", "fp32", parent=str(src_dir))  # replaces the parent's, copied above
        summary.update(_ir_summary(tmp))
        summary["embedding_tables"] = meta["embedding_tables"]
        if parity_batches:
            summary["parity"] = {p: parity_check(tmp, p, onnx_path, parity_batches, cfg.threads)
                                 for p in ("fp32", "bf16") if p == "fp32" or _bf16_ok()}
            fp32 = summary["parity"]["fp32"]
            if fp32["max_abs_diff"] > cfg.parity_atol:
                raise OpenVinoParityError(
                    f"{out_dir / IR_XML}: the FP32 IR differs from ONNX Runtime FP32 by {fp32['max_abs_diff']:.3g} "
                    f"in logits (per shape: {fp32['per_shape']}), above openvino.parity_atol = {cfg.parity_atol}; "
                    "nothing was written")
    return summary


def _bf16_ok() -> bool:
    from compress.core.env import bf16_unavailable

    return bf16_unavailable() is None


def _quantize(model, calibration: list[dict], validation: list[dict], cfg: OpenVinoConfig, controlled: bool):
    import nncf

    kwargs = dict(preset=nncf.QuantizationPreset(cfg.preset), subset_size=len(calibration),
                  model_type=nncf.ModelType.TRANSFORMER if cfg.model_type == "transformer" else None)
    if not cfg.quantize_embeddings:
        names = list(embedding_tables(model))
        kwargs["ignored_scope"] = nncf.IgnoredScope(names=names) if names else None
    calib = nncf.Dataset(calibration)
    if not controlled:
        return nncf.quantize(model, calib, **kwargs)
    return nncf.quantize_with_accuracy_control(
        model, calib, nncf.Dataset(validation, lambda item: item["inputs"]), validate,
        max_drop=cfg.accuracy_control_max_drop, drop_type=nncf.DropType.RELATIVE, **kwargs)


def quantize_openvino(fp32_dir: str | Path, out_dir: str | Path, cfg: OpenVinoConfig, data: QuantizationData,
                      parity_batches: list[dict[str, np.ndarray]] | None = None) -> dict:
    """The `quantize` verb: INT8 IR in out_dir from the FP32 IR in fp32_dir.

    data (openvino_check.quantization_slices): calibration batches (training rows) and
    validation items. Plain PTQ first; accuracy-controlled quantization when its relative
    accuracy drop on the validation items exceeds cfg.accuracy_control_max_drop (or
    always/never, per cfg.accuracy_control)."""
    import openvino as ov

    fp32_dir, out_dir = Path(fp32_dir), Path(out_dir)
    src_meta = read_meta(fp32_dir)
    calibration, validation = data.calibration, data.validation
    if not calibration:
        raise UserError("quantize_openvino needs at least one calibration batch (training rows)")
    core = ov.Core()
    hint = int8_hint(cfg.int8_inference_precision)
    summary: dict = {"source": str(fp32_dir / IR_XML), "config": asdict(cfg), "versions": versions(),
                     "inference_precision": hint, "calibration": data.info}

    def accuracy(model, precision_hint: str) -> float:
        compiled = core.compile_model(model, "CPU", compile_config(precision_hint, cfg.threads, cfg.cpu_pinning))
        return validate(compiled, validation)[0]

    fp32_model = core.read_model(str(fp32_dir / IR_XML))
    routes = []

    def int8_model(controlled: bool):
        model = _quantize(fp32_model.clone(), calibration, validation, cfg, controlled=controlled)
        float_tables = [n for n, t in embedding_tables(model).items() if t["dtype"] in ("f32", "f16", "bf16")]
        if not cfg.quantize_embeddings:
            routes.append("float (quantize_embeddings: false)")
        elif float_tables:  # this NNCF version left them in float: write the same pattern ourselves
            quantize_embedding_tables(model)
            routes.append("own int8 per-row (NNCF left the tables in float)")
        else:
            routes.append("nncf int8 per-row")
        return model

    t0 = time.perf_counter()
    model = int8_model(controlled=cfg.accuracy_control == "always")
    summary["ptq_s"] = round(time.perf_counter() - t0, 2)
    acc = {"fp32": accuracy(fp32_model, "f32")}
    if cfg.int8_inference_precision == "auto" and hint == "bf16" and validation:
        # Float parts in bf16 are faster on a native-bf16 CPU, but on AMX an INT8 IR run so
        # has lost 5 points of entity F1 where f32 float parts lost none, and lost more in
        # padded batches than one row at a time. So the check scores both precisions the way
        # the measurement and `predict` run (length-sorted padded batches) and keeps bf16
        # only while it stays within the max drop of the FP32 IR at 95% confidence, not just
        # at the point (or does no worse than f32).
        def batched(m, h: str):
            compiled = core.compile_model(m, "CPU", compile_config(h, cfg.threads, cfg.cpu_pinning))
            return score(compiled, data.batched)

        hint, summary["float_parts"] = choose_float_parts(
            batched(fp32_model, "f32"), batched(model, "bf16"), batched(model, "f32"), cfg.accuracy_control_max_drop)
        summary["float_parts"].update(rows=len(validation), batch_size=cfg.check_batch_size)
        summary["inference_precision"] = hint
    acc["int8"] = accuracy(model, hint)
    drop = (acc["fp32"] - acc["int8"]) / acc["fp32"] if acc["fp32"] > 0 else 0.0
    summary["approach"] = "accuracy_control" if cfg.accuracy_control == "always" else "ptq"
    summary["validation"] = {"rows": len(validation), "accuracy_fp32": acc["fp32"],
                             "accuracy_int8": acc["int8"], "relative_drop": round(drop, 6)}
    if validation:  # what `validate` scored (the task kind's validation metric)
        summary["validation"]["metric"] = validation[0]["task"].kind_impl.validation_metric_name
    if cfg.accuracy_control == "auto" and drop > cfg.accuracy_control_max_drop:
        summary["ptq_validation"] = dict(summary["validation"])
        t0 = time.perf_counter()
        model = int8_model(controlled=True)
        summary["accuracy_control_s"] = round(time.perf_counter() - t0, 2)
        summary["approach"] = "accuracy_control"
        acc["int8"] = accuracy(model, hint)
        drop = (acc["fp32"] - acc["int8"]) / acc["fp32"] if acc["fp32"] > 0 else 0.0
        summary["validation"].update(accuracy_int8=acc["int8"], relative_drop=round(drop, 6))
    summary["validation"]["within_max_drop"] = bool(drop <= cfg.accuracy_control_max_drop)
    if not summary["validation"]["within_max_drop"]:
        print(f"warning: {out_dir}: the INT8 IR loses {drop:.2%} of the FP32 IR's validation metric "
              f"(max drop {cfg.accuracy_control_max_drop:.2%}) after {summary['approach']}; it is written and "
              "measured, and select's floor decides whether it can ship", flush=True)
    summary["embedding_route"] = routes[-1]
    with atomic_dir(out_dir) as tmp:
        ov.save_model(model, str(tmp / IR_XML), compress_to_fp16=False)
        _copy_side_files(fp32_dir, tmp)
        controlled = summary["approach"] == "accuracy_control"
        meta = {"route": "nncf.quantize_with_accuracy_control" if controlled else "nncf.quantize",
                "precision": "int8", "source": str(fp32_dir / IR_XML), "onnx_source": src_meta["source"],
                "num_params": src_meta["num_params"], "calibration": summary.get("calibration"),
                "runtime": {"int8": runtime_settings(hint, cfg)},
                "embedding_route": summary["embedding_route"],
                "embedding_tables": embedding_tables(model), "validation": summary["validation"],
                "versions": versions()}
        atomic_write_json(tmp / META_FILE, meta)
        write_manifest(tmp, "openvino", "int8", parent=str(fp32_dir))
        summary.update(_ir_summary(tmp))
        summary["embedding_tables"] = meta["embedding_tables"]
        if parity_batches:
            summary["parity"] = {"int8": parity_check(tmp, "int8", src_meta["source"], parity_batches, cfg.threads)}
    return summary


def build_openvino(onnx_dir: str | Path, fp32_dir: str | Path, int8_dir: str | Path, prepared_root: str | Path,
                   cfg: OpenVinoConfig, parity_batches: list[dict[str, np.ndarray]]) -> dict:
    """Both IRs of one plain ONNX export: FP32 (parity-gated) and INT8 (calibrated and
    validated on training rows only)."""
    from compress.training.models import load_tokenizer

    fp32 = convert_onnx(onnx_dir, fp32_dir, cfg, parity_batches)
    data = quantization_slices(prepared_root, load_tokenizer(onnx_dir), cfg)
    int8 = quantize_openvino(fp32_dir, int8_dir, cfg, data, parity_batches)
    return {"fp32": fp32, "int8": int8}
