"""How stable are the harness's figures? Measure the same artifacts several times in a
row with the pipeline's harness (same config as the stages: `measure` in params.yaml) and
report the spread of p50 at each point between runs.

    python benchmarks/stability.py models/teacher models/student_pruned_onnx_int8 --runs 2 \
        --json reports/stability.json

Run it on an idle machine: the figure says how much two runs of one measurement differ
there, i.e. how small a latency difference the reports can resolve.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from compress.core.config import load_params, section  # noqa: E402
from compress.measure.harness import MeasureConfig, measure  # noqa: E402
from compress.predict import artifact_at  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifacts", nargs="+", help="model directories")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--data", default="data/prepared")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    cfg = replace(section(load_params(REPO / "params.yaml"), "measure", MeasureConfig), targets=["cpu"],
                  eval_max_rows=64)
    out = {"measure": {k: getattr(cfg, k) for k in ("points", "warmup_queries", "min_queries", "min_duration_s",
                                                    "threads")}, "artifacts": {}}
    for path in args.artifacts:
        art = artifact_at(Path(path))
        runs = []
        for _ in range(args.runs):
            (rec,) = measure(art, args.data, cfg)
            runs.append({f"b{p['batch_size']}_s{p['seq_len']}": p["latency_ms_p50"] for p in rec["points"]})
        spread = {k: round(100 * (max(r[k] for r in runs) - min(r[k] for r in runs)) / min(r[k] for r in runs), 2)
                  for k in runs[0]}
        out["artifacts"][art.name] = {"p50_ms_per_run": runs, "spread_pct": spread}
        print(f"{art.name}: p50 per run {runs}; spread (max-min)/min {spread} %")
    out["max_spread_pct"] = max(v for a in out["artifacts"].values() for v in a["spread_pct"].values())
    print(f"largest spread: {out['max_spread_pct']} %")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
