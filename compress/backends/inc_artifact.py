"""An INC INT8 artifact: its storage without pickle (`save_inc_int8` / `load_inc_int8`)
and its runner (`IncInt8Runner`, the graph lowered to oneDNN INT8 kernels by
`compile_int8`). The quantized model class is compress.backends.inc_graph's `IncInt8Classifier`.

Storage (never pickled)
-----------------------
INC's own `save`/`load` for PT2E models is `torch.export.save/load`; a .pt2 archive may
hold pickled entries that `torch.export.load` unpickles (`torch.load(weights_only=False)`,
`pickle.loads`), so it is not used. Instead `save_inc_int8` stores what deterministically
rebuilds the graph, and `load_inc_int8` rebuilds and verifies it:

    model.safetensors   the weights: each Linear weight the graph quantizes as
                        `<key>_int8` (int8, exactly the graph's quantized weight),
                        `<key>_scale` / `<key>_zero_point` (its weight quantization
                        parameters); with INT8 embeddings the word-embedding table as
                        `<key>_int8` + `<key>_scale` (per row); everything else float.
    config.json, tokenizer files
    inc_int8.json   the chosen config (approach, INC parameters, layers kept in float),
                    every literal quantization parameter of the graph (activation scales
                    and zero points from calibration) by node name, a hash of the
                    per-channel weight scales, which weights are stored INT8, a probe
                    batch with its logits, versions

Loading dequantizes the stored INT8 weights into the float model (a weight w' = q * s
quantizes back to exactly q with the stored scale s, so nothing is lost), exports it
again, quantizes it with the recorded config (one pass of the probe batch fills the weight
observers), writes the recorded weight scales and activation scales into the graph, then
checks that the rebuilt graph quantizes every weight to exactly the stored int8 data, the
weight-scale hash and the probe logits. A mismatch (another torch / torchao / INC version
naming graph nodes differently, or an altered file) is an error naming the file that
says to re-run the INC stage; no calibration data is needed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from compress.core.errors import UserError
from compress.backends.inc_graph import (IncInt8Classifier, _args, _inc, _inc_config, export_classifier, quantized_module_names,
                        versions)
from compress.core.io import atomic_dir
from compress.backends.registry import Backend, register, write_manifest

BACKEND = register(Backend(
    format="pytorch_inc",
    runners={"cpu": "compress.backends.inc_artifact:IncInt8Runner",
             "gpu": "skip:Neural Compressor's PT2E INT8 graph runs on the CPU only"},
    weight_globs=("*.safetensors",),
    usage="compress.backends.inc_artifact.load_inc_int8(path)  # rebuilt and verified, no pickle",
    color="#d62728",
    libraries=("neural-compressor-pt",),
    marker="inc_int8.json",
    default_precision="int8",
))

META_FILE = "inc_int8.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "inc-pt2e-int8/2"  # /2: INT8 weights (and optionally word embeddings) in safetensors
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
EMBEDDING_SCHEME = "int8-symmetric-per-row"


# --- storage without pickle ----------------------------------------------------------------

def _literal_qparams(gm) -> dict[str, dict[str, Any]]:
    """Every numeric literal argument of the graph's quantize/dequantize nodes (activation
    scales and zero points set by calibration, quant ranges), by node name."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and str(n.target).startswith("quantized_decomposed."):
            lits = {str(i): a for i, a in enumerate(n.args)
                    if isinstance(a, (int, float)) and not isinstance(a, bool)}
            out[n.name] = {"target": str(n.target), "args": lits}
    return out


