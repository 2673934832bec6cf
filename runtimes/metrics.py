"""The plugin runtime's Prometheus metrics, served with the rest at `/metrics` (`runners.metrics` says how
the processes share them)."""

from __future__ import annotations

from prometheus_client import Gauge

# One series per live process (its pid); a process that ended takes its series with it.
RUNTIME_CONNECTED = Gauge(
    "langbot_runtime_connected",
    "1 while this process's connection to the plugin runtime is open, 0 once it is lost or could not open.",
    multiprocess_mode="liveall",
)
