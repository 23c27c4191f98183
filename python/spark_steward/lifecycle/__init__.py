"""The pure lifecycle core: no Spark, no sockets, no fsspec. Time and IO are injected."""
