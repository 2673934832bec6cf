"""The harness-agent plugin's own package: the parts of a runner that drives an external coding harness
(a Claude Code-style CLI). It lives in the plugin, not in the SDK's wheel, because only this plugin uses it;
the plugin runtime puts the plugin directory on `sys.path` while it imports the runner's file, which imports
these modules then (see `plugins/local-agent` for the same layout).

* `HostBridge` (`bridge`): the run-scoped MCP server through which the harness reaches the host's APIs.
* `projection`: the files a harness reads in its working directory — ``agent-context.json`` (schema
  ``langbot.agent_runner.external_harness_context.v1``), ``LANGBOT_CONTEXT.md``, skills and the MCP config.
* `stream_json`: Claude Code's ``--output-format stream-json`` lines as runner results.
* `process`: the CLI as a child process in its own process group, killed as a group.

The `mcp` SDK and uvicorn are imported only when a bridge starts.
"""
