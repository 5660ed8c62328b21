"""Stage `compare`: join every stage report with the one-run benchmark into
reports/comparison.json, and render it as Markdown, a self-contained HTML page and the
CSV files behind dvc.yaml's comparison plots.

    python -m pipelines.compare reports/benchmark.json reports/teacher.json ...

The first report is the benchmark; the others are stage reports in pipeline order. The GPU
check's committed result (reports/gpu/gpu_check.json, from benchmarks/gpu_check.py), when
there is one, is shown as a table of its own."""
import sys
from pathlib import Path

import yaml

from compress.report import comparison, gpu_check
from compress.report.html import render_html
from compress.core.io import atomic_write_json, atomic_write_text
from compress.report.schema import read_report

from .common import PLOTS, REPORTS, run



GPU_CHECK = REPORTS / "gpu" / "gpu_check.json"


def plotted_columns(dvc_yaml: str | Path = "dvc.yaml") -> list[str]:
    """The artifact columns dvc.yaml's sweep plots name (one list, the plots' own): the
    CSVs get exactly those columns, so adding an artifact to the plots is one edit there."""
    plots = (yaml.safe_load(Path(dvc_yaml).read_text(encoding="utf-8")) or {}).get("plots", [])
    columns: list[str] = []
    for entry in plots:
        for spec in (entry.values() if isinstance(entry, dict) else []):
            for path, ys in ((spec or {}).get("y") or {}).items() if isinstance(spec, dict) else []:
                if path.startswith(str(PLOTS / "compare")) and isinstance(ys, list):
                    columns += [y for y in ys if y not in columns]
    return columns


def main(params: dict, bench_path: str, report_paths: list[str]) -> None:
    comp = comparison.build([read_report(p) for p in report_paths], read_report(bench_path))
    checked = gpu_check.load(GPU_CHECK)
    if checked is not None:
        comp["gpu_check"] = gpu_check.summary(checked, str(GPU_CHECK))
    atomic_write_json(REPORTS / "comparison.json", comp)
    atomic_write_text(REPORTS / "comparison.md", comparison.render_markdown(comp))
    atomic_write_text(REPORTS / "comparison.html", render_html(comp))
    comparison.write_plot_data(comp, PLOTS / "compare", plotted_columns())
    print(f"{len(comp['records'])} records from {', '.join(comp['stages'])}")
    for target in comparison.targets_measured(comp):
        print(f"{target}: Pareto front {', '.join(comparison.pareto_front(comparison.table_rows(comp, target)))}")


if __name__ == "__main__":
    run(lambda params: main(params, sys.argv[1], sys.argv[2:]))
