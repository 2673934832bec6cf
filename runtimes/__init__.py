"""The host's side of the runtimes that serve runners: the link every process keeps to the plugin runtime
(`link`: stdio child or WebSocket, the environment the child may inherit), the runner catalog synced from a
runtime's report (`descriptors`) and refreshed from the plugin runtime (`catalog`), which runtime serves which
runner (`hosts`), the development runtimes authors connect (`dev`, `dev_access`, `dev_consumer`, their tokens
and sessions in `models`), and the bridge to LangBot's own plugin runtime (`langbot`). It knows nothing of runs:
`runners` stands on it."""
