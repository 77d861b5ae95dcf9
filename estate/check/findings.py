"""Findings live in estate.findings (below the spec layer); validators import them from here."""
from estate.findings import Finding, Severity, has_errors, sort_findings

__all__ = ["Finding", "Severity", "has_errors", "sort_findings"]
