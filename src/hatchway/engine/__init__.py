"""The agent loop, API-agnostic: canonical items in, events out."""
