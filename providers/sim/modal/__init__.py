"""Modal's wire front over the simulator: the gRPC control plane and the task command router."""
