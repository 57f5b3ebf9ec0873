"""Reading results: summaries, reports, latency-model export, the generator-side model.

Reads the parquet dataset only; never imports the engine.
"""
