"""``with`` for the lab's peers: started on entry, stopped on exit, even after an error."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStop:
    """A peer with ``start`` and ``stop``; as a context manager, ``stop`` always runs."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
