"""Sizes as people read them, the same in every layer (the planner, the downloads, the doctor, the app)."""

from __future__ import annotations

GIB = 1 << 30  # a catalog's memory_gib is in binary gigabytes


def format_bytes(n: float) -> str:
    """Decimal units, as disks and the hub count them: 1.5 GB is 1.5e9 bytes."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_eta(seconds: float | None) -> str:
    """A time left: 00:42, 12:05, 1:02:07; --:-- while unknown."""
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"
