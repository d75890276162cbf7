"""The Ironic-compatible HTTP API."""
