"""IPMI: the ``ipmitool`` power and management interfaces (the ``ipmi`` hardware type's)."""

from metalforge.drivers.ipmi.interfaces import IpmiManagement, IpmiPower

__all__ = ["IpmiManagement", "IpmiPower"]
