"""Fit a simulator profile to observed runs (issue #31): the user's own runs or published benchmark results."""
