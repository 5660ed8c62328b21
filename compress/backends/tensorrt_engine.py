"""TensorRT engines built from the ONNX exports: build, run, and check against ONNX Runtime.

How precision is chosen (and why it is not a builder flag): TensorRT 11 removed the
weak-typing precision flags (`BuilderFlag.FP16`, `BuilderFlag.INT8`) and the INT8
calibrators; TensorRT 10 already deprecated them (calibrators since 10.1, weak typing since
10.12). Both versions build *strongly typed* networks, where every tensor has the type the
graph gives it (10.x: opt in with `NetworkDefinitionCreationFlag.STRONGLY_TYPED`; 11.x:
always on, the flag is ignored). So each precision gets its own ONNX graph, rewritten on
the CPU before TensorRT parses it, and one build path serves TensorRT 10 and 11:

- fp16: the FP32 export converted by ONNX Runtime's float16 converter. Inputs stay int64
  token ids and the output stays FP32 logits; LayerNormalization is kept in FP32 (its
  mean/variance over the hidden size is where FP16 overflows and loses accuracy).
- int8: explicit quantization. ONNX Runtime's `quantize_static` inserts Q/DQ pairs in the
  form TensorRT requires (symmetric signed int8, zero point 0, per-tensor scales) on the
  inputs of the encoder's linear layers (MatMuls with a constant weight), calibrated with
  min/max ranges on a sample of training rows; the ranges are kept in `calibration.json`.
  Everything else (attention scores, softmax, LayerNorm, pooler, classifier) runs in FP32.

The input is the plain FP32 export: a graph fused by ONNX Runtime's transformer optimizer
(com.microsoft Attention, SkipLayerNormalization, ...) holds ONNX Runtime kernels that
TensorRT cannot parse, and is refused with that reason. The rewritten graphs run on ONNX
Runtime CPU too, so the conversion is tested on machines without a GPU; only the TensorRT
build and run need one.

Device buffers are torch CUDA tensors (`data_ptr()` addresses, torch's CUDA streams): no
pycuda. `tensorrt` is imported inside functions only, so this module imports everywhere and
`tensorrt_unavailable()` says why engines cannot be built or run here.

Layout of an engine directory (`build_engine`): model.engine, engine.json (how it was
built), calibration.json (int8 only), the tokenizer and config files copied from the ONNX
directory, and parity.json once `build_engines` has compared it with ONNX Runtime.
"""
from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from compress.core.config import check
from compress.core.errors import UserError
from compress.core.io import atomic_dir, atomic_write_json, sha256_file
from compress.backends.registry import write_manifest
from compress.training.models import load_tokenizer
from compress.backends.onnx_export import count_initializer_params
from compress.backends.tensorrt_runner import (ENGINE_FILE, META_FILE, EngineBuildError, _trt_logger, _trt_major, parity_check,
                              resolve_onnx, tensorrt_unavailable)

PRECISIONS = ("fp16", "int8")
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # each (batch, seq) int64
CALIBRATION_FILE = "calibration.json"
PARITY_FILE = "parity.json"
FP16_KEEP_FP32_OPS = ("LayerNormalization",)
# Files of the ONNX directory that are weights, not tokenizer/config: never copied into an
# engine directory (the measurement harness sizes an artifact by its weight files).
WEIGHT_SUFFIXES = (".onnx", ".onnx_data", ".onnx.data", ".data", ".engine", ".safetensors", ".bin", ".pt", ".pth")
OWN_FILES = (ENGINE_FILE, META_FILE, CALIBRATION_FILE, PARITY_FILE)  # written here, never copied in


# --- configuration -----------------------------------------------------------------------

