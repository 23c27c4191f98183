"""BLOB service (FLIP-19): content-addressed, verified blobs served by the driver.

``keys``/``protocol`` (identity and wire format), ``lifecycle`` (the pure ledger: references,
scopes, jobs, staged cleanup), ``stores``/``depot``/``server`` (the driver's side),
``client``/``cache``/``archives`` (the executors' side), ``service`` (the driver service),
``executor`` (inside tasks), ``files`` (transparent addFile/SparkFiles hooks), ``api`` (the
public ``spark_steward.blobs``) and ``gc`` (listing and collection without Spark).
"""
