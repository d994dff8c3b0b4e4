"""minilib: a tiny library used by the sample SWE-style tasks."""
