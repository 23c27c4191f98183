"""Conformance suites: where a behaviour must exist in both runtimes (Python and the shim's
JVM), one suite runs against both implementations with shared test vectors, through a small
adapter per side (fsspec's ``tests/abstract`` is the model). A disagreement the suite finds is
a bug of one side; the ones known and not yet fixed are listed with their vectors in
``vectors/``."""
