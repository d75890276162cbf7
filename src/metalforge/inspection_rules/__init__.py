"""Inspection rules: conditions on a processed inspection and actions on its node.

An operator's rule says "when the inventory looks like this, set that": a
trait from the CPU model, a capability from the boot mode, BMC credentials
from the BMC address, or a failed inspection for a machine with too little
memory. ``grammar`` reads and checks a rule (both faces of the API store the
same ``Rule``), ``references`` resolves the ``{inventory[...]}`` references
in its arguments, ``conditions`` and ``actions`` are the operators, and
``engine`` runs the rules that apply on one inspection's ``Subject``.

Rules run on reports an unauthenticated ramdisk sent: nothing here evaluates
code, reaches the network, or writes anything but the subject it is given.
"""
