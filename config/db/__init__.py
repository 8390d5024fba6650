"""PostgreSQL backend that can start the embedded server on first connection."""
