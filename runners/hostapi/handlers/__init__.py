"""Host handlers behind every proxy method a runner calls through the plugin runtime (docs/protocol.md, "Runtime →
host"; docs/security.md, "Runner code").

- `dispatch.py`: the checks every call goes through, in order, the audit record and the registry that
  maps each runtime → host action to its family handler;
- one module per API family: `history`, `events`, `artifacts`, `state`, `storage`, `platform` and
  `providers` (models, tools, knowledge bases);
- `base.py`: what a family handler receives (`ProxyCall`) and the helpers they share.
"""
