"""The HTTP API: a FastAPI app behind a Ray Serve ingress deployment."""
