"""Run execution inside a Celery worker process (DESIGN §4): admission and claim, the frozen run session,
resource and context builders, the result normalizer and ledger writes, lease heartbeat, cancel
listener and the worker's asyncio loop that holds many runs at once. Entry point: `worker.run_admit`.
"""
