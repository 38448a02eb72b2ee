"""Observability: the run's metrics log (`metrics.jsonl`) and its HTML report.

`MetricsLogger` and `read_metrics` write and read the log; `write_report(run_dir)` turns a
run directory into `report.html`. matplotlib is imported only when a report is drawn, so
logging needs nothing beyond the standard library.
"""

from fleetrl.observe.metrics import MetricsLogger, read_metrics
from fleetrl.observe.report import write_report

__all__ = ["MetricsLogger", "read_metrics", "write_report"]
