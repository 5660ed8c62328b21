"""Stage `compare`: join every stage report with the one-run benchmark into
reports/comparison.json, and render it as Markdown, a self-contained HTML page and the
CSV files behind dvc.yaml's comparison plots.

    python -m pipelines.compare reports/benchmark.json reports/teacher.json ...

The first report is the benchmark; the others are stage reports in pipeline order."""
import sys

from compress import comparison
from compress.html_report import render_html
from compress.io import atomic_write_json, atomic_write_text
from compress.report import read_report

from .common import PLOTS, REPORTS, run

# The artifacts of the default pipeline, one column each in the sweep CSVs (dvc.yaml's
# plot definitions name these columns).
PLOTTED = ["bert_base_reference", "teacher", "student", "student_pruned", "student_int8_torch",
           "student_pruned_int8_torch", "student_int8_inc", "student_onnx", "student_pruned_onnx",
           "student_onnx_int8", "student_pruned_onnx_int8"]


def main(params: dict, bench_path: str, report_paths: list[str]) -> None:
    comp = comparison.build([read_report(p) for p in report_paths], read_report(bench_path))
    atomic_write_json(REPORTS / "comparison.json", comp)
    atomic_write_text(REPORTS / "comparison.md", comparison.render_markdown(comp))
    atomic_write_text(REPORTS / "comparison.html", render_html(comp))
    comparison.write_plot_data(comp, PLOTS / "compare", PLOTTED)
    print(f"{len(comp['records'])} records from {', '.join(comp['stages'])}")
    for target in comparison.targets_measured(comp):
        print(f"{target}: Pareto front {', '.join(comparison.pareto_front(comparison.table_rows(comp, target)))}")


if __name__ == "__main__":
    run(lambda params: main(params, sys.argv[1], sys.argv[2:]))
