"""What every collection route shares: the marker, the keyset page, the ``next`` link.

Ironic's pagination is a keyset: ``marker`` names the last item of the
previous page (by UUID), ``sort_key``/``sort_dir`` order the page, and a
full page carries a ``next`` link repeating the query with the new marker.
A marker the caller may not see does not exist for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from metalforge.api.params import Page, Query, keyset
from metalforge.api.versions import Version
from metalforge.errors import bad_request

Scope = Callable[[Select[Any]], Select[Any]]
"""Limits a query to what the caller may see (a project's nodes, say)."""


def marker_position(
    session: Session, model: Any, pg: Page, scope: Scope | None = None
) -> tuple[Any, int] | None:
    """The marker's sort value and id, where the page starts; 400 for an unknown marker."""
    if not pg.marker:
        return None
    query = select(getattr(model, pg.sort_key), model.id).where(model.uuid == pg.marker)
    if scope is not None:
        query = scope(query)
    found = session.execute(query).first()
    if found is None:
        raise bad_request(f"Marker {pg.marker} could not be found.")
    return (found[0], found[1])


def paged(
    stmt: Select[Any], session: Session, model: Any, pg: Page, scope: Scope | None = None
) -> Select[Any]:
    """``stmt`` ordered by the page's sort and started after its marker."""
    after = marker_position(session, model, pg, scope)
    return keyset(stmt, getattr(model, pg.sort_key), model.id, pg, after)


def next_link(
    base: str, path: str, query: Query, pg: Page, count: int, last: str | None
) -> dict[str, str]:
    """``{"next": url}`` when the page is full (there may be more), else nothing."""
    if count != pg.limit or last is None:
        return {}
    params = {k: v for k, v in query.params.items() if k != "marker"}
    params.update(limit=str(pg.limit), marker=last)
    return {"next": f"{base}/v1/{path}?{urlencode(params)}"}


def detail_or_fields(
    query: Query,
    wanted: list[str] | None,
    *,
    detail_path: bool = False,
    since: Version | None = (1, 43),
) -> bool:
    """Whether the detailed view was asked for; refuses ``detail`` with ``fields``."""
    detail = detail_path or bool(query.bool("detail", since))
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    return detail
