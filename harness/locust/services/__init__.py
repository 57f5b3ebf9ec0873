"""The collaborators `harness.locust.session` composes, one job each (its module docstring lists them)."""
