"""The ironic-inspector API (``/v1/introspection``), for python-ironic-inspector-client."""
