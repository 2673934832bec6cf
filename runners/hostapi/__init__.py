"""The host API a running runner reaches through its proxy: the run session frozen at start (`session`,
`scope`), the checks and family handlers of every proxy action (`handlers`), the audit trail (`audit`) and
platform actions with their approvals and delivery (`platform_actions`, `delivery`, `admin`)."""
