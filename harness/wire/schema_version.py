"""The results schema's version, on its own: the Locust side writes it into run.json without importing Arrow."""

SCHEMA_VERSION = 1
