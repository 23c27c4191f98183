"""The streams capability's pure core: no Spark, no sockets, no fsspec; time and IO injected.

``locations`` (what a checkpoint location is, when it may be dropped or swept) and ``packs``
(which files are packed and what Spark sees, FLIP-306).
"""
