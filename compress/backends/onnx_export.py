"""ONNX export of a BERT classifier, validated against PyTorch, and ONNX Runtime's
transformer fusions (attention, embedding + LayerNorm, skip + LayerNorm, bias + GELU).

`export_onnx(model_dir, out_dir, cfg, prepared)`:
1. exports with the TorchScript exporter (opset 17): its graph is the one ONNX Runtime's
   fusion patterns are written for (the dynamo exporter's is not fused by
   `onnxruntime.transformers.optimizer` today). Attention runs the eager implementation
   during export for the same reason. Batch and sequence axes are dynamic, on the inputs
   and on the logits of a tagger, (batch, sequence, tags); a classifier's are (batch, labels).
2. `onnx.checker.check_model(full_check=True)`; the file must hold all its weights (no
   external data): BERT-sized models are far below protobuf's 2 GiB limit.
3. optionally fuses the graph (`optimize: true`) and records how many fused Attention
   nodes each model got: the uneven-head pruned student fuses per layer, and a graph that
   did not fuse says so in the summary.
4. parity: real validation sentences at several (batch, seq) shapes, padded batches and a
   sequence longer than the export example included, through PyTorch and through ONNX
   Runtime (the raw export and the fused graph); the stage fails when the max absolute
   logit difference exceeds `parity_atol`. The differences go into the report. A tagger
   is compared at every real token (attention_mask 1); padding positions are meaningless.

The artifact directory holds `model.onnx` (the fused graph when optimize is on), config.json
and the tokenizer files, so the ONNX Runtime runner needs nothing else.
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
from compress.data.prepare import Prepared
from compress.core.errors import UserError
from compress.core.io import atomic_dir, sha256_file
from compress.data.tokens import collate, encode

INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
FUSED_OPS = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
             "BiasGelu", "FastGelu", "Gelu", "LayerNormalization")


class ParityError(UserError):
    """ONNX Runtime and PyTorch disagree beyond the tolerance."""


class OnnxFileError(UserError):
    """An ONNX file is missing, corrupt, or points outside its folder."""


@dataclass(frozen=True)
class ExportConfig:
    opset: int = 17
    example_shape: list[int] = field(default_factory=lambda: [2, 16])  # (batch, seq) traced at export
    # (batch, seq) shapes of the parity check: real validation rows padded to seq; one longer than
    # the example, and batches whose rows have different lengths (padding inside the batch).
    parity_shapes: list[list[int]] = field(default_factory=lambda: [[1, 8], [4, 32], [8, 128], [2, 256]])
    parity_atol: float = 1.0e-4  # max |logit difference| allowed, FP32 vs PyTorch FP32
    optimize: bool = True  # apply onnxruntime.transformers fusions to the exported graph
    threads: int = 2

    def __post_init__(self):
        check(11 <= self.opset <= 21, f"opset must be in [11, 21], got {self.opset}")
        check(len(self.example_shape) == 2 and min(self.example_shape) >= 1,
              f"example_shape is [batch >= 1, seq >= 1], got {self.example_shape}")
        check_settings(self.parity_shapes, self.parity_atol)
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")


# --- checks on ONNX files ----------------------------------------------------------------

def check_onnx_file(path: str | Path) -> None:
    """Refuse a missing, corrupt or externally-stored ONNX file, with the reason."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise OnnxFileError(f"{path}: ONNX file not found; run the stage that exports it")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError and others on truncated files
        raise OnnxFileError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e}); "
                            "re-export it (`dvc repro export_onnx`)") from None
    folder = path.parent.resolve()
    for t in _all_initializers(model):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = dict((e.key, e.value) for e in t.external_data).get("location", "")
            target = (folder / loc).resolve()
            if folder not in target.parents:
                raise OnnxFileError(f"{path}: tensor '{t.name}' points to external data outside the "
                                    f"model folder ({loc}); refused")
            raise OnnxFileError(f"{path}: tensor '{t.name}' is stored as external data ({loc}); this "
                                "project writes self-contained ONNX files only")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:
        raise OnnxFileError(f"{path}: onnx.checker rejected the model: {e}") from None


def _all_initializers(model):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.t is not None and attr.t.name:
                yield attr.t


