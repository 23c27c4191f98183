"""Run at interpreter start by ``spark_steward_autoload.pth``; it must cost nothing.

It only puts a finder on ``sys.meta_path`` that waits for the module defining SparkContext
(``pyspark.core.context`` since Spark 4, ``pyspark.context`` before) and, once that module has
run, lets spark-steward wrap ``SparkContext._do_init``. Whether anything attaches is decided
there, from each new context's conf (``spark.steward.enabled``). Set
``SPARK_STEWARD_AUTOLOAD=0`` to switch the hook off for a process.
"""

import os
import sys

# spark_steward.kernel.compat.CONTEXT_MODULES, copied: importing the package here would cost
# every Python process of the environment (tests/unit/test_compat.py holds the two equal).
_TARGETS = ("pyspark.core.context", "pyspark.context")


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        cls = module.__dict__.get("SparkContext")
        if cls is not None and cls.__module__ == module.__name__:
            try:
                from spark_steward.kernel.autoload import patch_spark_context
            except ImportError:  # package half-removed: never break pyspark itself
                return
            patch_spark_context(cls)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _SparkContextFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


if os.environ.get("SPARK_STEWARD_AUTOLOAD", "1") != "0" and _SparkContextFinder not in sys.meta_path:
    sys.meta_path.insert(0, _SparkContextFinder)
