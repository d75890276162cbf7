"""Query parameters as Ironic reads them.

Unknown parameters are a 400 (``Unexpected arguments: x``); booleans accept
what clients send (``True``, ``false``, ``1``, ``yes``...); ``fields`` and
filters newer than the request's microversion are a 406.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sqlalchemy import Select, and_, literal, or_

from metalforge.api.versions import Version, fmt, request_version
from metalforge.errors import bad_request, not_acceptable
from metalforge.services.values import parse_bool


class Query:
    """The request's query string, checked against what the endpoint accepts."""

    def __init__(self, request: Request, allowed: Iterable[str]) -> None:
        self.version: Version = request_version(request)
        self.params: dict[str, str] = {}
        allowed_set = set(allowed)
        unexpected = []
        for key, value in request.query_params.multi_items():
            if key not in allowed_set:
                unexpected.append(key)
            self.params[key] = value
        if unexpected:
            raise bad_request(f"Unexpected arguments: {', '.join(sorted(set(unexpected)))}")

    def get(self, name: str, min_version: Version | None = None) -> str | None:
        value = self.params.get(name)
        if value is not None and min_version is not None and self.version < min_version:
            raise not_acceptable(
                f"The {name} parameter is not supported at API version {fmt(self.version)}; "
                f"it needs {fmt(min_version)} or newer."
            )
        return value

    def bool(self, name: str, min_version: Version | None = None) -> bool | None:
        value = self.get(name, min_version)
        return None if value is None else parse_bool(name, value)

    def int(self, name: str) -> int | None:
        value = self.get(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise bad_request(f"Invalid value for {name}: {value!r} is not an integer") from None


@dataclass(frozen=True)
class Page:
    limit: int
    marker: str | None
    sort_key: str
    sort_dir: str


def page_limit(query: Query, max_limit: int) -> int:
    """``limit``: positive, ``max_limit`` when absent and never more (nor out of SQL's range)."""
    limit = query.int("limit")
    if limit is not None and limit <= 0:
        raise bad_request(f"Limit must be positive: {limit}")
    return min(limit or max_limit, max_limit)


def page(
    query: Query,
    max_limit: int,
    *,
    sortable: Iterable[str],
    default_key: str = "id",
    forbidden_keys: Iterable[str] = (),
) -> Page:
    """Pagination parameters, validated."""
    limit = page_limit(query, max_limit)
    sort_dir = (query.get("sort_dir") or "asc").lower()
    if sort_dir not in ("asc", "desc"):
        raise bad_request(
            f"Invalid sort direction: {sort_dir}. Acceptable values are 'asc' or 'desc'"
        )
    sort_key = query.get("sort_key") or default_key
    if sort_key in set(forbidden_keys) or sort_key not in set(sortable):
        raise bad_request(f"The sort_key value {sort_key} is an invalid field for sorting")
    return Page(limit, query.get("marker"), sort_key, sort_dir)


def keyset(
    stmt: Select[Any], column: Any, id_column: Any, pg: Page, marker: tuple[Any, int] | None
) -> Select[Any]:
    """``stmt`` ordered by ``pg`` and started after ``marker`` (its sort value and id).

    NULLs sort as the smallest value on every engine (SQLite and PostgreSQL
    disagree by default), so a marker whose sort column is NULL -- a node
    without a ``fault``, a port without a ``name`` -- continues exactly where
    the previous page stopped instead of comparing with NULL. The marker's
    value is a bound parameter: SQLAlchemy refuses ``column > True`` for a
    boolean sort key (``maintenance``, ``pxe_enabled``).
    """
    ascending = pg.sort_dir == "asc"
    if marker is not None:
        raw_value, marker_id = marker
        value = None if raw_value is None else literal(raw_value, column.type)
        later_id = id_column > marker_id if ascending else id_column < marker_id
        if value is None:
            after = (
                or_(and_(column.is_(None), later_id), column.is_not(None))
                if ascending
                else and_(column.is_(None), later_id)
            )
        elif ascending:
            after = or_(column > value, and_(column == value, later_id))
        else:
            after = or_(column < value, and_(column == value, later_id), column.is_(None))
        stmt = stmt.where(after)
    if ascending:
        order = [column.asc().nulls_first(), id_column.asc()]
    else:
        order = [column.desc().nulls_last(), id_column.desc()]
    return stmt.order_by(*order).limit(pg.limit)


def fields(query: Query, known: Mapping[str, Version]) -> list[str] | None:
    """The ``fields`` list (>=1.8), each known and visible at the request's version."""
    raw = query.get("fields", (1, 8))
    if raw is None:
        return None
    names = [f.strip() for f in raw.split(",") if f.strip()]
    for name in names:
        since = known.get(name)
        if since is None:
            raise bad_request(f"Field {name} is not a valid field")
        if query.version < since:
            raise not_acceptable(
                f"Field {name} is not available at API version {fmt(query.version)}"
            )
    return names
