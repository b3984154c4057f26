"""seglog: a persistent single-node event log."""

__version__ = "0.1.0"
