"""Sizes as people read them, the same in every layer (the planner, the downloads, the doctor, the app)."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """Decimal units, as disks and the hub count them: 1.5 GB is 1.5e9 bytes."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
