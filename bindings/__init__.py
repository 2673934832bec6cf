"""Workspaces, bots, API keys and AgentBindings: who may trigger runs and which runner handles an event."""
