"""Accuracy, latency and memory of an artifact (harness), every artifact in one run (benchmark), and the task metrics."""
