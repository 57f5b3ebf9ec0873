"""A simulated sandbox's own files and what keeps them: its tree, pause and resume, snapshots and forks."""
