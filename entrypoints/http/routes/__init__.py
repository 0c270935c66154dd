"""One FastAPI router per area of the API: contexts, queries, pipelines, OpenAI, operations."""