@dataclass(frozen=True)
class EngineConfig:
    precisions: list[str] = field(default_factory=lambda: ["fp16", "int8"])
    min_shape: list[int] = field(default_factory=lambda: [1, 8])  # [batch, seq]
    opt_shape: list[int] = field(default_factory=lambda: [8, 128])  # the shape kernels are tuned for
    max_shape: list[int] = field(default_factory=lambda: [32, 512])
    workspace_mb: int = 2048  # scratch memory TensorRT may use per layer while building
    calibration_rows: int = 512  # training rows that set the INT8 activation ranges
    calibration_batch_size: int = 16
    # max |logit difference| allowed against ONNX Runtime FP32, per precision
    parity_atol: dict[str, float] = field(default_factory=lambda: {"fp16": 0.05, "int8": 0.5})
    timing_cache: str = ".cache/tensorrt/timing.cache"  # kernel timings, reused across builds

    def __post_init__(self):
        check(len(self.precisions) > 0, f"precisions must name at least one of {', '.join(PRECISIONS)}")
        for p in self.precisions:
            check(p in PRECISIONS, f"precisions: unknown precision '{p}': choose from {', '.join(PRECISIONS)}")
        check(len(set(self.precisions)) == len(self.precisions), f"precisions repeat: {self.precisions}")
        shapes = {"min_shape": self.min_shape, "opt_shape": self.opt_shape, "max_shape": self.max_shape}
        for name, shape in shapes.items():
            check(len(shape) == 2 and all(v >= 1 for v in shape),
                  f"{name} must be [batch, seq] with both >= 1, got {shape}")
        for i, dim in enumerate(("batch", "seq")):
            check(self.min_shape[i] <= self.opt_shape[i] <= self.max_shape[i],
                  f"min_shape <= opt_shape <= max_shape must hold for {dim}, got min_shape "
                  f"{self.min_shape}, opt_shape {self.opt_shape}, max_shape {self.max_shape}")
        check(self.workspace_mb > 0, f"workspace_mb must be > 0, got {self.workspace_mb}")
        check(self.calibration_rows >= 1, f"calibration_rows must be >= 1, got {self.calibration_rows}")
        check(self.calibration_batch_size >= 1,
              f"calibration_batch_size must be >= 1, got {self.calibration_batch_size}")
        # Tolerances for a precision that is not built are allowed (so `precisions: [fp16]`
        # works with the default tolerances); unknown keys are typos and are rejected.
        for p, atol in self.parity_atol.items():
            check(p in PRECISIONS, f"parity_atol: unknown precision '{p}': choose from {', '.join(PRECISIONS)}")
            check(atol > 0, f"parity_atol['{p}'] must be > 0, got {atol}")
        for p in self.precisions:
            check(p in self.parity_atol, f"parity_atol has no tolerance for precision '{p}'")
        check(bool(self.timing_cache.strip()), "timing_cache must be a file path")


# --- the ONNX graph for each precision (CPU only) ----------------------------------------

