"""Ironic's ``links`` lists: a versioned ``self`` and an unversioned ``bookmark``."""

from __future__ import annotations


def links(base: str, collection: str, ident: str) -> list[dict[str, str]]:
    return [
        {"href": f"{base}/v1/{collection}/{ident}", "rel": "self"},
        {"href": f"{base}/{collection}/{ident}", "rel": "bookmark"},
    ]


def sub_links(base: str, collection: str, ident: str, sub: str) -> list[dict[str, str]]:
    return [
        {"href": f"{base}/v1/{collection}/{ident}/{sub}", "rel": "self"},
        {"href": f"{base}/{collection}/{ident}/{sub}", "rel": "bookmark"},
    ]
