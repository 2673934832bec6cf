"""The host's side of the plugin runtime: the link every process keeps to it (`link`: stdio child or
WebSocket, the environment the child may inherit) and the runner catalog refreshed from its report
(`catalog`). The lowest layer of `runners`: it knows nothing of runs."""
