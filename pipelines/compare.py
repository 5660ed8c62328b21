"""Stage `compare`: gather every stage report's records into reports/comparison.json."""
import sys

from compress.io import atomic_write_json, atomic_write_text
from compress.report import build_comparison, read_report, render_comparison_markdown

from .common import REPORTS


def main(report_paths: list[str]) -> None:
    comparison = build_comparison([read_report(p) for p in report_paths])
    atomic_write_json(REPORTS / "comparison.json", comparison)
    atomic_write_text(REPORTS / "comparison.md", render_comparison_markdown(comparison))
    print(f"{len(comparison['records'])} records from {', '.join(comparison['stages'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