def op_counts(path: str | Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def count_initializer_params(path: str | Path) -> int:
    import onnx

    return int(sum(np.prod(t.dims) for t in onnx.load(str(path), load_external_data=False).graph.initializer))


# --- ONNX Runtime sessions ---------------------------------------------------------------

def cpu_session(path: str | Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def run_session(session, batch: dict[str, np.ndarray]) -> np.ndarray:
    names = [i.name for i in session.get_inputs()]
    return session.run(["logits"], {k: batch[k] for k in names})[0].astype(np.float32)


# --- export ------------------------------------------------------------------------------

def _export_torchscript(model, path: Path, cfg: ExportConfig, kind: str = "sequence") -> None:
    import torch

    b, s = cfg.example_shape
    ids = torch.full((b, s), 1000, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[0, s // 2:] = 0  # a padded row, so masking is part of the traced graph
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    # a tagger's logits are per token: without a dynamic axis 1 the traced seq would be fixed
    axes["logits"] = {0: "batch", 1: "sequence"} if kind == "token" else {0: "batch"}
    torch.onnx.export(model, (ids, mask, torch.zeros_like(ids)), str(path), dynamo=False,
                      opset_version=cfg.opset, input_names=INPUT_NAMES, output_names=["logits"],
                      dynamic_axes=axes, do_constant_folding=True)


def _optimize(src: Path, dst: Path, config) -> dict:
    from onnxruntime.transformers.optimizer import optimize_model

    # num_heads=0 / hidden_size=0: read them per Attention from the graph, which is what
    # lets a pruned model with a different head count per layer fuse.
    opt = optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
    opt.save_model_to_file(str(dst), use_external_data_format=False)
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    return stats


def parity_batches(prepared: Prepared, tokenizer, shapes: list[list[int]]) -> list[dict[str, np.ndarray]]:
    """Real validation rows at each (batch, seq): the longest and the shortest rows
    together, so every batch but batch-1 ones mixes lengths and carries padding. Parity
    gates a stage (a choice), so it reads validation, never dev (the reports' split)."""
    rows = prepared.validation()
    batches = []
    for b, s in shapes:
        enc = encode(tokenizer, rows, s)
        order = np.argsort(enc.lengths())
        idx = [int(order[-1 - i // 2]) if i % 2 == 0 else int(order[i // 2]) for i in range(b)]
        batches.append(collate(enc, idx, pad_to=s))
    return batches


def torch_logits(model, batch: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.float().numpy()


def parity(session, model, batches: list[dict[str, np.ndarray]]) -> dict:
    """ONNX Runtime against PyTorch on the same batches (compress.backends.parity.compare: max |logit
    difference| overall and per shape, argmax agreement per row or per real token)."""
    from compress.backends.parity import compare

    return compare(lambda b: torch_logits(model, b), lambda b: run_session(session, b), batches)


def export_onnx(model_dir: str | Path, out_dir: str | Path, cfg: ExportConfig, prepared: Prepared,
                plain_out_dir: str | Path | None = None) -> dict:
    """The `export_onnx` verb: a validated ONNX FP32 artifact of a saved PyTorch classifier
    or tagger (the head its config.json names).

    plain_out_dir: also keep the unfused export there (standard ONNX ops only), the input
    TensorRT needs: it cannot parse ONNX Runtime's com.microsoft fused ops."""
    from transformers import BertConfig

    import torch

    from compress.training.models import check_safetensors_dir, head_class, kind_of, load_tokenizer

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    check_safetensors_dir(model_dir)
    torch.set_num_threads(cfg.threads)
    kind = kind_of(BertConfig.from_pretrained(model_dir))
    model = head_class(kind).from_pretrained(
        model_dir, use_safetensors=True, attn_implementation="eager").eval()
    tokenizer = load_tokenizer(model_dir)
    batches = parity_batches(prepared, tokenizer, cfg.parity_shapes)
    summary: dict = {"source": str(model_dir), "config": asdict(cfg)}
    with atomic_dir(out_dir) as tmp:
        raw = tmp / "raw.onnx"
        t0 = time.perf_counter()
        _export_torchscript(model, raw, cfg, kind)
        summary["export_s"] = round(time.perf_counter() - t0, 2)
        check_onnx_file(raw)
        summary["parity_raw"] = parity(cpu_session(raw, cfg.threads), model, batches)
        final = tmp / "model.onnx"
        if cfg.optimize:
            t0 = time.perf_counter()
            summary["fused_ops"] = _optimize(raw, final, model.config)
            summary["optimize_s"] = round(time.perf_counter() - t0, 2)
        else:
            shutil.copy2(raw, final)
            summary["fused_ops"] = {}
        check_onnx_file(final)
        summary["parity"] = parity(cpu_session(final, cfg.threads), model, batches)
        n_attention = summary["fused_ops"].get("Attention", 0) + summary["fused_ops"].get("MultiHeadAttention", 0)
        layers = model.config.num_hidden_layers
        summary["attention_fused"] = f"{n_attention}/{layers} layers"
        if cfg.optimize and n_attention < layers:
            summary["attention_fusion_warning"] = (
                f"only {n_attention} of {layers} attention blocks fused; the rest run as plain MatMul/Softmax")
        for key in ("parity_raw", "parity"):
            diff = summary[key]["max_abs_diff"]
            if diff > cfg.parity_atol:
                raise ParityError(
                    f"{model_dir}: ONNX ({'raw export' if key == 'parity_raw' else 'fused graph'}) differs from "
                    f"PyTorch by {diff:.3g} in logits (per shape: {summary[key]['per_shape']}), above "
                    f"export_onnx.parity_atol = {cfg.parity_atol}; nothing was written")
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, "onnx", "fp32", parent=str(model_dir))
        if plain_out_dir is not None:
            with atomic_dir(plain_out_dir) as ptmp:
                for f in tmp.iterdir():
                    if f.suffix != ".onnx":
                        shutil.copy2(f, ptmp / f.name)
                shutil.copy2(raw, ptmp / "model.onnx")
            summary["plain_export"] = str(plain_out_dir)
        raw.unlink()
        summary["op_counts"] = op_counts(final)
        summary["num_params"] = count_initializer_params(final)
        summary["size_mb"] = round(final.stat().st_size / 2**20, 3)
        summary["sha256"] = sha256_file(final)
    return summary
