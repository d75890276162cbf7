"""Code that runs inside ironic-python-agent's own virtualenv, in a virtual node's namespaces.

Nothing here may import metalforge or metalforge_lab: the agent's virtualenv
has neither. ``run_agent.py`` is started by path and imports
``hardware_manager`` from its own directory.
"""
