"""The Event Gateway: events in from the REST API, the web chat and (later) platforms, normalized into one
envelope (`envelope`), stored once and routed to runs (`services`), and the `/events` API (`api`)."""
