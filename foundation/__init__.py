"""The helpers every app stands on; nothing here imports an app.

API errors and input parsing (`api_errors`, `api_input`), request limits (`limits`), the OpenAPI extensions
(`api_schema`), identifiers (`ids`), secrets at rest (`crypto`), text the database can store (`storable`),
database connections of waiting code (`db`, `db_unavailable`), hand-written SQL and the worker's database
executor (`sql`), the outbound address guard (`outbound`), log context and redaction (`log_context`,
`log_redaction`), and process start-up tuning (`process`). `langbot_host` is the wiring on top of every app.
"""
