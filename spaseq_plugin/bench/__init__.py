"""``spaseq bench``: the workloads of the paper's evaluation (``workloads``),
the runner that measures them against the baselines (``runner``), the
Spark comparison (``spark``).  It depends on the engine, never the reverse."""
