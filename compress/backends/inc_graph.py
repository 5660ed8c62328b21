"""What the INC route and its artifacts share: access to INC, the export of a float model
for PT2E quantization, an INC config per trial, and the quantized model
(`IncInt8Classifier`, a torch.export GraphModule taking the usual keyword inputs) with the
names of the Linear layers it holds and of those it quantizes.
"""
from __future__ import annotations

import torch

from compress.core.errors import UserError
from compress.core.env import versions as env_versions

INC_PIP = "neural-compressor-pt==3.10"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def versions() -> dict[str, str]:
    return env_versions("torch", "neural-compressor-pt", "neural-compressor", "torchao", "transformers")


# --- INC access --------------------------------------------------------------------------

def _inc():
    """The neural_compressor.torch.quantization module, or a UserError saying what to install."""
    try:
        import neural_compressor.torch.quantization as q
    except ImportError as e:
        raise UserError(f"the INC route needs Intel Neural Compressor: pip install '{INC_PIP}' ({e})") from None
    return q


# --- inputs, export, configs ---------------------------------------------------------------

def _args(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, token_type_ids) int64 tensors from a batch dict of
    numpy arrays or tensors; a missing mask is all ones, missing type ids all zeros."""
    if "input_ids" not in batch:
        raise UserError(f"a calibration batch needs input_ids (got keys {sorted(batch)})")
    t = {k: torch.as_tensor(v).long() for k, v in batch.items() if k in INPUT_NAMES}
    ids = t["input_ids"]
    if ids.ndim != 2:
        raise UserError(f"input_ids must be (batch, seq), got shape {tuple(ids.shape)}")
    mask = t.get("attention_mask", torch.ones_like(ids))
    types = t.get("token_type_ids", torch.zeros_like(ids))
    return ids, mask, types


def export_classifier(model, example: tuple) -> torch.fx.GraphModule:
    """torch.export the float classifier for PT2E quantization, batch and sequence dynamic."""
    from torch.export import Dim
    from neural_compressor.torch.export import export

    model.eval()
    batch = Dim("batch", min=1)
    seq = Dim("seq", min=1, max=int(model.config.max_position_embeddings))
    try:
        return export(model, example_inputs=tuple(example), dynamic_shapes=({0: batch, 1: seq},) * 3)
    except RuntimeError as e:
        raise UserError(f"torch.export of the model failed, so INC's PT2E INT8 cannot run: {e}") from None


def _inc_config(approach: str, params: dict, fp32_modules: list[str]):
    q = _inc()
    from neural_compressor.torch.quantization.config import INT8StaticQuantConfig

    cls = q.DynamicQuantConfig if approach == "dynamic" else INT8StaticQuantConfig
    cfg = cls(**params)
    for name in fp32_modules:
        cfg.set_local(name, cls(w_dtype="fp32", act_dtype="fp32"))
    return cfg


# --- the quantized model -----------------------------------------------------------------

class IncInt8Classifier(torch.nn.Module):
    """An exported (float or INT8 qdq) BERT classifier or tagger graph behind the HF calling
    convention: `model(input_ids=..., attention_mask=..., token_type_ids=...).logits`.
    Inference only; `spec` is the INC trial it was built with (None: the float graph);
    `word_embeddings_int8` the (int8 rows, fp32 per-row scales) the graph's word-embedding
    table was dequantized from, or None for an FP32 table."""

    def __init__(self, gm: torch.nn.Module, config, spec: dict | None = None,
                 word_embeddings_int8: tuple[torch.Tensor, torch.Tensor] | None = None):
        super().__init__()
        self.gm = gm
        self.config = config
        self.spec = spec
        self.word_embeddings_int8 = word_embeddings_int8
        self.training = False

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return self.gm(input_ids, attention_mask, token_type_ids)

    def train(self, mode: bool = True):
        if mode:
            raise RuntimeError("an INC INT8 graph is inference-only; it cannot be put in training mode")
        self.training = False  # torch.export graphs refuse .eval(): do not recurse into them
        return self


def _graph(model) -> torch.fx.GraphModule | None:
    gm = model.gm if isinstance(model, IncInt8Classifier) else model
    return gm if isinstance(gm, torch.fx.GraphModule) else None


_LINEAR_TARGETS = {torch.ops.aten.linear.default}


def _module_of(node) -> str | None:
    stack = node.meta.get("nn_module_stack")
    return list(stack.values())[-1][0] if stack else None  # innermost module's path


def _is_int8_dequant(node) -> bool:
    if getattr(node, "op", None) != "call_function":
        return False
    if not str(node.target).startswith("quantized_decomposed.dequantize_per_"):
        return False
    dtypes = [a for a in list(node.args) + list(node.kwargs.values()) if isinstance(a, torch.dtype)]
    return any(d in (torch.int8, torch.uint8) for d in dtypes)


def linear_module_names(model) -> list[str]:
    """Names of every Linear layer: nn.Linear / quantized Linear modules of an eager model,
    or the module each linear op of an exported graph came from."""
    gm = _graph(model)
    if gm is not None:
        return sorted({_module_of(n) for n in gm.graph.nodes
                       if n.op == "call_function" and n.target in _LINEAR_TARGETS} - {None})
    kinds = (torch.nn.Linear, torch.ao.nn.quantized.Linear, torch.ao.nn.quantized.dynamic.Linear)
    return sorted(n for n, m in model.named_modules() if isinstance(m, kinds))


def _torchao_int8(module) -> bool:
    try:
        from torchao.quantization import Int8Tensor
    except ImportError:
        return False
    return isinstance(module, torch.nn.Linear) and isinstance(module.weight, Int8Tensor)


def quantized_module_names(model) -> list[str]:
    """Names of the Linear layers that run with INT8 weights: in an INC graph, those whose
    weight comes through an int8 dequantize node; in an eager model, Linear modules with a
    torchao INT8 weight (the project's `compress.backends.torchao` route) or torch.ao quantized
    Linear modules."""
    gm = _graph(model)
    if gm is not None:
        names = set()
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target in _LINEAR_TARGETS and len(n.args) > 1 \
                    and _is_int8_dequant(n.args[1]):
                names.add(_module_of(n))
        return sorted(names - {None})
    kinds = (torch.ao.nn.quantized.Linear, torch.ao.nn.quantized.dynamic.Linear)
    return sorted(n for n, m in model.named_modules() if isinstance(m, kinds) or _torchao_int8(m))


