"""Prime's wire front over the simulator: the REST API under /api/v1 and the ConnectRPC sandbox gateway."""
