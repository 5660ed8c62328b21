"""The data and the accuracy checks of OpenVINO INT8 (compress.backends.openvino_ir).

Calibration rows come from the training split; every check reads the validation split
(carved from the training rows by prepare, never calibrated or trained on). Dev is what the
reports score and never shapes the quantization.

Two checks read validation:
- NNCF's (`validate`, its validation_fn): one row per item (batch 1, its own length), the
  per-sample metric accuracy control ranks by.
- the float-parts check (`choose_float_parts`): the same rows in length-sorted padded
  batches of `check_batch_size`, built by the same `eval_batches`/`collate`/`batch_labels`
  the measurement runs dev with, because bf16 float parts lose more in padded batches than
  one row at a time (on an AMX Xeon the NCBI-disease student's INT8 IR: 81.6 validation F1
  in batches of 64, 85.4 one row at a time, 86.8 with f32 float parts, FP32 IR 86.5).
  bf16 must stay within the max drop at 95% confidence (compress.measure.drop: a paired
  bootstrap over the rows), not only at the point.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compress.data.prepare import Prepared
from compress.measure.drop import Scored, drop_upper_bound  # noqa: F401  (Scored: this module's score returns it)


@dataclass
class QuantizationData:
    """What quantize_openvino reads. Items are {"inputs", "gold", "task"}: inputs a collated
    batch, gold its labels from the task's encoding (Encoded.batch_labels): (rows,) for a
    classifier, (rows, seq) for a tagger with IGNORE off the scored pieces and on padding."""
    calibration: list[dict]  # input batches, one training row each
    validation: list[dict]  # items, one validation row each (NNCF's accuracy check)
    batched: list[dict]  # the same validation rows as items of check_batch_size rows (the float-parts check)
    info: dict  # where the rows came from, for the summary


def quantization_slices(prepared_root: str | Path, tokenizer, cfg) -> QuantizationData:
    """Calibration rows from the training split, drawn by the one calibration sampler
    (`Prepared.calibration_rows`, cfg.seed), and the checks' rows from the validation split
    (a seeded sample of cfg.validation_rows when it holds more). cfg: an OpenVinoConfig."""
    from compress.data.tokens import collate, encode, eval_batches

    prepared = Prepared.open(prepared_root)
    calib = prepared.calibration_rows(cfg.calibration_rows, cfg.seed)
    val = prepared.validation()
    if len(val) > cfg.validation_rows:
        val = [val[i] for i in random.Random(cfg.seed).sample(range(len(val)), cfg.validation_rows)]
    enc = encode(tokenizer, calib + val, cfg.max_length)
    val_rows = list(range(len(calib), len(enc)))

    def item(idx: list[int]) -> dict:
        inputs = collate(enc, idx)
        return {"inputs": inputs, "gold": enc.batch_labels(idx, inputs["input_ids"].shape[1]), "task": prepared.task}

    lengths = [len(enc.input_ids[k]) for k in val_rows]
    info = {"split": "train", "train_rows": prepared.card["splits"]["train"]["rows"], "calibration_rows": len(calib),
            "validation_split": "validation", "validation_rows": len(val), "seed": cfg.seed}
    return QuantizationData(
        calibration=[collate(enc, [k]) for k in range(len(calib))],
        validation=[item([k]) for k in val_rows],
        batched=[item([val_rows[j] for j in b]) for b in eval_batches(lengths, cfg.check_batch_size)],
        info=info)


def score(compiled, items) -> Scored:
    """The compiled model's predictions over the validation items (any batching)."""
    from compress.backends.openvino_runner import feed
    from compress.tasks.iob import IGNORE

    names = [i.any_name for i in compiled.inputs]
    request = compiled.create_infer_request()
    gold, pred, task = [], [], None
    for item in items:  # NNCF passes an iterable, not a list
        task = item["task"]
        logits = request.infer(feed(names, item["inputs"]))[compiled.output(0)]
        # gold (rows,) or (rows, seq); logits (rows, labels) or (rows, seq, labels): per row
        # its positions (1 or seq) x labels
        for row_gold, row_logits in zip(item["gold"], logits):
            row_gold = np.atleast_1d(row_gold)
            row_logits = np.asarray(row_logits).reshape(len(row_gold), -1)
            keep = row_gold != IGNORE  # the scored positions
            gold.append(row_gold[keep].tolist())
            pred.append(np.argmax(row_logits[keep], -1).tolist())
    return Scored(gold, pred, task)


def validate(compiled, items) -> tuple[float, list[float]]:
    """NNCF's validation_fn contract: the metric over the validation items and one value
    per row. The metric is the task kind's validation metric (accuracy of rows for a
    classifier, entity F1 over the kept words for a tagger: compress.tasks); per row the
    share of its scored positions predicted right (1/0 for a classifier's row; a sentence
    whose words were all cut by truncation scores 1: it has nothing to lose)."""
    s = score(compiled, items)
    per_row = [float(np.mean(np.asarray(g) == np.asarray(p))) if len(g) else 1.0 for g, p in zip(s.gold, s.pred)]
    return s.metric, per_row


def choose_float_parts(fp32_ir: Scored, int8_bf16: Scored, int8_f32: Scored, max_drop: float,
                       level: float = 0.95) -> tuple[str, dict]:
    """`auto`'s choice for an INT8 IR's float parts from its validation predictions with
    bf16 and with f32 float parts, beside the FP32 IR's: bf16 (the faster) while the upper
    `level` bound of its relative drop stays within max_drop, or while f32 does no better;
    else f32. Returns (hint, record)."""
    parent, bf16, f32 = fp32_ir.metric, int8_bf16.metric, int8_f32.metric
    drop = (parent - bf16) / parent if parent > 0 else 0.0
    bound = drop_upper_bound(fp32_ir, int8_bf16, level)
    if bound <= max_drop:
        hint, why = "bf16", f"bf16 within the max drop of the FP32 IR at {level:.0%} confidence (bound {bound:.2%})"
    elif f32 <= bf16:
        hint, why = "bf16", "bf16 not shown within the max drop, but f32 float parts do no better"
    else:
        hint = "f32"
        why = (f"bf16 float parts lost {drop:.2%} of the FP32 IR's metric on validation (upper {level:.0%} bound "
               f"{bound:.2%} > max drop {max_drop:.2%}); f32 kept {f32 / parent if parent > 0 else 0:.2%}")
    return hint, {"fp32_ir": parent, "int8_bf16": bf16, "int8_f32": f32, "bf16_relative_drop": round(drop, 6),
                  "bf16_drop_upper_bound": round(bound, 6), "confidence": level, "chosen": hint, "why": why}
