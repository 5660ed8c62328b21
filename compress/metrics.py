"""Task metrics from logits: accuracy for every task, F1 of the positive class for MRPC."""
from __future__ import annotations

import numpy as np


def classification_metrics(logits: np.ndarray, labels: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    pred = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    out = {}
    for name in names:
        if name == "accuracy":
            out["accuracy"] = float((pred == labels).mean()) if len(labels) else float("nan")
        elif name == "f1":
            tp = int(((pred == 1) & (labels == 1)).sum())
            fp = int(((pred == 1) & (labels == 0)).sum())
            fn = int(((pred == 0) & (labels == 1)).sum())
            out["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        else:
            raise ValueError(f"unknown metric '{name}'")
    return {k: round(v, 6) for k, v in out.items()}
