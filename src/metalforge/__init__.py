"""metalforge: bare-metal provisioning with an Ironic-compatible API."""
