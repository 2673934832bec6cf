"""The Event Gateway: events in from the REST API, the web chat, chat platforms and schedules, normalized
into one envelope (`envelope`), stored once and routed to runs (`services`), and the `/events` API (`api`,
`urls`). It stands above `runners`: it admits runs, it never executes them."""
