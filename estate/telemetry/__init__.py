"""Telemetry programs Estate installs on the nodes (standalone: they import nothing of Estate)."""
