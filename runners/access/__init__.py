"""What a running run may reach through the host API, and the record of what it did: the run session frozen
at start (`session`, `scope`: its grants, state scopes and resources), the model usage its calls add up
(`usage`), the audit trail of its proxy calls (`audit`), and the slot the host API's handlers are installed
in for the worker to serve (`proxy`; the handlers are the `hostapi` app's)."""
