"""People (README "People"): one person per workspace across channels, their link codes, and their data."""
