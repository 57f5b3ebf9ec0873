"""The `stub` adapter's package: its provider (`provider.py`) and the parts only it uses; empty, so
importing one part (the CLI's, a sibling's) loads no SDK."""
