"""Scheduled events: cron-style schedules per workspace that post an event through the gateway."""
