"""Start ironic-python-agent with the lab's hardware manager as its only manager.

Run by path with the agent's virtualenv's Python, inside the virtual node's
namespaces (see ``metalforge_lab.agent_runner``). The agent reads its
settings from ``/proc/cmdline``, which the runner replaces with the node's
own kernel command line.
"""

from __future__ import annotations

import os
import sys

# Registers the agent's configuration options; must come before anything reads them.
from ironic_python_agent.cmd import agent as agent_command

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hardware_manager


def main() -> int:
    try:
        hardware_manager.install()
    except hardware_manager.LabDiskError as exc:
        print(f"refusing to start the agent: {exc}", file=sys.stderr, flush=True)
        return 2
    agent_command.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
