"""Provision flows: one module per flow (its hooks and ``SPEC``), the catalogue, the engine."""
