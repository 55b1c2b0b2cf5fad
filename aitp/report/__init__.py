"""Reports of an experiment from the lake: the pass-rate plot, its table, and a one-file HTML report."""

from aitp.report.html import write_report
from aitp.report.plots import OVERALL, ReportError, UnknownExperimentError, iteration_table, plot_iterations

__all__ = ["OVERALL", "ReportError", "UnknownExperimentError", "iteration_table", "plot_iterations", "write_report"]
