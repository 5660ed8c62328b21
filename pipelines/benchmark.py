"""Stage `benchmark`: every artifact named in the stage reports, and the bert-base FP32
reference, measured one after another in this one run (seq-length and batch sweeps)."""
import sys
import time

from tqdm.auto import tqdm

from compress.measure.benchmark import BenchmarkConfig, artifacts_from_reports, benchmark
from compress.core.config import section
from compress.data.prepare import Prepared
from compress.core.env import environment
from compress.report.schema import make_report, read_report, write_report

from .common import PREPARED, REPORTS, run


def main(params: dict, report_paths: list[str]) -> None:
    t0 = time.perf_counter()
    cfg = section(params, "benchmark", BenchmarkConfig)
    entries = artifacts_from_reports([read_report(p) for p in report_paths], cfg.exclude)
    labels = list(Prepared.open(PREPARED).task.label_names)
    bar = tqdm(total=len(entries) + bool(cfg.reference), desc="benchmark", unit="artifact")

    def step(name):
        bar.set_postfix_str(name)
        bar.update(1)

    records, details = benchmark(entries, PREPARED, cfg, labels, progress=step)
    bar.close()
    details["stage_wall_s"] = round(time.perf_counter() - t0, 1)
    write_report(make_report("benchmark", records, environment(cfg.threads), details), REPORTS)
    for r in records:
        if r["status"] == "ok":
            print(f"{r['artifact']}/{r['target']}: p50 {r['latency_ms_p50']} ms (1x128), "
                  f"{r['throughput_seq_per_s']} seq/s (32x128), peak RSS {r['peak_mem_mb']} MiB")


if __name__ == "__main__":
    run(lambda params: main(params, sys.argv[1:]))
