"""Node management: boot device (``/v1/nodes/{id}/management/...``)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
