"""Locust files: `locust -f scenarios/<name>.py`, or `stampede run --scenario <name>`."""
