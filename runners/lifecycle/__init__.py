"""A run from creation to its end as clients and operators see it: create, cancel, wait, sweep and dispatch
(`services`, `dispatch`), the runs and runners REST API (`api`) and the SSE run stream (`sse`)."""
