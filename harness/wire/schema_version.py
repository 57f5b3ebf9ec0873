"""The results schema's version and its table folders, on their own: the Locust side writes the version into
run.json and ships table files by folder without importing Arrow."""

SCHEMA_VERSION = 2
"""2: a folder per table (below), UTC timestamps for wall-clock instants, dictionary-encoded repeated strings, units
and table names in the schema metadata. 1: every table's shards side by side, epoch seconds as floats."""

ROLLOUTS_TABLE = "rollouts"
OPS_TABLE = "ops"
TRUTH_TABLE = "truth"
TRAINER_TABLE = "trainer"
STEPS_TABLE = "steps"  # one row per step of a rollout plan (`stampede run --plan`): harness.wire.steps
ENGINE_HEALTH_TABLE = "engine_health"  # each engine's loop delay, fds and sockets every 5 s: harness.wire.engine_health
TABLES: tuple[str, ...] = (ROLLOUTS_TABLE, OPS_TABLE, TRUTH_TABLE, TRAINER_TABLE, STEPS_TABLE, ENGINE_HEALTH_TABLE)
"""Schema v2: each table in its own folder of the run (`results/<run_id>/rollouts/*.parquet`, ...), so one
`pd.read_parquet(run / "rollouts")` reads one table; v1 had every table's shards side by side in the run folder."""
