"""Dynamic INT8 of a BERT classifier or tagger in PyTorch with torchao, and its safe storage.

`quantize(model, cfg)` applies torchao's `Int8DynamicActivationInt8WeightConfig` to the
chosen nn.Linear layers: INT8 weights (symmetric, one scale per output channel by
default, `per_channel: false` for one per tensor), activations quantized on the fly per
token (symmetric INT8), INT32 accumulation (`torch._int_mm`), FP32 out. It replaces the
`torch.ao` `quantize_dynamic` route, whose quantized tensors PyTorch 2.13 deprecates.
LayerNorm always stays in float; which Linear groups stay in float (attention, ffn,
pooler, classifier) is `keep_float` (a tagger, BertForTokenClassification, has no pooler:
`pooler` names nothing there). The former `engine` param (torch.backends.quantized
.engine) is gone: torchao chooses its CPU path itself (s8s8 `_int_mm` with AMX, u8s8 on
AVX512-VNNI without it); a params file still naming `engine` is refused as an unknown key.

Word embeddings. The word-embedding table (30,522 x 384, two thirds of the 3x384
student) is stored and held as INT8 rows with one fp32 scale per row (symmetric,
`quantize_rows`) when `quantize_embeddings` is true: `Int8Embedding` gathers the int8 rows
and their scales of the looked-up tokens and multiplies, so the table is never
dequantized as a whole and stays 4x smaller in memory too. Why not torchao's own
embedding quantization: both of torchao 0.18's INT8 weight tensors (`Int8Tensor`,
`IntxUnpackedToInt8Tensor`) implement `embedding` by dequantizing the whole table on every
call, and their fast embedding kernels are ARM-only (docs/backends.md has the error and
cost figures). `quantize_embeddings: false` keeps the table
in FP32 (then `keep_float` may list `embeddings`, which is otherwise a contradiction).

The runner runs eagerly (torch.compile compiles for minutes per batch shape) and is
unavailable on CPUs without INT8 dot-product instructions (no AMX-INT8, AVX512-VNNI or
AVX-VNNI: `torch._int_mm` falls back to a reference loop there, `int8_unavailable`); the
artifacts are then still built and verified (probe logits) and their rows say `skipped`.
The measurements behind both choices are in docs/backends.md.

Storage. torchao's tensor subclasses serialize only through pickle, which this project
never loads. So an artifact stores plain tensors in safetensors and is rebuilt from them:

    model.safetensors   float tensors of the layers left in float; for each quantized
                        Linear `<name>.weight_int8` (int8, out x in), `<name>.weight_scale`
                        (fp32, out x 1 or 1 x 1), `<name>.weight_zero_point` (int8, zeros:
                        symmetric) and `<name>.bias`; with INT8 embeddings
                        `bert.embeddings.word_embeddings.weight_int8` (int8, vocab x hidden)
                        and `.weight_scale` (fp32, vocab x 1)
    quantization.json   route, library and scheme, quantized module names, the sha256 of
                        model.safetensors, a probe batch with its logits, versions
    config.json, tokenizer files

`load_dynamic_int8(dir)` checks the file hash, builds the float architecture from
config.json (the head its `architectures` names, compress.training.models.kind_of; random init, no
weights read yet), quantizes exactly the recorded modules with the recorded torchao
config, loads every tensor from safetensors (shapes and dtypes checked; nothing is
unpickled), then verifies that every rebuilt INT8 weight holds exactly the stored int8
data, scales and zero points and that the probe logits match. The rebuilt model gives
bit-identical logits to the one that was saved (tests check it).
"""
from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig

from compress.core.config import check
from compress.core.errors import UserError
from compress.core.env import versions
from compress.core.io import atomic_dir, sha256_file
from compress.training.models import HEADS, head_class, kind_of, load_saved, load_tokenizer
from compress.backends.registry import Backend, register, write_manifest

BACKEND = register(Backend(
    format="pytorch_int8",
    runners={"cpu": "compress.backends.torchao:TorchInt8Runner",
             "gpu": "skip:PyTorch dynamic INT8 kernels (fbgemm/onednn) run on the CPU only"},
    weight_globs=("*.safetensors",),
    usage="compress.backends.torchao.load_dynamic_int8(path)  # rebuilt from safetensors, no pickle",
    color="#ff7f0e",
    libraries=("torchao",),
    marker="quantization.json",
    default_precision="int8",
))

