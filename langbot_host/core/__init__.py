"""The host's helper layer: what every app may use and nothing here imports an app.

API errors and input parsing (`api_errors`, `api_input`), the OpenAPI extensions (`api_schema`), secrets at
rest (`crypto`), text the database can store (`storable`), database connections of waiting code (`db`),
hand-written SQL and the worker's database executor (`sql`), and process start-up tuning (`process`). The
rest of `langbot_host` (settings, urls, asgi, routing, celery, health) is the wiring on top of every app.
"""
