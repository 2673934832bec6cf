"""Signed completion webhooks: per-workspace (and per-binding) endpoints subscribed to run events, delivered
by Celery with Standard Webhooks signatures and retries, with a delivery log."""