def onnx_num_labels(onnx_path: str | Path) -> int | None:
    """The logits' last dimension when the graph states it: the labels of a classifier's
    (batch, labels) and the tags of a tagger's (batch, seq, tags) alike."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    last = dims[len(dims) - 1].dim_value if len(dims) else 0
    return int(last) if last > 0 else None


class _Batches:
    """ONNX Runtime CalibrationDataReader over a list of batches (int64 inputs only)."""

    def __init__(self, batches: list[dict[str, np.ndarray]], input_names: list[str]):
        self._batches = batches
        self._names = input_names
        self._next = 0

    def get_next(self):
        if self._next >= len(self._batches):
            return None
        batch = self._batches[self._next]
        self._next += 1
        missing = [n for n in self._names if n not in batch]
        if missing:
            raise UserError(f"calibration batch lacks inputs {missing} (has {sorted(batch)})")
        return {n: np.ascontiguousarray(batch[n], dtype=np.int64) for n in self._names}

    def __len__(self) -> int:
        return len(self._batches)


def prepare_onnx(onnx_path: str | Path, precision: str, out_path: str | Path,
                 calibration_batches: list[dict[str, np.ndarray]] | None = None,
                 calibration_cache: str | Path | None = None) -> dict:
    """Write the graph TensorRT builds for `precision` (fp16 or int8) from the FP32 export
    to out_path; return its recipe (recorded in engine.json).

    int8 needs calibration_batches; calibration_cache, when given, receives the
    calibrated activation ranges (ONNX Runtime's JSON calibration cache)."""
    import onnx

    onnx_path, out_path = Path(onnx_path), Path(out_path)
    model = onnx.load(str(onnx_path))
    # ONNX Runtime's transformer fusions (Attention, SkipLayerNormalization, ... in the
    # com.microsoft domain) are ONNX Runtime kernels: TensorRT's parser does not know them.
    foreign = sorted({f"{n.domain}:{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise UserError(f"{onnx_path}: holds ONNX Runtime-specific fused ops ({', '.join(foreign)}) that "
                        "TensorRT cannot parse; build engines from the unfused FP32 export "
                        "(export_onnx.optimize: false)")
    ops = {n.op_type for n in model.graph.node}
    quantized = ops & {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                       "QLinearMatMul"}
    if quantized:
        raise UserError(f"{onnx_path}: already quantized ({', '.join(sorted(quantized))}); TensorRT "
                        "engines are built from the FP32 ONNX export")
    out_type = model.graph.output[0].type.tensor_type.elem_type
    if out_type != onnx.TensorProto.FLOAT:
        raise UserError(f"{onnx_path}: logits are {onnx.TensorProto.DataType.Name(out_type)}, expected "
                        "FLOAT; TensorRT engines are built from the FP32 ONNX export")

    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16
        from onnxruntime.transformers.onnx_model import OnnxModel

        converted = convert_float_to_float16(model, keep_io_types=True, op_block_list=list(FP16_KEEP_FP32_OPS))
        # The converter appends the Cast nodes it inserts around blocked ops at the end of
        # the node list; sort so the graph is valid ONNX for any consumer.
        wrapped = OnnxModel(converted)
        wrapped.topological_sort()
        onnx.save(wrapped.model, str(out_path))
        return {"method": "onnxruntime float16 converter, strongly typed FP16",
                "kept_fp32_ops": list(FP16_KEEP_FP32_OPS), "io": "int64 token ids in, FP32 logits out"}

    if precision == "int8":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        if not calibration_batches:
            raise UserError(f"{onnx_path}: an int8 engine needs calibration batches (none given)")
        # The linear layers: MatMuls whose weight (input B) is an initializer. The attention
        # MatMuls (both inputs activations) are left in FP32.
        inits = {t.name for t in model.graph.initializer}
        for i, node in enumerate(model.graph.node):
            if not node.name:  # quantize_static selects nodes by name
                node.name = f"{node.op_type}_{i}"
        linear = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
        if not linear:
            raise UserError(f"{onnx_path}: no MatMul with a constant weight to quantize")
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        kwargs = {}
        if calibration_cache is not None and "calibration_cache_path" in inspect.signature(quantize_static).parameters:
            kwargs["calibration_cache_path"] = str(calibration_cache)
        quantize_static(
            model, str(out_path), _Batches(calibration_batches, inputs),
            quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"], nodes_to_quantize=linear,
            per_channel=False, reduce_range=False,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,  # TensorRT: signed int8 only
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={
                "ActivationSymmetric": True, "WeightSymmetric": True,  # TensorRT: zero point 0
                "AddQDQPairToWeight": True,  # FP32 weight -> Q -> DQ; TensorRT folds it to int8
                "OpTypesToExcludeOutputQuantization": ["MatMul"],  # bias Add and GELU stay FP32
            },
            **kwargs,
        )
        return {"method": "explicit quantization (Q/DQ) by onnxruntime quantize_static, strongly typed",
                "quantized": f"{len(linear)} linear-layer MatMuls (constant weights)",
                "activations": "int8, symmetric, per-tensor", "weights": "int8, symmetric, per-tensor",
                "calibration": "MinMax", "calibration_rows": int(sum(len(b["input_ids"]) for b in calibration_batches)),
                "other_ops": "FP32",
                "calibration_cache": CALIBRATION_FILE if "calibration_cache_path" in kwargs else None}

    raise UserError(f"unknown precision '{precision}': choose from {', '.join(PRECISIONS)}")


def take_rows(batches: Iterable[dict[str, np.ndarray]], rows: int) -> list[dict[str, np.ndarray]]:
    """The first `rows` rows of `batches` (the last batch cut short if needed)."""
    out, left = [], rows
    for batch in batches:
        if left <= 0:
            break
        n = len(batch["input_ids"])
        out.append(batch if n <= left else {k: v[:left] for k, v in batch.items()})
        left -= min(n, left)
    return out


def training_batches(prepared_root: str | Path, onnx_path: str | Path, rows: int, batch_size: int,
                     max_length: int = 128, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Calibration data: a seeded random sample of `rows` training rows, tokenized with the
    artifact's own tokenizer (from the ONNX directory), in length-sorted batches (so padding,
    whose activations would widen the ranges, stays small).

    `functools.partial(training_batches, prepared_root)` is a `calibration_batches_fn`."""
    from compress.data.prepare import Prepared
    from compress.data.tokens import collate, encode, eval_batches

    rows = Prepared.open(prepared_root).calibration_rows(rows, seed)
    tokenizer = load_tokenizer(resolve_onnx(onnx_path).parent)
    enc = encode(tokenizer, rows, max_length)
    return [collate(enc, b) for b in eval_batches(enc.lengths(), batch_size)]


# --- build -------------------------------------------------------------------------------

def _parser_error(err) -> str:
    parts = []
    for attr in ("node_operator", "node_name", "desc"):
        getter = getattr(err, attr, None)
        try:
            value = getter() if callable(getter) else None
        except Exception:  # an accessor missing from this TensorRT version
            value = None
        if value not in (None, ""):
            parts.append(str(value))
    return ": ".join(parts) or str(err)


def _attach_timing_cache(config, path: Path) -> bool:
    """Load kernel timings from `path` into the builder config; True when reused. A cache
    from another GPU or TensorRT version is set aside (a fresh one replaces it on save)."""
    data = path.read_bytes() if path.is_file() else b""
    if data:
        try:
            cache = config.create_timing_cache(data)
            if cache is not None and config.set_timing_cache(cache, ignore_mismatch=False):
                return True
        except Exception as e:  # a corrupt file
            print(f"[TensorRT] {path}: unreadable timing cache ({e}); starting a fresh one", file=sys.stderr)
        else:
            print(f"[TensorRT] {path}: timing cache from another GPU or TensorRT version; "
                  "starting a fresh one", file=sys.stderr)
    cache = config.create_timing_cache(b"")
    if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
        raise EngineBuildError("TensorRT could not create an empty timing cache")
    return False


def _save_timing_cache(config, path: Path) -> None:
    blob = config.get_timing_cache().serialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _serialize_network(graph: Path, source: Path, precision: str, cfg: EngineConfig) -> tuple[object, dict]:
    """Parse `graph` (the precision's ONNX) and build it; returns the serialized engine and
    what engine.json records about the build (input types, timing-cache use)."""
    import tensorrt as trt

    logger = _trt_logger()
    logger.errors.clear()
    builder = trt.Builder(logger)
    flags = 0
    if _trt_major(trt.__version__) < 11:  # 11.x: always strongly typed (the flag is deprecated)
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(graph)):
        errors = [_parser_error(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(f"TensorRT {trt.__version__} could not parse the {precision} graph of {source}: "
                               + ("; ".join(errors) or "; ".join(logger.errors) or "no error reported"))

    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    names = [t.name for t in inputs]
    unknown = [n for n in names if n not in INPUT_NAMES]
    if unknown or "input_ids" not in names:
        raise EngineBuildError(f"{source}: graph inputs {names}; expected input_ids and optionally "
                               "attention_mask, token_type_ids")
    profile = builder.create_optimization_profile()
    for t in inputs:
        if len(t.shape) != 2:
            raise EngineBuildError(f"{source}: input {t.name} has shape {tuple(t.shape)}, expected (batch, seq)")
        profile.set_shape(t.name, tuple(cfg.min_shape), tuple(cfg.opt_shape), tuple(cfg.max_shape))

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, cfg.workspace_mb << 20)
    config.add_optimization_profile(profile)
    cache_path = Path(cfg.timing_cache)
    reused = _attach_timing_cache(config, cache_path)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"TensorRT {trt.__version__} failed to build the {precision} engine for {source}: "
                               + ("; ".join(logger.errors) or "no error reported (see the log above)"))
    _save_timing_cache(config, cache_path)
    return serialized, {"inputs": {t.name: str(t.dtype) for t in inputs},
                        "timing_cache": {"path": str(cache_path), "reused": reused}}


def _copy_support_files(src_dir: Path, dst_dir: Path) -> list[str]:
    copied = []
    for f in sorted(src_dir.iterdir()):
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name not in OWN_FILES:
            shutil.copy2(f, dst_dir / f.name)
            copied.append(f.name)
    return copied


def build_engine(onnx_path: str | Path, out_dir: str | Path, precision: str, cfg: EngineConfig,
                 calibration_batches: list[dict[str, np.ndarray]] | None = None) -> dict:
    """Build one engine from the FP32 ONNX export into out_dir (atomically); return a
    summary (what engine.json records). int8 needs calibration_batches."""
    reason = tensorrt_unavailable()
    if reason is not None:
        raise EngineBuildError(f"cannot build TensorRT engines here: {reason}")
    import tensorrt as trt

    if precision not in PRECISIONS:
        raise UserError(f"unknown precision '{precision}': choose from {', '.join(PRECISIONS)}")
    onnx_path = resolve_onnx(onnx_path)
    model_config = {}
    if (onnx_path.parent / "config.json").is_file():
        model_config = json.loads((onnx_path.parent / "config.json").read_text(encoding="utf-8"))
    positions = model_config.get("max_position_embeddings")
    if positions and cfg.max_shape[1] > positions:
        raise UserError(f"tensorrt.max_shape seq {cfg.max_shape[1]} exceeds the model's "
                        f"max_position_embeddings {positions} ({onnx_path.parent / 'config.json'})")
    if precision == "int8":
        calibration_batches = take_rows(calibration_batches or [], cfg.calibration_rows)

    start = time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        graph = tmp / f"model.{precision}.onnx"  # removed before the directory is published
        recipe = prepare_onnx(onnx_path, precision, graph, calibration_batches,
                              calibration_cache=tmp / CALIBRATION_FILE if precision == "int8" else None)
        serialized, info = _serialize_network(graph, onnx_path, precision, cfg)
        graph.unlink()
        with open(tmp / ENGINE_FILE, "wb") as f:
            f.write(serialized)
        copied = _copy_support_files(onnx_path.parent, tmp)
        labels = onnx_num_labels(onnx_path) or len(model_config.get("id2label") or {}) or None
        meta = {
            "format": "tensorrt",
            "precision": precision,
            "recipe": recipe,
            "shapes": {"min": list(cfg.min_shape), "opt": list(cfg.opt_shape), "max": list(cfg.max_shape)},
            "inputs": info["inputs"],
            "num_params": count_initializer_params(onnx_path),
            "num_labels": labels,
            "tensorrt_version": trt.__version__,
            "gpu": torch.cuda.get_device_name(),
            "compute_capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "workspace_mb": cfg.workspace_mb,
            "timing_cache": info["timing_cache"],
            "build_seconds": round(time.perf_counter() - start, 2),
            "onnx": {"path": str(onnx_path), "sha256": sha256_file(onnx_path)},
            "copied_files": copied,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        write_manifest(tmp, "tensorrt", precision, parent=str(onnx_path.parent))  # replaces the copied one
    return {"engine_dir": str(out_dir), **meta}


# --- all engines of a stage --------------------------------------------------------------

CalibrationFn = Callable[[Path, int, int], Iterable[dict[str, np.ndarray]]]


def build_engines(onnx_artifacts: dict[str, Path], out_root: str | Path, cfg: EngineConfig,
                  calibration_batches_fn: CalibrationFn,
                  parity_batches_fn: Callable[[Path], Iterable[dict[str, np.ndarray]]] | None = None) -> list[dict]:
    """Build and parity-check an engine per (ONNX artifact, precision) into
    out_root/<artifact>-<precision>.

    Without TensorRT or CUDA nothing is written and every pair comes back
    `{"artifact", "precision", "status": "skipped", "reason"}`. Otherwise each entry has
    status "built", or "parity_failed" (the engine is kept for inspection, with the reason)
    when its logits differ from ONNX Runtime FP32 by more than cfg.parity_atol. A build
    failure raises.

    calibration_batches_fn(onnx_path, rows, batch_size) gives the INT8 calibration batches
    (e.g. functools.partial(training_batches, prepared_root)); the parity check runs on
    parity_batches_fn(onnx_path) when given (held-out rows are the better test), else on
    the calibration batches."""
    reason = tensorrt_unavailable()
    if reason is not None:
        return [{"artifact": name, "precision": p, "status": "skipped", "reason": reason}
                for name in onnx_artifacts for p in cfg.precisions]
    results = []
    for name, path in onnx_artifacts.items():
        onnx_path = resolve_onnx(path)
        calibration = None
        if "int8" in cfg.precisions or parity_batches_fn is None:
            calibration = take_rows(calibration_batches_fn(onnx_path, cfg.calibration_rows,
                                                           cfg.calibration_batch_size), cfg.calibration_rows)
            if not calibration:
                raise UserError(f"{name}: calibration_batches_fn gave no rows")
        parity_batches = list(parity_batches_fn(onnx_path)) if parity_batches_fn else calibration
        for precision in cfg.precisions:
            out_dir = Path(out_root) / f"{name}-{precision}"
            summary = build_engine(onnx_path, out_dir, precision, cfg,
                                   calibration if precision == "int8" else None)
            parity = parity_check(out_dir, onnx_path, parity_batches, cfg.parity_atol[precision])
            atomic_write_json(out_dir / PARITY_FILE, parity)
            failed = not parity["passed"]
            results.append({
                "artifact": name, "precision": precision,
                "status": "parity_failed" if failed else "built",
                "reason": (f"max |logit difference| vs ONNX Runtime FP32 is {parity['max_abs_diff']:.4g} > "
                           f"atol {parity['atol']}") if failed else None,
                "engine_dir": str(out_dir), "build_seconds": summary["build_seconds"],
                "tensorrt_version": summary["tensorrt_version"], "gpu": summary["gpu"],
                "parity": parity,
            })
    return results
