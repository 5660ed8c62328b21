"""One parity check for every backend: a built artifact's logits against its reference's
(PyTorch for an ONNX export, ONNX Runtime FP32 for an OpenVINO IR or a TensorRT engine) on
the same input batches.

`compare(reference, candidate, batches, atol)` takes two callables (a collated batch ->
logits) and returns one result schema:

    max_abs_diff      largest |candidate - reference| over every compared position (inf if
                      either side is not finite)
    per_shape         the same per batch shape, "b<batch>_s<seq>"
    argmax_agreement  share of compared positions whose predicted label agrees
    rows              input rows seen
    positions         positions compared: one per row for a classifier's (batch, labels),
                      one per real token for a tagger's (batch, seq, tags)
    atol, passed      when `atol` is given: whether max_abs_diff <= atol

Padding is never compared: what a padded position outputs is never used and may differ
freely between backends (`compared_logits`).
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from compress.core.config import check
from compress.core.errors import UserError

Logits = Callable[[dict[str, np.ndarray]], np.ndarray]



def check_settings(shapes: list[list[int]], atol: float) -> None:
    """The parity settings every backend config validates: at least one [batch, seq] shape,
    each batch >= 1 and seq >= 2, and a positive tolerance."""
    check(len(shapes) >= 1, "parity_shapes must list at least one [batch, seq]")
    for s in shapes:
        check(len(s) == 2 and s[0] >= 1 and s[1] >= 2, f"parity_shapes: each parity shape is [batch >= 1, seq >= 2], got {s}")
    check(atol > 0, f"parity_atol must be > 0, got {atol}")

def compared_logits(got: np.ndarray, ref: np.ndarray, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The positions a parity check compares, (positions, labels) each: the output at every
    position with a real token (attention_mask 1) beneath it, over the leading axes the
    output shares with the mask: the rows of a (batch, labels) output, the real tokens of
    a (batch, seq, labels) one. Refuses outputs of different shapes."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise ValueError(f"logits of shape {got.shape} vs the reference's {ref.shape}")
    mask = np.asarray(batch.get("attention_mask", np.ones_like(batch["input_ids"]))) != 0  # (batch, seq)
    lead = got.ndim - 1  # the axes before the labels
    if not 1 <= lead <= mask.ndim:
        raise ValueError(f"logits of shape {got.shape}: expected (batch, labels) or (batch, seq, labels)")
    if got.shape[:lead] != mask.shape[:lead]:
        raise ValueError(f"attention_mask of shape {mask.shape} does not match the logits' leading axes "
                         f"{got.shape[:lead]}")
    keep = mask.any(axis=tuple(range(lead, mask.ndim)))  # (batch,) or (batch, seq)
    return got[keep], ref[keep]


def compare(reference: Logits, candidate: Logits, batches: Iterable[dict[str, np.ndarray]],
          atol: float | None = None) -> dict:
    """Compare `candidate`'s logits with `reference`'s on every batch (the module
    docstring gives the result). Raises UserError when no batch has a position to compare."""
    per_shape: dict[str, float] = {}
    agree = rows = positions = 0
    for batch in batches:
        bsz, seq = batch["input_ids"].shape
        if bsz == 0:
            continue
        got, ref = compared_logits(candidate(batch), reference(batch), batch)
        rows += bsz
        if len(ref) == 0:
            continue
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        key = f"b{bsz}_s{seq}"
        worst = float(diff.max()) if np.isfinite(diff).all() else float("inf")
        per_shape[key] = max(per_shape.get(key, 0.0), worst)
        agree += int((got.argmax(-1) == ref.argmax(-1)).sum())
        positions += len(ref)
    if positions == 0:
        raise UserError("a parity check needs at least one batch with a real token")
    out = {"max_abs_diff": max(per_shape.values()), "per_shape": per_shape, "argmax_agreement": agree / positions,
           "rows": rows, "positions": positions}
    if atol is not None:
        out.update(atol=atol, passed=bool(out["max_abs_diff"] <= atol))
    return out
