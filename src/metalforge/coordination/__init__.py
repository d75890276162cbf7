"""Coordination between processes: who is alive, who leads, and which conductor owns a node.

Kept apart from the conductor so that the API, the services and the PXE
filter can ask the same questions on nothing but a database and a timeout,
without reaching into the conductor's process or context.
"""
