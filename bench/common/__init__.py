"""Helpers every benchmark script shares: sizes, timing, launching ranks, the results JSON and
tables. The scripts run as ``python bench/<name>.py``, which puts bench/ first on sys.path, so
they import these as ``common.<module>``."""
