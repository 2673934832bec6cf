"""MCP servers and their tools: the client (stdio and streamable HTTP through the `mcp` SDK), services,
selectors, REST endpoints and admin."""
