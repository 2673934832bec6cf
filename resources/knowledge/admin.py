"""Admin of knowledge."""
