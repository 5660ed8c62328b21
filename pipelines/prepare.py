"""Stage `prepare`: validate the task data and write the prepared splits and data card."""
from compress.core.config import section
from compress.data.prepare import PrepareConfig, prepare
from compress.core.env import environment
from compress.core.experiments import in_experiment_copy, link_source
from compress.report.schema import make_report, write_report

from .common import PREPARED, REPORTS, run


def main(params: dict) -> None:
    cfg = section(params, "prepare", PrepareConfig)
    if not in_experiment_copy():
        link_source(cfg.source)  # so queued experiments resolve a relative source as we do
    card = prepare(cfg, PREPARED)
    write_report(make_report("prepare", [], environment(), {"data_card": card}), REPORTS)
    for name, s in card["splits"].items():
        counts = (f"{s['tokens']} words, entities {s['entities']}" if "entities" in s
                  else f"labels {s['label_counts']}")
        print(f"{name}: {s['rows']} rows, {counts}")


if __name__ == "__main__":
    run(main)
