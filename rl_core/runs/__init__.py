"""The machinery around a training: the run store, reuse of finished runs, checkpoints written whole, training as a
stream of items, sweeps in worker processes or on a Ray cluster, the server's limits, summaries and JSON records."""
