"""Accuracy-aware INT8 with Intel Neural Compressor 3.x (`neural_compressor.torch`).

`inc_autotune(model, eval_fn, calib_batches, cfg, objective)` runs INC's `autotune` over an
ordered list of INT8 configs and keeps the first whose dev score (`eval_fn`: the task's
primary metric, named by `objective`: accuracy for SST-2/MRPC, entity F1 for CoNLL-2003)
is within `tolerable_loss` (relative) of the float baseline, the MLPerf-style "99% of FP32"
bar at 0.01. The report lists every trial: its config, score (the `accuracy` keys, kept
for compatibility; `objective` names the metric), relative loss, whether it met the goal,
seconds. The model is a BERT classifier or tagger (BertForTokenClassification, whose
logits are (batch, seq, tags) and which has no pooler).
Trials: each approach's variants (VARIANTS) in `approaches` order with the `keep_fp32`
layers in float, then optional `fallback_fp32` trials keeping more layers in float. When
no trial meets the goal, `on_miss="error"` (default) raises IncGoalNotMet carrying the
full report (a stage can write it before failing); `on_miss="best"` returns the most
accurate trial's model, flagged `report["met_goal"] = False`. Shipping a model below the
bar must be asked for.

What INC 3.x does with a PyTorch model on this CPU-only torch (no IPEX installed)
---------------------------------------------------------------------------------
INC 3.x has no eager `torch.ao` route any more: both INT8 configs go through PT2E. The HF
model is captured with `torch.export` (batch and sequence dimensions dynamic), and
torchao's X86InductorQuantizer inserts quantize/dequantize pairs around every nn.Linear:

- "dynamic" (`DynamicQuantConfig`): INT8 weights (per channel or per tensor), activations
  quantized per batch at run time (uint8, asymmetric). `act_sym=True` fails in torchao's
  convert pass ("Expecting single user for quantize_per_tensor_tensor"), so it is not tried.
- "static" (`StaticQuantConfig`, which without IPEX is PT2E static): INT8 per-channel
  weights, uint8 activation scales fixed by calibration (minmax or kl histogram observers,
  asymmetric or symmetric). INC switches static to its deprecated IPEX route when
  intel_extension_for_pytorch has been imported; this module assumes it has not.

INC's `quantize` calibrates only when given a `run_fn`; a dynamic config without one
keeps default weight scales (1.0) and yields garbage (relative logit error 1.0), so the
calibration batches are always run, for both approaches.

The result is a `torch.fx.GraphModule` in "qdq" form, not `torch.ao.nn.quantized.dynamic
.Linear` modules: weights stay fp32 in the graph and are quantized/dequantized on the fly.
Run eagerly it *simulates* INT8 (what the tuning evaluates, and slower than fp32);
`torch.compile` (inductor, freezing) lowers the patterns to oneDNN INT8 kernels, see
`compile_int8` and `IncInt8Runner`. A GraphModule from torch.export refuses `.eval()`,
`.train()` and keyword inputs, so it is wrapped in `IncInt8Classifier`, which takes the
usual `input_ids / attention_mask / token_type_ids` and has `.config`, like the float model.

Word embeddings (`quantize_embeddings`, default true)
-----------------------------------------------------
INC's PT2E INT8 quantizes Linear layers only, and the word-embedding table (30,522 x 384)
is two thirds of the 3x384 student. With `quantize_embeddings` the table is made INT8
with one fp32 scale per row (`compress.quantize.quantize_rows`, symmetric; 0.73% mean
relative row error on the real MiniLM table) *before* the model is exported, so the float
baseline, every trial and the stored artifact all run exactly the dequantized per-row
table: the accuracy INC tunes on and the stage measures is that of what is shipped. The
baseline is then "FP32 with INT8 word embeddings"; the stage's comparison with the FP32
parent shows the whole loss. `quantize_embeddings: false` keeps the FP32 table.

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
                        17.9 MiB for the 3x384 student (FP32 weights: 66 MiB).
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

import copy
import functools
import hashlib
import json
import logging
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from .config import check
from .errors import UserError
from .env import versions as env_versions
from .io import atomic_dir

APPROACHES = ("dynamic", "static")
# The INT8 variants tried for each approach, in order (first = preferred). INC parameter
# names; the layers kept in float are added per trial.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "dynamic": [
        {"w_granularity": "per_channel"},
        {"w_granularity": "per_tensor"},
    ],
    "static": [
        {"act_algo": "minmax", "act_sym": False},
        {"act_algo": "kl", "act_sym": False},
        {"act_algo": "minmax", "act_sym": True},
        {"act_algo": "kl", "act_sym": True},
    ],
}
ON_MISS = ("error", "best")
META_FILE = "inc_int8.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "inc-pt2e-int8/2"  # /2: INT8 weights (and optionally word embeddings) in safetensors
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
EMBEDDING_SCHEME = "int8-symmetric-per-row"
INC_PIP = "neural-compressor-pt==3.10"


class IncGoalNotMet(UserError):
    """No tried INC config met the goal on the objective; `.report` holds every trial."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class IncConfig:
    # Approaches in the order their variants are tried (see VARIANTS): "dynamic", "static".
    approaches: list[str] = field(default_factory=lambda: ["dynamic", "static"])
    # Relative loss of the dev objective (the task's primary metric) allowed vs the fp32
    # baseline: (base - q) / base <= this.
    tolerable_loss: float = 0.01
    max_trials: int = 8  # INC stops after this many trials even if none met the goal
    calibration_rows: int = 256  # rows of the calibration batches run through observers
    # Regular expressions (re.search) on nn.Linear module names kept in float in every trial.
    keep_fp32: list[str] = field(default_factory=lambda: ["pooler", "classifier"])
    # More patterns kept in float by extra trials after all variants (one per approach, its
    # first variant), e.g. r"layer\.\d+\.output\.dense$" (the FFN down-projection).
    fallback_fp32: list[str] = field(default_factory=list)
    # When no trial meets the goal: "error" raises IncGoalNotMet (with the report),
    # "best" returns the most accurate trial's model with report["met_goal"] = False.
    on_miss: str = "error"
    # Word-embedding table as INT8 rows + fp32 per-row scales, applied before tuning so the
    # baseline, the trials and the stored artifact all use it (module docstring).
    quantize_embeddings: bool = True

    def __post_init__(self):
        check(len(self.approaches) > 0, "approaches must name at least one of " + ", ".join(APPROACHES))
        bad = [a for a in self.approaches if a not in APPROACHES]
        check(not bad, f"unknown approaches {bad}: choose from {list(APPROACHES)}")
        check(len(set(self.approaches)) == len(self.approaches), f"approaches repeat: {self.approaches}")
        check(0.0 <= self.tolerable_loss < 1.0, f"tolerable_loss must be in [0, 1), got {self.tolerable_loss}")
        check(self.max_trials >= 1, f"max_trials must be >= 1, got {self.max_trials}")
        check(self.calibration_rows >= 1, f"calibration_rows must be >= 1, got {self.calibration_rows}")
        for key in ("keep_fp32", "fallback_fp32"):
            for p in getattr(self, key):
                check(isinstance(p, str) and p != "", f"{key} entries must be non-empty strings, got {p!r}")
                try:
                    re.compile(p)
                except re.error as e:
                    check(False, f"{key} pattern {p!r} is not a regular expression: {e}")
        check(self.on_miss in ON_MISS, f"on_miss must be one of {list(ON_MISS)}, got {self.on_miss!r}")


