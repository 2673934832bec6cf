"""The one door to model providers: everything that talks to a `ModelProvider` is here.

`clients` builds the SDK clients from a provider, every one through the outbound address guard, and keeps
one per provider and event loop for runs' calls; `chat` sends chat completions (whole or streamed),
`rerank` the rerank call, `embeddings` the embeddings of knowledge bases; `failures` turns what went wrong
at a provider into errors whose messages never carry its key.

Callers keep only their own part: the host API's model handlers (`hostapi`) authorize a
run's call, apply its caps, count its usage and answer in the protocol's shapes; knowledge ingestion and
retrieval store and rank vectors; the admin tests a connection.
"""
