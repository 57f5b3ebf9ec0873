"""Stampede's harness: rollout lifecycle, timing, collectors, load shapes, the Locust bridge, analysis, CLI.

Knows no vendor: it talks to sandboxes only through `providers.base.Provider`.
"""

__version__ = "0.1.0"