# Module groups of a BertForSequenceClassification or BertForTokenClassification (which has
# no pooler), by module name.
GROUPS = {
    "embeddings": re.compile(r"^bert\.embeddings\."),
    "attention": re.compile(r"^bert\.encoder\.layer\.\d+\.attention\."),
    "ffn": re.compile(r"^bert\.encoder\.layer\.\d+\.(intermediate|output)\.dense$"),
    "pooler": re.compile(r"^bert\.pooler\."),
    "classifier": re.compile(r"^classifier$"),
    "layernorm": re.compile(r"LayerNorm$"),
}
# No dynamic INT8 kernel: stays in float whatever the params say.
ALWAYS_FLOAT_TORCH = ("layernorm",)
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings"
LIBRARY = "torchao"
SCHEME = "torchao-int8-dynamic/1"  # this module's storage layout; load refuses others
EMBEDDING_SCHEME = "int8-symmetric-per-row"
ACTIVATIONS = "int8 symmetric per token, dynamic"


def group_of(module_name: str) -> str | None:
    for g, pattern in GROUPS.items():
        if g != "attention" and pattern.search(module_name):
            return g
    return "attention" if GROUPS["attention"].search(module_name) else None


@dataclass(frozen=True)
class QuantizeConfig:
    # Module groups left in float: layernorm (always), attention, ffn, pooler, classifier;
    # `embeddings` only together with quantize_embeddings: false.
    keep_float: list[str] = field(default_factory=lambda: ["layernorm", "classifier"])
    per_channel: bool = True  # one weight scale per output channel (else one per tensor)
    # Word-embedding table as INT8 rows + one fp32 scale per row (see the module docstring).
    quantize_embeddings: bool = True

    def __post_init__(self):
        for g in self.keep_float:
            check(g in GROUPS, f"keep_float: unknown group '{g}', choose from {', '.join(GROUPS)}")
        for g in ALWAYS_FLOAT_TORCH:
            check(g in self.keep_float,
                  f"keep_float must include '{g}': dynamic INT8 has no LayerNorm kernels")
        check(any(g not in self.keep_float for g in ("attention", "ffn", "pooler", "classifier")),
              "keep_float leaves no Linear layer to quantize (attention, ffn, pooler, classifier are all listed)")
        check(not (self.quantize_embeddings and "embeddings" in self.keep_float),
              "keep_float lists 'embeddings' but quantize_embeddings is true: drop 'embeddings' from "
              "keep_float (INT8 word embeddings) or set quantize_embeddings: false (FP32 table)")


# --- per-row INT8 (shared with the INC and ONNX Runtime routes) -----------------------------

def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric INT8 with one fp32 scale per row: (int8 [rows, cols], fp32 [rows, 1]) with
    row ~= int8 * scale; scale = max|row| / 127 (1.0 for an all-zero row), range [-127, 127]."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale


