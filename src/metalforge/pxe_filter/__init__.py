"""The PXE filter: only the nodes being inspected may reach the inspection DHCP/PXE service.

``desired`` computes what a host should allow from the database, a driver
(``dnsmasq``, ``nftables``) makes the host's DHCP service obey it, and
``service`` keeps the two in step: woken by every relevant commit, repaired
by a periodic resync, blocking everything on any error, with exactly one
host (the elected leader) answering at a time.
"""
