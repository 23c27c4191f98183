"""Checkpoint store with repeatable cleanup (FLIP-270 with FLIP-194's retry strategies).

``lifecycle`` (the pure state machine), ``metadata``/``store`` (durable entries and their
cleanup), ``data`` (the one-file-per-partition data path), ``merging/`` (file-merged
checkpoints, FLIP-306), ``service`` (the driver service and ``spark_steward.checkpoints``),
``spark_checkpoints``/``ownership`` (Spark's own ``df.checkpoint()`` owned by the store),
``replace_builtin`` (``df.checkpoint()`` served by the store) and ``gc`` (listing and collection
without Spark).
"""