def _weight_qparams_sha(gm, float_keys: set[str]) -> str:
    """Hash of the graph's own buffers (per-channel weight scales and zero points)."""
    h = hashlib.sha256()
    for k, v in sorted(gm.state_dict().items()):
        if k not in float_keys:
            h.update(k.encode())
            h.update(v.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _probe(config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, int(config.vocab_size), (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return ids, mask, torch.zeros_like(ids)


def _float_model(qmodel: IncInt8Classifier):
    from compress.training.models import head_class, kind_of

    hf = head_class(kind_of(qmodel.config))(qmodel.config)
    keys = set(hf.state_dict())
    sd = {k: v for k, v in qmodel.gm.state_dict().items() if k in keys}
    missing = sorted(keys - set(sd))
    if missing:
        raise ValueError(f"the INC graph lacks float weights {missing[:5]}; cannot store it")
    hf.load_state_dict(sd, strict=True)
    return hf.eval()


def _without_timings(obj):
    """obj without the `*_s` (seconds) fields: a stored artifact holds no wall times, so
    the same inputs give the same bytes (the stage report keeps the timings)."""
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items() if not k.endswith("_s")}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    return obj


def _attr(gm, target: str):
    return functools.reduce(getattr, target.split("."), gm)


def _weight_quant_nodes(gm) -> dict[str, Any]:
    """Float weight key -> the graph node quantizing it (its first argument is the
    weight's get_attr): the Linear weights that run as INT8."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and str(n.target).startswith("quantized_decomposed.quantize_per_") \
                and n.args and getattr(n.args[0], "op", None) == "get_attr":
            out[n.args[0].target] = n
    return out


def _resolved_args(gm, node) -> list:
    return [_attr(gm, a.target) if isinstance(a, torch.fx.Node) and a.op == "get_attr" else a for a in node.args]


def _quantized_weight(gm, node) -> torch.Tensor:
    """What the graph's quantize node makes of its weight (the int8 data it runs with)."""
    with torch.no_grad():
        return node.target(*_resolved_args(gm, node), **node.kwargs)


def _weight_qparams(gm, node) -> tuple[torch.Tensor, torch.Tensor, int | None]:
    """(scale, zero point, channel axis or None) of a weight quantize node."""
    args = _resolved_args(gm, node)
    if "per_channel" in str(node.target):
        return args[1].detach().clone(), args[2].detach().clone(), int(args[3])
    return torch.tensor([float(args[1])], dtype=torch.float64), torch.tensor([int(args[2])]), None


def _dequantize_weight(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, axis: int | None) -> torch.Tensor:
    """A float weight that the graph quantizes back to exactly q with this scale."""
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((q.double() - zero.double()) * scale.double()).float()


def save_inc_int8(qmodel: IncInt8Classifier, tokenizer, out_dir: str | Path, extra: dict | None = None,
                  parent: str | Path | None = None) -> None:
    """Store an `inc_autotune` result atomically in out_dir (INT8 + float safetensors +
    inc_int8.json); the INT8 Linear weights and, when the model has them, the INT8 word
    embeddings are stored as int8 data with their scales."""
    from safetensors.torch import save_file

    from compress.backends.torchao import dequantize_rows

    if not isinstance(qmodel, IncInt8Classifier) or qmodel.spec is None:
        raise ValueError("save_inc_int8 stores the model returned by inc_autotune")
    hf = _float_model(qmodel)
    tensors = {k: v.detach().contiguous() for k, v in hf.state_dict().items()}
    int8_weights = {}
    for key, node in sorted(_weight_quant_nodes(qmodel.gm).items()):
        if key not in tensors:
            raise ValueError(f"the INC graph quantizes {key}, which is not a weight of the float model")
        q = _quantized_weight(qmodel.gm, node)
        scale, zero, axis = _weight_qparams(qmodel.gm, node)
        if q.dtype != torch.int8:
            raise ValueError(f"the INC graph quantizes {key} to {q.dtype}; only int8 weights are stored")
        del tensors[key]
        tensors.update({f"{key}_int8": q.contiguous(), f"{key}_scale": scale.contiguous(),
                        f"{key}_zero_point": zero.contiguous()})
        int8_weights[key] = {"axis": axis}
    emb = None
    if qmodel.word_embeddings_int8 is not None:
        q, scale = qmodel.word_embeddings_int8
        if not torch.equal(dequantize_rows(q, scale), tensors[WORD_EMBEDDINGS]):
            raise ValueError("the INC graph's word-embedding table is not the dequantized INT8 table it carries")
        del tensors[WORD_EMBEDDINGS]
        tensors.update({f"{WORD_EMBEDDINGS}_int8": q.contiguous(), f"{WORD_EMBEDDINGS}_scale": scale.contiguous()})
        emb = EMBEDDING_SCHEME
    probe = _probe(qmodel.config)
    with torch.no_grad():
        logits = qmodel(*probe).logits
    meta = {
        "format": FORMAT,
        "spec": qmodel.spec,
        "inc_config": {k: v.to_dict() for k, v in qmodel.gm.qconfig.items()},
        "quantized_modules": quantized_module_names(qmodel),
        "int8_weights": int8_weights,
        "word_embeddings": emb or "float32",
        "qparams": _literal_qparams(qmodel.gm),
        "weight_qparams_sha256": _weight_qparams_sha(qmodel.gm, set(hf.state_dict())),
        "probe": {"input_ids": probe[0].tolist(), "attention_mask": probe[1].tolist(),
                  "logits": logits.tolist()},
        "versions": versions(),
        "extra": _without_timings(extra or {}),
    }
    text = json.dumps(meta, indent=2, default=str) + "\n"
    with atomic_dir(out_dir) as tmp:
        hf.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / META_FILE).write_text(text)
        write_manifest(tmp, "pytorch_inc", "int8", parent=parent and str(parent))


def _float_state_dict(path: Path, meta: dict, expected: dict[str, torch.Tensor]) -> tuple[dict, dict, tuple | None]:
    """The float state dict rebuilt from the stored tensors (INT8 weights dequantized), the
    stored int8 weights by key, and the INT8 word embeddings (rows, scales) or None;
    ValueErrors name the file."""
    from safetensors.torch import load_file

    from compress.backends.torchao import dequantize_rows

    st = path / WEIGHTS_FILE
    if not st.is_file():
        raise UserError(f"{st}: missing; not a complete INC INT8 artifact (re-run the INC stage)")
    tensors = load_file(str(st))
    sd, stored, emb = {}, {}, None

    def take(key: str, dtype: torch.dtype) -> torch.Tensor:
        if key not in tensors:
            raise UserError(f"{st}: {key} is missing")
        t = tensors.pop(key)
        if t.dtype != dtype:
            raise UserError(f"{st}: {key} is {t.dtype}, expected {dtype}")
        return t

    for key, rec in meta.get("int8_weights", {}).items():
        if key not in expected:
            raise UserError(f"{path / META_FILE}: {key} is not a weight of the model config.json describes")
        q = take(f"{key}_int8", torch.int8)
        scale, zero = tensors.pop(f"{key}_scale", None), tensors.pop(f"{key}_zero_point", None)
        if scale is None or zero is None:
            raise UserError(f"{st}: {key}_scale or {key}_zero_point is missing")
        if tuple(q.shape) != tuple(expected[key].shape):
            raise UserError(f"{st}: {key}_int8 has shape {tuple(q.shape)}, config.json implies "
                             f"{tuple(expected[key].shape)}")
        n = q.shape[rec["axis"]] if rec["axis"] is not None else 1
        if scale.numel() != n or zero.numel() != n:
            raise UserError(f"{st}: {key} has {scale.numel()} scales / {zero.numel()} zero points, expected {n}")
        sd[key] = _dequantize_weight(q, scale, zero, rec["axis"])
        stored[key] = (q, scale, zero)
    if meta.get("word_embeddings") == EMBEDDING_SCHEME:
        q = take(f"{WORD_EMBEDDINGS}_int8", torch.int8)
        scale = take(f"{WORD_EMBEDDINGS}_scale", torch.float32)
        rows, dim = expected[WORD_EMBEDDINGS].shape
        if tuple(q.shape) != (rows, dim) or tuple(scale.shape) != (rows, 1):
            raise UserError(f"{st}: {WORD_EMBEDDINGS} is {tuple(q.shape)} with scales {tuple(scale.shape)}, "
                             f"config.json implies ({rows}, {dim}) with ({rows}, 1)")
        sd[WORD_EMBEDDINGS] = dequantize_rows(q, scale)
        emb = (q, scale)
    sd.update(tensors)
    missing, unexpected = sorted(set(expected) - set(sd)), sorted(set(sd) - set(expected))
    if missing or unexpected:
        raise UserError(f"{st} does not match config.json and {META_FILE}: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    for k, v in sd.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise UserError(f"{st}: {k} has shape {tuple(v.shape)}, config.json implies {tuple(expected[k].shape)}")
    return sd, stored, emb


def load_inc_int8(path: str | Path) -> tuple[IncInt8Classifier, Any, dict]:
    """Rebuild a model stored by `save_inc_int8` -> (model, tokenizer, meta); verified
    against the stored int8 weights, the weight-scale hash and the probe logits. Nothing
    is unpickled."""
    from transformers import BertConfig

    from compress.training.models import head_class, kind_of, load_tokenizer

    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise UserError(f"{path}: no {META_FILE}; not an INC INT8 artifact (run the INC stage)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise UserError(f"{meta_path}: format {meta.get('format')!r}, this code reads {FORMAT!r}; "
                        "re-run the INC stage")
    rerun = (f"it was saved with {meta.get('versions')}, this environment has {versions()}; "
             "re-run the INC stage to rebuild it here")
    config = BertConfig.from_pretrained(path)
    hf = head_class(kind_of(config))(config).eval()  # the head config.json names; weights below
    sd, stored, emb = _float_state_dict(path, meta, hf.state_dict())
    hf.load_state_dict(sd, strict=True)
    tokenizer = load_tokenizer(path)
    spec = meta["spec"]
    probe = _probe(hf.config)
    q = _inc()
    # A replay of a recorded recipe, verified below: INC's progress log is noise here.
    inc_log = logging.getLogger("neural_compressor")
    level = inc_log.level
    inc_log.setLevel(logging.ERROR)
    try:
        gm = export_classifier(hf, probe)
        qgm = q.quantize(gm, _inc_config(spec["approach"], spec["params"], spec["fp32_modules"]),
                         run_fn=lambda g: g(*probe), example_inputs=probe)
    finally:
        inc_log.setLevel(level)
    stored_qp, nodes = meta["qparams"], {n.name: n for n in qgm.graph.nodes}
    now = _literal_qparams(qgm)
    if set(stored_qp) != set(now) or any(stored_qp[k]["target"] != now[k]["target"] for k in stored_qp):
        raise UserError(f"{path}: the rebuilt INT8 graph does not match the stored one; {rerun}")
    for name, rec in stored_qp.items():
        args = list(nodes[name].args)
        for i, v in rec["args"].items():
            args[int(i)] = v
        nodes[name].args = tuple(args)
    qgm.recompile()
    # The stored weight scales replace the ones the observers derived from the dequantized weights.
    wnodes = _weight_quant_nodes(qgm)
    if set(wnodes) != set(stored):
        raise UserError(f"{path}: the rebuilt graph quantizes {len(wnodes)} weights, {META_FILE} lists "
                        f"{len(stored)}; {rerun}")
    with torch.no_grad():
        for key, (_, scale, zero) in stored.items():
            node = wnodes[key]
            if "per_channel" in str(node.target):
                for arg, value in ((node.args[1], scale), (node.args[2], zero)):
                    buf = _attr(qgm, arg.target)
                    if buf.shape != value.shape:
                        raise UserError(f"{path / WEIGHTS_FILE}: {key}: {tuple(value.shape)} scales, the graph "
                                         f"has {tuple(buf.shape)}")
                    buf.copy_(value)
    # Checked: the rebuilt graph runs every weight as exactly the stored int8 data ...
    for key, (qdata, _, _) in stored.items():
        if not torch.equal(_quantized_weight(qgm, wnodes[key]), qdata):
            raise UserError(f"{path / WEIGHTS_FILE}: {key}: the rebuilt graph's int8 weight differs from the "
                             f"stored one; {rerun}")
    if _weight_qparams_sha(qgm, set(hf.state_dict())) != meta["weight_qparams_sha256"]:
        raise UserError(f"{path}: rebuilt weight scales differ from the stored ones; {rerun}")
    model = IncInt8Classifier(qgm, hf.config, spec, emb)
    # ... and computes what the saved one computed.
    with torch.no_grad():
        logits = model(*probe).logits
    want = torch.tensor(meta["probe"]["logits"], dtype=logits.dtype)
    if not torch.allclose(logits, want, rtol=1e-4, atol=1e-5):
        raise UserError(f"{path}: rebuilt model's probe logits differ from the stored ones "
                        f"(max {float((logits - want).abs().max()):.3g}); {rerun}")
    return model, tokenizer, meta


# --- running fast --------------------------------------------------------------------------

class _FrozenCompiled(torch.nn.Module):
    """torch.compile of a graph, always called with inductor's `freezing` on: it must be on
    while compiling (first call, recompiles), and `torch.compile(options={"freezing": True})`
    fails on INT8 graphs (UnsupportedOperatorException: onednn.qlinear_prepack.default)."""

    def __init__(self, gm: torch.nn.Module):
        super().__init__()
        self.compiled = torch.compile(gm, dynamic=True)

    def forward(self, *args):
        import torch._inductor.config as inductor_config

        with inductor_config.patch(freezing=True):
            return self.compiled(*args)


def compile_int8(model: IncInt8Classifier) -> IncInt8Classifier:
    """The same model with its graph compiled by inductor (freezing on), which lowers the
    quantize/dequantize patterns to oneDNN INT8 kernels (needs a C++ compiler at run time).
    Compiles lazily on the first call (seconds to tens of seconds); dynamic shapes, so new batch or sequence sizes do not
    recompile. Call it under torch.no_grad(), not inference_mode (freezing then fails the
    same way). Logits differ from the eager (simulated) graph by rounding only (max ~2e-3
    on a 6x384 BERT)."""
    return IncInt8Classifier(_FrozenCompiled(model.gm), model.config, model.spec)


class IncInt8Runner:
    """INC INT8 (PT2E graph compiled by inductor) on the CPU, for the measurement harness.
    Registered as the `pytorch_inc` format (cpu target only)."""
    backend = "inc-int8-cpu"

    def __init__(self, artifact, target: str, threads: int, compile: bool = True):
        torch.set_num_threads(threads)
        model, self.tokenizer, self.meta = load_inc_int8(artifact.path)
        self.num_labels = model.config.num_labels
        self.num_params = sum(v.numel() for k, v in model.gm.state_dict().items() if not k.startswith("_"))
        self.model = compile_int8(model) if compile else model

    @staticmethod
    def unavailable(target: str) -> str | None:
        return None if target == "cpu" else "INC PT2E INT8 (oneDNN kernels via inductor) runs on the CPU only"

    @torch.no_grad()  # not inference_mode: inductor's freezing then fails on onednn.qlinear_prepack
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.model(*_args(batch)).logits.float().numpy()

    def synchronize(self) -> None:
        pass
