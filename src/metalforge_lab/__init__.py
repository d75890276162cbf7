"""The virtual lab: real protocol peers (Redfish, IPMI, the ramdisk agent) on one machine.

Not part of the service: tests and ``make run`` use it to give metalforge
nodes to drive without real servers.
"""
