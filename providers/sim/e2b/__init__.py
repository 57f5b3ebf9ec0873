"""A local E2B: the REST control plane and envd's process service over the vendor simulator."""
