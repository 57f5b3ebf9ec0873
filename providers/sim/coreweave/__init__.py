"""The local CoreWeave Sandbox: its gRPC SandboxService over the vendor simulator (`stampede coreweave-local serve`)."""
