"""A local Runloop API over the vendor simulator: what runloop-api-client 3.0.0 speaks (`shapes.py`, `server.py`)."""
