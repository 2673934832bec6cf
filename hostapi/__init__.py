"""The host API: the handlers behind every proxy method a runner calls through its runtime
(docs/protocol.md, "Runtime → host"; docs/security.md, "Runner code"). It stands above `runners`: the run
sessions, audit and platform actions it works with are `runners.access`'s and `runners.actions`', and the
worker serves these handlers through `runners.access.proxy` (installed by `apps.HostapiConfig.ready`).

- `dispatch.py`: the checks every call goes through, in order, the audit record and the registry that
  maps each runtime → host action to its family handler;
- one module per API family: `history`, `events`, `artifacts`, `state`, `storage`, `platform` and
  `providers` (models, tools, knowledge bases; the calls themselves are `resources.providers`');
- `base.py`: what a family handler receives (`ProxyCall`) and the helpers they share.
"""
