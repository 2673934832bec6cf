"""Host facts about conversations: the event log, transcript items and the state store."""
