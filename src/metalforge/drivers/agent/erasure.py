"""Per-disk erasure records: proof of what cleaning erased, kept on the node.

An agent's erase step may report, per disk, the device, its serial, the
method, the result and how long it took (a list of such dicts). IPA's stock
hardware manager reports less (a ``{device: result}`` mapping); both are
turned into the same record shape, with what is unknown left ``None``.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ErasureRecord(TypedDict):
    device: str
    serial: str | None
    method: str
    result: str
    duration: float | None
    step: str
    finished_at: str


def records_from_result(result: Any, step: str, finished_at: str) -> list[ErasureRecord]:
    """The erasure records in an erase step's ``clean_result`` (empty when it reports none)."""
    entries: list[tuple[str, dict[str, Any]]] = []
    if isinstance(result, list):
        entries = [(str(item.get("device")), item) for item in result if isinstance(item, dict)]
    elif isinstance(result, dict):
        for device, value in result.items():
            entries.append((str(device), value if isinstance(value, dict) else {"result": value}))
    records: list[ErasureRecord] = []
    for device, item in entries:
        duration = item.get("duration")
        records.append(
            ErasureRecord(
                device=str(item.get("device") or device),
                serial=None if item.get("serial") is None else str(item["serial"]),
                method=str(item.get("method") or step),
                result=_result_text(item.get("result")),
                duration=float(duration) if isinstance(duration, int | float) else None,
                step=step,
                finished_at=finished_at,
            )
        )
    return records


def _result_text(value: Any) -> str:
    if value is None or value is True:
        return "erased"
    if value is False:
        return "failed"
    return str(value)


def describe(record: ErasureRecord) -> str:
    """One history line for a record."""
    took = f" in {record['duration']:.2f}s" if record["duration"] is not None else ""
    serial = f" (serial {record['serial']})" if record["serial"] else ""
    return f"{record['device']}{serial}: {record['method']} {record['result']}{took}"
