"""The local Kubernetes agent-sandbox: its custom resources, watches, warm pool and router over the vendor simulator."""
