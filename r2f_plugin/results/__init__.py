"""What happens to records after a run: the durable store, sweeps and their launchers,
aggregation with intervals, tables, plots, frontiers, tuning, and the testbed's checks."""
