"""Run execution inside a Celery worker process (docs/architecture.md, "Runs"): admission and claim, resource and
context builders, the result normalizer and ledger writes, lease heartbeat and the worker's asyncio loop that holds
many runs at once. Entry point: `worker.run_admit`. The run sessions it serves are `runners.access`'s, the
proxy handlers the `hostapi` app's (installed in `runners.access.proxy`); the cancel signal it listens to is
`runners.live.cancel`.
"""
