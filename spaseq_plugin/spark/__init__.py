"""The Spark data pipeline: bulk-loading KB dumps (:mod:`.load`),
materialising GRAPH patterns (:mod:`.materialize`) and evaluating queries
over archived streams in parallel (:mod:`.engine`).

Local mode (``local[*]``) is the embedded default; ``--spark-master`` or
``SPARK_MASTER`` points the same commands at a cluster.  :mod:`.session`
finds Java 17+ and makes the executors use this interpreter.
"""
