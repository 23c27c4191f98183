"""The package version, in a module of its own so the kernel and the CLI read it without
importing the public facade."""

__version__ = "0.1.0"
