"""Runner discovery and the run lifecycle: descriptors, runs, the run ledger, orchestration, proxy handlers."""
