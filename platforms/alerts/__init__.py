"""Alerts: conditions an operator must hear of (a bot's connection down, its deliveries failing, a binding's
failure rate, a queue's wait, a model provider's errors), raised once and resolved once."""
