"""What a node PATCH does to the node's allocation: now ``services.allocations``.

Kept only so that ``routes.nodes`` keeps importing it until it calls
``metalforge.services.allocations.release_for_patch`` itself; then this
module can go.
"""

from __future__ import annotations

from metalforge.services.allocations import release_for_patch

__all__ = ["release_for_patch"]
