"""Toolkit of runners that drive an external coding harness (Claude Code-style CLIs).

* `HostBridge` (`bridge`): the run-scoped MCP server through which the harness reaches the host's APIs.
* `projection`: the files a harness reads in its working directory — ``agent-context.json`` (schema
  ``langbot.agent_runner.external_harness_context.v1``), ``LANGBOT_CONTEXT.md``, skills and the MCP config.
* `stream_json`: Claude Code's ``--output-format stream-json`` lines as runner results.
* `process`: the CLI as a child process in its own process group, killed as a group.

Only harness runners need the `mcp` SDK and uvicorn; they are imported when a bridge starts.
"""
