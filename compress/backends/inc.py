"""Accuracy-aware INT8 with Intel Neural Compressor 3.x (`neural_compressor.torch`).

`inc_autotune(model, eval_fn, calib_batches, cfg, objective)` runs INC's `autotune` over an
ordered list of INT8 configs and keeps the first whose validation score (`eval_fn`: the task's
primary metric, named by `objective`: accuracy for a classifier, entity F1 for a tagger)
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
compress.backends.inc_artifact `compile_int8` and `IncInt8Runner`. A GraphModule from torch.export refuses `.eval()`,
`.train()` and keyword inputs, so it is wrapped in `IncInt8Classifier`, which takes the
usual `input_ids / attention_mask / token_type_ids` and has `.config`, like the float model.

Word embeddings (`quantize_embeddings`, default true)
-----------------------------------------------------
INC's PT2E INT8 quantizes Linear layers only, and the word-embedding table (30,522 x 384)
is most of a small student's weights. With `quantize_embeddings` the table is made INT8
with one fp32 scale per row (`compress.backends.torchao.quantize_rows`, symmetric) *before* the model is exported, so the float
baseline, every trial and the stored artifact all run exactly the dequantized per-row
table: the accuracy INC tunes on and the stage measures is that of what is shipped. The
baseline is then "FP32 with INT8 word embeddings"; the stage's comparison with the FP32
parent shows the whole loss. `quantize_embeddings: false` keeps the FP32 table.

Storage (never pickled): compress.backends.inc_artifact, which also loads and runs an artifact.
"""
from __future__ import annotations

import copy
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch

from compress.core.config import check
from compress.core.errors import UserError
from compress.backends.inc_artifact import EMBEDDING_SCHEME, WORD_EMBEDDINGS
from compress.backends.inc_graph import (IncInt8Classifier, _args, _inc, _inc_config, export_classifier, linear_module_names,
                        quantized_module_names, versions)

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


class IncGoalNotMet(UserError):
    """No tried INC config met the goal on the objective; `.report` holds every trial."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class IncConfig:
    # Approaches in the order their variants are tried (see VARIANTS): "dynamic", "static".
    approaches: list[str] = field(default_factory=lambda: ["dynamic", "static"])
    # Relative loss of the validation objective (the task's primary metric) allowed vs the fp32
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


# --- inputs, export, configs ---------------------------------------------------------------

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

    `eval_fn(model) -> float` is the validation-split score, the metric `objective` names (the task's
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
    from compress.backends.torchao import dequantize_rows, quantize_rows

    work = copy.deepcopy(model).eval()
    table = work.get_parameter(WORD_EMBEDDINGS)
    q, scale = quantize_rows(table)
    with torch.no_grad():
        table.copy_(dequantize_rows(q, scale))
    return work, (q, scale)


def _autotune(q, model, eval_fn, calib: list[tuple], cfg: IncConfig, t0: float, emb=None,
              objective: str = "accuracy"):
    from compress.backends.torchao import config_with_head

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


