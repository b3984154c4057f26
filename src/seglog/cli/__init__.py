"""The seglog command line."""
