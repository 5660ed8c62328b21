"""Load check of `compress predict`: classify a file of N lines (real SST-2 sentences,
cycled) through the CLI in a child process; report wall time, throughput and the child's
peak resident memory, for a small and a large N, so a memory that grows with the input
shows as the difference between the two.

    python benchmarks/predict_load.py --artifact models/production --lines 10000 100000 \
        --json reports/predict_load.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sentences(source: Path) -> list[str]:
    with open(source, encoding="utf-8") as f:
        next(f)  # header
        return [line.split("\t")[0] for line in f if line.strip()]


def run(artifact: Path, n: int, texts: list[str], threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.txt"
        with open(src, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(texts[i % len(texts)] + "\n")
        out = Path(tmp) / "out.jsonl"
        # Each run in a fresh interpreter that reports its own peak (VmHWM), so runs do not mix.
        code = ("import sys; "
                "from compress.cli import main; rc = main(sys.argv[1:]); "
                "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
                "print(f'peak_kib={hwm}', file=sys.stderr); sys.exit(rc)")
        t = time.perf_counter()
        with open(out, "w", encoding="utf-8") as fout:
            proc = subprocess.run([sys.executable, "-c", code, "predict", "--artifact", str(artifact),
                                   "--file", str(src), "--format", "jsonl", "--threads", str(threads)],
                                  stdout=fout, stderr=subprocess.PIPE, text=True, cwd=REPO)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"predict failed:\n{proc.stderr[-3000:]}")
        peak = int(next(x for x in proc.stderr.splitlines() if x.startswith("peak_kib=")).split("=")[1]) / 1024
        with open(out, encoding="utf-8") as f:
            rows = sum(1 for _ in f)
        if rows != n:
            raise SystemExit(f"expected {n} output lines, got {rows}")
        return {"lines": n, "wall_s": round(wall, 1), "texts_per_s": round(n / wall, 1),
                "peak_rss_mb": round(peak, 1), "input_mb": round(src.stat().st_size / 2**20, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", default="models/production")
    ap.add_argument("--source", default=str(REPO.parent / "shared" / "data" / "sst2" / "train.tsv"))
    ap.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    texts = sentences(Path(args.source))
    res = {"artifact": str(args.artifact), "source": args.source, "threads": args.threads,
           "cpu_count": os.cpu_count(), "runs": [run(Path(args.artifact), n, texts, args.threads)
                                                 for n in args.lines]}
    runs = res["runs"]
    res["peak_growth_mb"] = round(runs[-1]["peak_rss_mb"] - runs[0]["peak_rss_mb"], 1)
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
