"""Admin of mcp."""