class Int8Embedding(torch.nn.Module):
    """An nn.Embedding whose table is INT8 rows with one fp32 scale per row: a lookup
    gathers the int8 rows and the scales of the given ids, casts and multiplies (exactly
    `dequantize_rows(q, s)[ids]`), so the table is never dequantized as a whole."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.register_buffer("weight_int8", torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(num_embeddings, 1))

    @classmethod
    def from_float(cls, emb: torch.nn.Embedding) -> "Int8Embedding":
        out = cls(emb.num_embeddings, emb.embedding_dim, emb.padding_idx)
        out.weight_int8, out.weight_scale = quantize_rows(emb.weight)
        return out

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        f = torch.nn.functional.embedding
        return f(ids, self.weight_int8).float() * f(ids, self.weight_scale)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 per-row scales"


# --- quantization ----------------------------------------------------------------------------

def _ao_config(per_channel: bool):
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, PerRow, PerTensor

    # activations per token (PerRow on the last dim); weights per output channel or per tensor.
    # set_inductor_config=False: torchao would otherwise change torch._inductor's global config.
    return Int8DynamicActivationInt8WeightConfig(
        granularity=[PerRow(), PerRow() if per_channel else PerTensor()], set_inductor_config=False)


def _int8_tensor_type():
    from torchao.quantization import Int8Tensor

    return Int8Tensor


def quantizable_linears(model: torch.nn.Module, keep_float: list[str]) -> list[str]:
    """Names of the nn.Linear modules to quantize: every Linear outside the kept groups."""
    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and group_of(n) not in keep_float]


def quantized_linears(model: torch.nn.Module) -> list[str]:
    """Names of the Linear modules whose weight is a torchao INT8 tensor."""
    int8 = _int8_tensor_type()
    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and isinstance(m.weight, int8)]


def _quantize_names(model: torch.nn.Module, names: list[str], per_channel: bool) -> torch.nn.Module:
    from torchao.quantization import quantize_

    wanted = set(names)
    quantize_(model, _ao_config(per_channel),
              filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and fqn in wanted)
    return model


def _swap_word_embeddings(model: torch.nn.Module, from_float: bool) -> None:
    emb = model.get_submodule(WORD_EMBEDDINGS)
    new = Int8Embedding.from_float(emb) if from_float else \
        Int8Embedding(emb.num_embeddings, emb.embedding_dim, emb.padding_idx)
    model.bert.embeddings.word_embeddings = new


def quantize(model: torch.nn.Module, cfg: QuantizeConfig) -> torch.nn.Module:
    """A dynamically quantized copy of `model` (the float model is left untouched)."""
    names = quantizable_linears(model, cfg.keep_float)
    if not names:
        # e.g. only `pooler` left to quantize, on a tagger, which has none
        no_pooler = not any(group_of(n) == "pooler" for n, _ in model.named_modules())
        raise ValueError(f"keep_float {cfg.keep_float} leaves no Linear layer to quantize"
                         + (" (this model has no pooler)" if no_pooler and "pooler" not in cfg.keep_float else ""))
    q = _quantize_names(copy.deepcopy(model).eval(), names, cfg.per_channel)
    if cfg.quantize_embeddings:
        _swap_word_embeddings(q, from_float=True)
    return q


# --- storage -----------------------------------------------------------------------------

def _versions() -> dict[str, str]:
    return versions("torch", "torchao", "transformers")


def _probe(config) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(min(1000, config.vocab_size - 1), config.vocab_size, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def _int8_tensors(name: str, weight) -> dict[str, torch.Tensor]:
    out = {f"{name}.weight_int8": weight.qdata.contiguous(),
           f"{name}.weight_scale": weight.scale.float().contiguous()}
    if weight.zero_point is not None:
        out[f"{name}.weight_zero_point"] = weight.zero_point.contiguous()
    return out


def config_with_head(model: torch.nn.Module):
    """The model's config, naming its head in `architectures` so that a loader rebuilds the
    same class (compress.training.models.kind_of): a copy with `architectures` set when it names
    none or another head (a tagger built in code), else the config itself, so a classifier's
    config.json is written exactly as before."""
    kind = next((k for k, cls in HEADS.items() if isinstance(model, cls)), None)
    if kind is None or kind_of(model.config) == kind:
        return model.config
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    return config


def save_dynamic_int8(qmodel: torch.nn.Module, tokenizer, out_dir: str | Path, route: str,
                      extra: dict | None = None, parent: str | Path | None = None) -> None:
    """Write a model from `quantize` as safetensors + JSON (no pickle), with a manifest
    naming `parent`, the float directory it came from."""
    names = quantized_linears(qmodel)
    if not names:
        raise ValueError("the model has no torchao INT8 Linear layers (quantize it with compress.backends.torchao.quantize)")
    int8_emb = isinstance(qmodel.get_submodule(WORD_EMBEDDINGS), Int8Embedding)
    tensors: dict[str, torch.Tensor] = {}
    qweights = {f"{n}.weight" for n in names}
    for key, value in qmodel.state_dict().items():
        if key not in qweights:
            tensors[key] = value.detach().contiguous()
    for n in names:
        tensors.update(_int8_tensors(n, qmodel.get_submodule(n).weight))
    per_tensor = [n for n in names if qmodel.get_submodule(n).weight.scale.numel() == 1]
    probe = _probe(qmodel.config)
    with torch.inference_mode():
        logits = qmodel(**probe).logits
    meta = {"route": route, "format": "pytorch_int8", "library": LIBRARY, "scheme": SCHEME,
            "linear": {"config": "Int8DynamicActivationInt8WeightConfig", "per_channel": not per_tensor,
                       "weights": "int8 symmetric per " + ("tensor" if per_tensor else "output channel"),
                       "activations": ACTIVATIONS},
            "quantized_modules": names,
            "word_embeddings": EMBEDDING_SCHEME if int8_emb else "float32",
            "probe": {k: v.tolist() for k, v in probe.items()} | {"logits": logits.tolist()},
            "versions": _versions(), **(extra or {})}
    with atomic_dir(out_dir) as tmp:
        config_with_head(qmodel).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        meta["sha256"] = {"model.safetensors": sha256_file(tmp / "model.safetensors")}
        (tmp / "quantization.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        write_manifest(tmp, "pytorch_int8", "int8", parent=parent and str(parent))


def _check_tensor(where: str, key: str, got: torch.Tensor, shape: tuple, dtype: torch.dtype) -> None:
    if tuple(got.shape) != tuple(shape):
        raise UserError(f"{where}: {key} has shape {tuple(got.shape)}, config.json implies {tuple(shape)}")
    if got.dtype != dtype:
        raise UserError(f"{where}: {key} is {got.dtype}, expected {dtype}")


def load_dynamic_int8(path: str | Path) -> tuple[torch.nn.Module, object, dict]:
    """Rebuild a model written by save_dynamic_int8: (model, tokenizer, quantization meta).
    Raises UserError (a ValueError) naming the file (and module) when anything does not match."""
    path = Path(path)
    meta_path = path / "quantization.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path}: no quantization.json; not a PyTorch INT8 artifact")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("scheme") != SCHEME:
        raise UserError(f"{meta_path}: scheme {meta.get('scheme')!r} (written by "
                         f"{'the torch.ao route' if 'engine' in meta else 'another version'}); this code reads "
                         f"{SCHEME!r}: re-run the quantize stage")
    st = path / "model.safetensors"
    want = meta.get("sha256", {}).get("model.safetensors")
    if not st.is_file():
        raise FileNotFoundError(f"{st}: missing")
    if sha256_file(st) != want:
        raise UserError(f"{st}: sha256 does not match the one in quantization.json; the file changed "
                         "after it was written (re-run the quantize stage)")
    config = BertConfig.from_pretrained(path)
    model = head_class(kind_of(config))(config).eval()  # architecture only; weights below
    tensors = load_file(str(st))
    names = meta["quantized_modules"]
    for n in names:
        if f"{n}.weight_scale" not in tensors:
            raise UserError(f"{st}: no INT8 weight for module {n} listed in quantization.json")
    per_channel = meta.get("linear", {}).get("per_channel", True)
    try:
        model = _quantize_names(model, names, per_channel)
    except AttributeError as e:
        raise UserError(f"{meta_path}: a listed module is not in the architecture of config.json: {e}") from None
    if meta.get("word_embeddings") == EMBEDDING_SCHEME:
        _swap_word_embeddings(model, from_float=False)
    int8 = _int8_tensor_type()
    stored: dict[str, dict[str, torch.Tensor]] = {}
    with torch.no_grad():
        for n in names:
            mod = model.get_submodule(n)
            w = getattr(mod, "weight", None)
            if not isinstance(w, int8):
                raise UserError(f"{st}: module {n} did not become a torchao INT8 Linear")
            parts = {"qdata": (f"{n}.weight_int8", w.qdata), "scale": (f"{n}.weight_scale", w.scale)}
            if w.zero_point is not None:
                parts["zero_point"] = (f"{n}.weight_zero_point", w.zero_point)
            stored[n] = {}
            for attr, (key, live) in parts.items():
                if key not in tensors:
                    raise UserError(f"{st}: {key} is missing")
                t = tensors.pop(key)
                _check_tensor(str(st), key, t, live.shape, live.dtype)
                live.copy_(t)
                stored[n][attr] = t
    # The float rest (and the INT8 embedding buffers), tensor by tensor.
    qweights = {f"{n}.weight" for n in names}
    live = dict([*model.named_parameters(), *model.named_buffers()])
    targets = {k: live[k] for k in model.state_dict() if k not in qweights}  # persistent only
    missing, unexpected = sorted(set(targets) - set(tensors)), sorted(set(tensors) - set(targets))
    if missing or unexpected:
        raise UserError(f"{st} does not match config.json and quantization.json: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    with torch.no_grad():
        for k, v in targets.items():
            _check_tensor(str(st), k, tensors[k], v.shape, v.dtype)
            v.copy_(tensors[k])
    # Checked: every rebuilt INT8 weight holds exactly what the file stores ...
    for n, parts in stored.items():
        w = model.get_submodule(n).weight
        for attr, t in parts.items():
            if not torch.equal(getattr(w, attr), t):
                raise UserError(f"{st}: module {n}: the rebuilt INT8 weight's {attr} differs from the stored one")
    # ... and the model computes what the saved one computed.
    probe = {k: torch.tensor(v) for k, v in meta["probe"].items() if k != "logits"}
    with torch.inference_mode():
        logits = model(**probe).logits
    want = torch.tensor(meta["probe"]["logits"], dtype=logits.dtype)
    if logits.shape != want.shape or (logits - want).abs().max() > 1e-3 + 1e-2 * want.abs().max():
        raise UserError(f"{path}: the rebuilt model's probe logits differ from those in quantization.json "
                         f"(saved with {meta.get('versions')}, running {_versions()}); re-run the quantize stage")
    return model.eval(), load_tokenizer(path), meta


def count_int8_parameters(model: torch.nn.Module) -> int:
    """Weights of a partly quantized model: float parameters, INT8 Linear weights and the
    INT8 word-embedding table (scales are not counted)."""
    total = sum(p.numel() for p in model.parameters())
    return total + sum(m.weight_int8.numel() for m in model.modules() if isinstance(m, Int8Embedding))


def int8_unavailable(flags: dict[str, bool] | None = None) -> str | None:
    """None when the CPU has INT8 dot-product instructions (AMX-INT8, AVX512-VNNI or
    AVX-VNNI), else why the torchao INT8 runner is skipped (see the module docstring).
    `flags` ({flag: bool}) defaults to this CPU's, COMPRESS_CPU_FLAGS overriding them as for
    `env.bf16_unavailable`."""
    if flags is None:
        from compress.core.env import _cpu_flags

        forced = os.environ.get("COMPRESS_CPU_FLAGS")
        flags = {f: True for f in (set(forced.replace(",", " ").split()) if forced is not None else _cpu_flags())}
    if flags.get("amx_int8") or flags.get("avx512_vnni") or flags.get("avx_vnni"):
        return None
    return ("this CPU has no INT8 dot-product instructions (neither AMX-INT8, AVX512-VNNI nor AVX-VNNI in its "
            "flags): torchao's INT8 matmul would run a reference loop, slower than FP32")


class TorchInt8Runner:
    """PyTorch dynamic INT8 (torchao) on the CPU, run eagerly (see the module docstring):
    logits (batch, labels) of a classifier, (batch, seq, tags) of a tagger."""
    backend = "pytorch-cpu"

    def __init__(self, artifact, target: str, threads: int):
        torch.set_num_threads(threads)
        self.model, self.tokenizer, self.meta = load_dynamic_int8(artifact.path)
        self.num_params = count_int8_parameters(self.model)
        self.num_labels = self.model.config.num_labels

    @staticmethod
    def unavailable(target: str) -> str | None:
        return int8_unavailable() if target == "cpu" else "PyTorch dynamic INT8 (torchao) is measured on the CPU only"

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
    save_dynamic_int8(qmodel, tokenizer, out_dir, "pytorch-dynamic", {"config": asdict(cfg)}, parent=src)
    return {"source": str(src), "library": LIBRARY, "quantized_modules": len(names),
            "float_linears": [n for n, m in qmodel.named_modules()
                              if isinstance(m, torch.nn.Linear) and n not in names],
            "word_embeddings": EMBEDDING_SCHEME if cfg.quantize_embeddings else "float32",
            "size_mb": round((Path(out_dir) / "model.safetensors").stat().st_size / 2**20, 3),
            "config": asdict(cfg)}