# --- INC access --------------------------------------------------------------------------

def _inc():
    """The neural_compressor.torch.quantization module, or a UserError saying what to install."""
    try:
        import neural_compressor.torch.quantization as q
    except ImportError as e:
        raise UserError(f"the INC route needs Intel Neural Compressor: pip install '{INC_PIP}' ({e})") from None
    return q


def versions() -> dict[str, str]:
    return env_versions("torch", "neural-compressor-pt", "neural-compressor", "torchao", "transformers")


# --- the quantized model -----------------------------------------------------------------

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


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
    torchao INT8 weight (the project's `compress.quantize` route) or torch.ao quantized
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


def _calibration(calib_batches: Iterable[dict], rows: int) -> list[tuple]:
    out, n = [], 0
    for batch in calib_batches:
        args = _args(batch)
        take = min(len(args[0]), rows - n)
        out.append(tuple(a[:take] for a in args))
        n += take
        if n >= rows:
            break
    if not out:
        raise UserError("inc_autotune needs at least one calibration batch")
    return out


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


POOLER = "bert.pooler.dense"


def resolve_patterns(patterns: list[str], names: list[str], key: str) -> list[str]:
    """Linear names matching any pattern (re.search); a pattern matching none is an error
    (a typo would otherwise quantize a layer meant to stay float), except one naming the
    pooler of a model without one (a tagger): the default keep_fp32 serves both heads."""
    out = set()
    for p in patterns:
        hit = [n for n in names if re.search(p, n)]
        if not hit and POOLER not in names and re.search(p, POOLER):
            continue
        if not hit:
            raise UserError(f"{key} pattern {p!r} matches no Linear layer; the layers are: {', '.join(names)}")
        out.update(hit)
    return sorted(out)


def _inc_config(approach: str, params: dict, fp32_modules: list[str]):
    q = _inc()
    from neural_compressor.torch.quantization.config import INT8StaticQuantConfig

    cls = q.DynamicQuantConfig if approach == "dynamic" else INT8StaticQuantConfig
    cfg = cls(**params)
    for name in fp32_modules:
        cfg.set_local(name, cls(w_dtype="fp32", act_dtype="fp32"))
    return cfg


def _label(approach: str, params: dict) -> str:
    if approach == "dynamic":
        return f"dynamic/w-{params['w_granularity']}"
    return f"static/act-{params['act_algo']}-{'sym' if params['act_sym'] else 'asym'}"


def plan_trials(cfg: IncConfig, linear_names: list[str]) -> list[dict]:
    """The ordered, duplicate-free trial list: every variant of each approach with
    `keep_fp32` in float, then (if `fallback_fp32`) each approach's first variant with the
    fallback layers in float as well."""
    keep = resolve_patterns(cfg.keep_fp32, linear_names, "keep_fp32")
    trials = [{"name": _label(a, p), "approach": a, "params": dict(p), "fp32_modules": keep}
              for a in cfg.approaches for p in VARIANTS[a]]
    if cfg.fallback_fp32:
        more = sorted(set(keep) | set(resolve_patterns(cfg.fallback_fp32, linear_names, "fallback_fp32")))
        trials += [{"name": _label(a, VARIANTS[a][0]) + "+fallback", "approach": a,
                    "params": dict(VARIANTS[a][0]), "fp32_modules": more} for a in cfg.approaches]
    seen, out = set(), []
    for t in trials:
        key = json.dumps([t["approach"], t["params"], t["fp32_modules"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


# --- tuning --------------------------------------------------------------------------------

def inc_autotune(model, eval_fn: Callable[[torch.nn.Module], float], calib_batches: Iterable[dict],
                 cfg: IncConfig, objective: str = "accuracy") -> tuple[IncInt8Classifier, dict]:
    """Accuracy-aware INT8 of a float BertForSequenceClassification or
    BertForTokenClassification with INC's `autotune`.

    `eval_fn(model) -> float` is the dev score, the metric `objective` names (the task's
    primary metric; higher is better, > 0), recorded as report["objective"]; it receives an
    `IncInt8Classifier` (callable like the HF model, with `.config`): once for the float
    baseline (the exported float graph), then once per trial. `calib_batches` are dicts of
    int64 (batch, seq) arrays or tensors (input_ids, attention_mask, token_type_ids); the
    first `cfg.calibration_rows` rows feed the observers, and the first batch is the export
    example. Trials run in `plan_trials` order; INC stops at the first that meets the goal
    (score >= baseline * (1 - tolerable_loss)) or after `max_trials`.

    Returns (quantized model, report). When no trial meets the goal: `on_miss="error"`
    raises IncGoalNotMet (its `.report` is the full report), `"best"` returns the most
    accurate trial's model with report["met_goal"] False.
    """
    q = _inc()
    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        work, emb = model, None
        if cfg.quantize_embeddings:  # a copy: the caller's model keeps its FP32 table
            work, emb = int8_word_embeddings(model)
        return _autotune(q, work, eval_fn, _calibration(calib_batches, cfg.calibration_rows), cfg, t0, emb,
                         objective)
    finally:
        model.train(was_training)


def int8_word_embeddings(model) -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """(a copy of the float model whose word-embedding table holds its per-row INT8 values
    dequantized, (int8 rows, fp32 per-row scales))."""
    from .quantize import dequantize_rows, quantize_rows

    work = copy.deepcopy(model).eval()
    table = work.get_parameter(WORD_EMBEDDINGS)
    q, scale = quantize_rows(table)
    with torch.no_grad():
        table.copy_(dequantize_rows(q, scale))
    return work, (q, scale)


def _autotune(q, model, eval_fn, calib: list[tuple], cfg: IncConfig, t0: float, emb=None,
              objective: str = "accuracy"):
    from .quantize import config_with_head

    config = config_with_head(model)  # names the head, so the stored artifact reloads as one
    trials = plan_trials(cfg, linear_module_names(model))
    for t in trials:
        t["inc"] = _inc_config(t["approach"], t["params"], t["fp32_modules"])
    gm = export_classifier(model, calib[0])
    export_s = time.perf_counter() - t0

    @torch.no_grad()
    def run_fn(graph):
        for args in calib:
            graph(*args)

    evals: list[tuple[float, float, int | None]] = []  # (accuracy, time it finished, trial index)
    t_start = time.perf_counter()

    def wrapped_eval(graph) -> float:
        idx = None
        if evals:  # a trial: find which planned config INC quantized this graph with
            used = list(getattr(graph, "qconfig", {}).values())
            idx = next((i for i, t in enumerate(trials) if used and t["inc"] == used[0]), None)
            if idx is None:
                raise RuntimeError("INC evaluated a graph built with none of the planned configs")
        with torch.no_grad():
            acc = eval_fn(IncInt8Classifier(graph, config, None if idx is None else _public(trials[idx])))
        if not isinstance(acc, (int, float, np.floating)) or not math.isfinite(float(acc)):
            raise UserError(f"eval_fn must return a finite number, got {acc!r}")
        if not evals and float(acc) <= 0:
            raise UserError(f"the float baseline scored {acc} ({objective}); the goal is relative to it, "
                            "so eval_fn must return a positive score (higher is better)")
        evals.append((float(acc), time.perf_counter(), idx))
        return float(acc)

    tune = q.TuningConfig(config_set=[t["inc"] for t in trials], max_trials=cfg.max_trials,
                          tolerable_loss=cfg.tolerable_loss)
    qgm = q.autotune(gm, tune, eval_fn=wrapped_eval, run_fn=run_fn, example_inputs=tuple(calib[0]))

    baseline = evals[0][0]
    goal = baseline * (1 - cfg.tolerable_loss)  # INC's own stopping test
    records, prev = [], evals[0][1]
    for acc, t_end, idx in evals[1:]:
        records.append({"trial": len(records) + 1, **_public(trials[idx]), "accuracy": acc,
                        "relative_loss": (baseline - acc) / baseline, "met_goal": acc >= goal,
                        "wall_s": round(t_end - prev, 3), "_idx": idx})
        prev = t_end
    met = any(r["met_goal"] for r in records)
    # INC stops at the first trial meeting the goal, else re-quantizes the first most accurate
    chosen = next(r for r in records if r["met_goal"]) if met else max(records, key=lambda r: r["accuracy"])
    best = trials[chosen.pop("_idx")]
    for r in records:
        r.pop("_idx", None)
    if qgm is None or list(qgm.qconfig.values())[0] != best["inc"]:
        raise RuntimeError("INC autotune returned a model that is not the chosen trial's; "
                           f"INC {versions().get('neural-compressor-pt')} may have changed its tuning loop")
    qmodel = IncInt8Classifier(qgm, config, _public(best), emb)
    report = {
        "objective": objective,  # the metric every "accuracy" key below holds
        "baseline_accuracy": baseline,
        "tolerable_loss": cfg.tolerable_loss,
        "goal_accuracy": goal,
        "met_goal": met,
        "chosen": chosen,
        "trials": records,
        "planned": [t["name"] + (f" (fp32: {len(t['fp32_modules'])} layers)") for t in trials],
        "max_trials": cfg.max_trials,
        "quantized_modules": quantized_module_names(qgm),
        "float_linears": sorted(set(linear_module_names(qgm)) - set(quantized_module_names(qgm))),
        "calibration_rows": sum(len(a[0]) for a in calib),
        "word_embeddings": EMBEDDING_SCHEME if emb is not None else "float32",
        "export_s": round(export_s, 3),
        "baseline_eval_s": round(evals[0][1] - t_start, 3),
        "wall_s": round(time.perf_counter() - t0, 3),
        "config": asdict(cfg),
        "versions": versions(),
    }
    if not met and cfg.on_miss == "error":
        tried = "; ".join(f"{r['name']} {r['accuracy']:.4f}" for r in records)
        raise IncGoalNotMet(
            f"no INC INT8 config met the {objective} goal >= {goal:.4f} (baseline {baseline:.4f}, "
            f"tolerable_loss {cfg.tolerable_loss}); tried {tried}. Raise tolerable_loss or "
            "max_trials, add fallback_fp32 patterns, or set on_miss: best to keep the best one",
            report)
    return qmodel, report


def _public(trial: dict) -> dict:
    return {k: v for k, v in trial.items() if k != "inc"}


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
    from .models import head_class, kind_of

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


def save_inc_int8(qmodel: IncInt8Classifier, tokenizer, out_dir: str | Path, extra: dict | None = None) -> None:
    """Store an `inc_autotune` result atomically in out_dir (INT8 + float safetensors +
    inc_int8.json); the INT8 Linear weights and, when the model has them, the INT8 word
    embeddings are stored as int8 data with their scales."""
    from safetensors.torch import save_file

    from .quantize import dequantize_rows

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


def _float_state_dict(path: Path, meta: dict, expected: dict[str, torch.Tensor]) -> tuple[dict, dict, tuple | None]:
    """The float state dict rebuilt from the stored tensors (INT8 weights dequantized), the
    stored int8 weights by key, and the INT8 word embeddings (rows, scales) or None;
    ValueErrors name the file."""
    from safetensors.torch import load_file

    from .quantize import dequantize_rows

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

    from .models import head_class, kind_of, load_tokenizer

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
    Compiles lazily on the first call (15 s for the tiny test BERT, ~20-35 s for 6x384 on
    a loaded 2-core machine); dynamic shapes, so new batch or sequence sizes do not
    recompile. Call it under torch.no_grad(), not inference_mode (freezing then fails the
    same way). Logits differ from the eager (simulated) graph by rounding only (max ~2e-3
    on a 6x384 BERT)."""
    return IncInt8Classifier(_FrozenCompiled(model.gm), model.config, model.spec)


class IncInt8Runner:
    """INC INT8 (PT2E graph compiled by inductor) on the CPU, for the measurement harness.
    Register as ("pytorch_inc", "cpu") -> "compress.inc:IncInt8Runner"."""
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
