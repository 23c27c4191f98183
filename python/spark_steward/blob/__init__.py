"""BLOB service (FLIP-19): content-addressed, verified blobs served by the driver.

``keys``/``protocol`` (identity and wire format), ``lifecycle`` (the pure ledger: references,
scopes, jobs, staged cleanup), ``stores``/``depot``/``server`` (the driver's side),
``client``/``cache``/``archives`` (the executors' side), ``service`` (the driver service),
``executor`` (inside tasks), ``pieces``/``peering``/``swarm`` (peer fetch: piece plans, who
holds what, one host's fill from peers and origin), ``tls`` (encrypted transfers), ``files``
(transparent addFile/SparkFiles hooks), ``api`` (the public calls, imported as
``spark_steward.blobs``) and ``gc`` (listing and collection without Spark).
"""
