"""The ``direct`` deploy interface: cleaning and deploying through ironic-python-agent."""
