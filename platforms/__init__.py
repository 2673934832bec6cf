"""Chat platforms: adapters that turn platform updates into gateway events and deliver run results back
(inbound webhooks and long-lived connections, outbound sends and streaming edits). Completion webhooks
(`platforms.webhooks`) and scheduled events (`platforms.schedules`) are sibling apps in this package.

`runners` never imports this package: it reaches the adapters through its delivery port, which
`PlatformsConfig.ready` fills.
"""
