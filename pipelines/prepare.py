"""Stage `prepare`: validate the task data and write the prepared splits and data card."""
from compress.config import section
from compress.data import PrepareConfig, prepare
from compress.env import environment
from compress.report import make_report, write_report

from .common import PREPARED, REPORTS, run


def main(params: dict) -> None:
    cfg = section(params, "prepare", PrepareConfig)
    card = prepare(cfg, PREPARED)
    write_report(make_report("prepare", [], environment(), {"data_card": card}), REPORTS)
    for name, s in card["splits"].items():
        print(f"{name}: {s['rows']} rows, labels {s['label_counts']}")


if __name__ == "__main__":
    run(main)
