"""Dynamic INT8 quantization of a BERT classifier in PyTorch, and its safe storage.

`quantize(model, cfg)` replaces the chosen nn.Linear layers by
`torch.ao.nn.quantized.dynamic.Linear`: INT8 weights (per output channel by default),
activations quantized on the fly per batch, INT32 accumulation, FP32 out. Embeddings and
LayerNorm have no dynamic INT8 kernels in PyTorch and always stay in float; which Linear
groups stay in float (pooler, classifier, attention, ffn) is `keep_float`.

Storage. A dynamically quantized module keeps its weights in packed fbgemm/onednn
objects that `state_dict` can only pickle, and this project never loads pickles. So an
artifact stores plain tensors in safetensors instead and is rebuilt from them:

    model.safetensors   float tensors of the layers left in float, and for each quantized
                        Linear `<name>.weight_int8` (int8), `<name>.weight_scale` (fp32,
                        per channel or one), `<name>.weight_zero_point` (int64), `<name>.bias`
    quantization.json   route, quantized module names, scheme, the torch version and engine
    config.json, tokenizer files

`load_dynamic_int8(dir)` builds the float architecture from config.json (random init,
no weights read yet), quantizes exactly the recorded modules, then loads every weight
from safetensors; nothing is unpickled. The rebuilt model gives bit-identical logits to
the one that was saved (tests check it).
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForSequenceClassification

from .config import check
from .io import atomic_dir
from .models import load_saved, load_tokenizer

# Module groups of a BertForSequenceClassification, by module name.
GROUPS = {
    "embeddings": re.compile(r"^bert\.embeddings\."),
    "attention": re.compile(r"^bert\.encoder\.layer\.\d+\.attention\."),
    "ffn": re.compile(r"^bert\.encoder\.layer\.\d+\.(intermediate|output)\.dense$"),
    "pooler": re.compile(r"^bert\.pooler\."),
    "classifier": re.compile(r"^classifier$"),
    "layernorm": re.compile(r"LayerNorm$"),
}
# Dynamic INT8 has no kernels for these in PyTorch: they stay in float whatever the params say.
ALWAYS_FLOAT_TORCH = ("embeddings", "layernorm")


def group_of(module_name: str) -> str | None:
    for g, pattern in GROUPS.items():
        if g != "attention" and pattern.search(module_name):
            return g
    return "attention" if GROUPS["attention"].search(module_name) else None


@dataclass(frozen=True)
class QuantizeConfig:
    # Module groups left in float: embeddings, layernorm, attention, ffn, pooler, classifier.
    keep_float: list[str] = field(default_factory=lambda: ["embeddings", "layernorm", "classifier"])
    per_channel: bool = True  # one scale per output channel (better accuracy, same speed)
    engine: str = "x86"  # torch.backends.quantized.engine: x86 | fbgemm | onednn | qnnpack

    def __post_init__(self):
        for g in self.keep_float:
            check(g in GROUPS, f"keep_float: unknown group '{g}', choose from {', '.join(GROUPS)}")
        for g in ALWAYS_FLOAT_TORCH:
            check(g in self.keep_float,
                  f"keep_float must include '{g}': PyTorch dynamic INT8 quantizes nn.Linear only")
        check(self.engine in ("x86", "fbgemm", "onednn", "qnnpack"),
              f"engine must be x86, fbgemm, onednn or qnnpack, got '{self.engine}'")


def quantizable_linears(model: torch.nn.Module, keep_float: list[str]) -> list[str]:
    """Names of the nn.Linear modules to quantize: every Linear outside the kept groups."""
    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and group_of(n) not in keep_float]


def quantized_linears(model: torch.nn.Module) -> list[str]:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return [n for n, m in model.named_modules() if isinstance(m, DynamicLinear)]


def _qconfig(per_channel: bool):
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig

    return per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig


def _quantize_names(model: torch.nn.Module, names: list[str], per_channel: bool) -> torch.nn.Module:
    from torch.ao.quantization import quantize_dynamic

    return quantize_dynamic(model, {n: _qconfig(per_channel) for n in names}, dtype=torch.qint8)


def quantize(model: torch.nn.Module, cfg: QuantizeConfig) -> torch.nn.Module:
    """A dynamically quantized copy of `model` (the float model is left untouched)."""
    torch.backends.quantized.engine = cfg.engine
    names = quantizable_linears(model, cfg.keep_float)
    if not names:
        raise ValueError(f"keep_float {cfg.keep_float} leaves no Linear layer to quantize")
    return _quantize_names(copy.deepcopy(model).eval(), names, cfg.per_channel)


# --- storage -----------------------------------------------------------------------------

def _int8_tensors(name: str, module) -> dict[str, torch.Tensor]:
    w, b = module._weight_bias()  # w: quantized qint8 tensor (out, in)
    out = {f"{name}.weight_int8": w.int_repr().contiguous()}
    if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        out[f"{name}.weight_scale"] = w.q_per_channel_scales().float().contiguous()
        out[f"{name}.weight_zero_point"] = w.q_per_channel_zero_points().long().contiguous()
    else:
        out[f"{name}.weight_scale"] = torch.tensor([w.q_scale()], dtype=torch.float32)
        out[f"{name}.weight_zero_point"] = torch.tensor([w.q_zero_point()], dtype=torch.int64)
    if b is not None:
        out[f"{name}.bias"] = b.detach().float().contiguous()
    return out


def save_dynamic_int8(qmodel: torch.nn.Module, tokenizer, out_dir: str | Path, route: str,
                      extra: dict | None = None) -> None:
    """Write a dynamically quantized BERT classifier as safetensors + JSON (no pickle)."""
    names = quantized_linears(qmodel)
    if not names:
        raise ValueError("the model has no dynamically quantized Linear layers")
    tensors: dict[str, torch.Tensor] = {}
    quantized_prefixes = tuple(n + "." for n in names)
    for key, value in qmodel.state_dict().items():
        # packed params of quantized layers are stored separately below, as plain tensors
        if isinstance(value, torch.Tensor) and not key.startswith(quantized_prefixes):
            tensors[key] = value.detach().contiguous()
    for n in names:
        tensors.update(_int8_tensors(n, qmodel.get_submodule(n)))
    meta = {"route": route, "format": "pytorch_int8", "quantized_modules": names,
            "torch": torch.__version__, "engine": torch.backends.quantized.engine, **(extra or {})}
    with atomic_dir(out_dir) as tmp:
        qmodel.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "quantization.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_dynamic_int8(path: str | Path) -> tuple[torch.nn.Module, object, dict]:
    """Rebuild a model written by save_dynamic_int8: (model, tokenizer, quantization meta)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    path = Path(path)
    meta_path = path / "quantization.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path}: no quantization.json; not a PyTorch INT8 artifact")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    config = BertConfig.from_pretrained(path)
    model = BertForSequenceClassification(config).eval()  # architecture only; weights below
    tensors = load_file(str(path / "model.safetensors"))
    names = meta["quantized_modules"]
    per_channel = any(tensors[f"{n}.weight_scale"].numel() > 1 for n in names)
    torch.backends.quantized.engine = meta.get("engine", torch.backends.quantized.engine)
    model = _quantize_names(model, names, per_channel)
    for n in names:
        mod = model.get_submodule(n)
        if not isinstance(mod, DynamicLinear):
            raise ValueError(f"{path}: module {n} did not become a dynamic INT8 Linear")
        q, s, z = (tensors.pop(f"{n}.weight_int8"), tensors.pop(f"{n}.weight_scale"),
                   tensors.pop(f"{n}.weight_zero_point"))
        if tuple(q.shape) != (mod.out_features, mod.in_features):  # set_weight_bias would not check
            raise ValueError(f"{path}/model.safetensors: {n} has shape {tuple(q.shape)}, config.json "
                             f"implies {(mod.out_features, mod.in_features)}")
        if s.numel() > 1:
            w = torch._make_per_channel_quantized_tensor(q, s.double(), z, 0)
        else:
            w = torch._make_per_tensor_quantized_tensor(q, float(s[0]), int(z[0]))
        mod.set_weight_bias(w, tensors.pop(f"{n}.bias", None))
    # The float rest, tensor by tensor (a quantized module's own load_state_dict wants the
    # pickled packed params this format avoids).
    qprefixes = tuple(n + "." for n in names)
    live = dict([*model.named_parameters(), *model.named_buffers()])
    targets = {k: live[k] for k in model.state_dict() if not k.startswith(qprefixes)}  # persistent only
    missing, unexpected = sorted(set(targets) - set(tensors)), sorted(set(tensors) - set(targets))
    if missing or unexpected:
        raise ValueError(f"{path}/model.safetensors does not match config.json: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    with torch.no_grad():
        for k, v in targets.items():
            if v.shape != tensors[k].shape:
                raise ValueError(f"{path}/model.safetensors: {k} has shape {tuple(tensors[k].shape)}, "
                                 f"config.json implies {tuple(v.shape)}")
            v.copy_(tensors[k])
    return model.eval(), load_tokenizer(path), meta


def count_int8_parameters(model: torch.nn.Module) -> int:
    """Parameters of a partly quantized model: float params plus INT8 weight elements."""
    total = sum(p.numel() for p in model.parameters())
    for n in quantized_linears(model):
        w, b = model.get_submodule(n)._weight_bias()
        total += w.numel() + (b.numel() if b is not None else 0)
    return total


class TorchInt8Runner:
    """PyTorch dynamic INT8 on the CPU (fbgemm/onednn kernels)."""
    backend = "pytorch-cpu"

    def __init__(self, artifact, target: str, threads: int):
        torch.set_num_threads(threads)
        self.model, self.tokenizer, self.meta = load_dynamic_int8(artifact.path)
        self.num_params = count_int8_parameters(self.model)
        self.num_labels = self.model.config.num_labels

    @staticmethod
    def unavailable(target: str) -> str | None:
        return None if target == "cpu" else "PyTorch dynamic INT8 kernels run on the CPU only"

    @torch.inference_mode()
    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.float().numpy()

    def synchronize(self) -> None:
        pass


def quantize_checkpoint(src: str | Path, out_dir: str | Path, cfg: QuantizeConfig) -> dict:
    """The `quantize` verb on a saved float checkpoint: quantize and store; returns a summary."""
    model, tokenizer = load_saved(src)
    qmodel = quantize(model, cfg)
    names = quantized_linears(qmodel)
    save_dynamic_int8(qmodel, tokenizer, out_dir, "pytorch-dynamic", {"config": asdict(cfg)})
    return {"source": str(src), "quantized_modules": len(names),
            "float_linears": [n for n, m in qmodel.named_modules() if isinstance(m, torch.nn.Linear)],
            "config": asdict(cfg)}
