"""Host handlers behind every proxy method a runner calls through the plugin runtime (PROTOCOL_V1 §7,
DESIGN §3.1 and §5).

- `dispatch.py`: the checks every call goes through, in order, the audit record and the registry that
  maps each runtime → host action to its family handler;
- one module per API family: `history`, `events`, `artifacts`, `state`, `storage`, `platform` and
  `providers` (models, tools, knowledge bases);
- `base.py`: what a family handler receives (`ProxyCall`) and the helpers they share.
"""
