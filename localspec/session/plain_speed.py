"""The fastest plain decoding this machine has given each target, so that a slow rate now is told apart from a slow model.

Beside another busy program, llama.cpp's threads can decode many times slower than usual. Every "× plain" figure is
measured against plain decoding timed under the same load, so it looked normal, and nothing said why answers crawled.
Each rate measured is kept beside the best one for the same file, threads and GPU layers; the app and
`doctor` say so when the latest falls far below the best.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from localspec import paths
from localspec.engine import json_cache
from localspec.engine.llama.model import Model
from localspec.engine.stats import GenerationStats
from localspec.session.plain_rate import plain_steps

SLOWED = 0.5  # a rate under this share of the best is worth a word: the noise between quiet runs is a few percent
MIN_STEPS = 8  # an answer's plain steps that make a rate worth keeping (fewer: one slow pass decides it)


@dataclass(frozen=True)
class PlainSpeed:
    """One target's plain decoding here: the latest rate measured and the best one, in tokens per second."""

    target: str  # the file's name
    threads: int
    last: float
    best: float

    @property
    def slowed(self) -> bool:
        return self.last < SLOWED * self.best

    def note(self) -> str:
        """What to tell the user when the rate is far below the best."""
        return (f"Plain decoding of {self.target} runs at {self.last:.1f} tok/s, {self.last / self.best:.0%} of the {self.best:.1f} "
                f"tok/s this machine gave it before: another program is probably busy on the CPU. Close it, or give localspec "
                f"fewer threads (now {self.threads}).")


def _record_file() -> Path:
    return paths.cache_dir() / "plain-speed.json"


def _key(target: Model) -> str:
    stat = target.path.stat()
    return f"{target.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns} threads {target.n_threads} gpu {target.config.resolved_gpu_layers()}"


def _read(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _speed(entry: object) -> PlainSpeed | None:
    try:
        return PlainSpeed(**entry)  # type: ignore[arg-type]
    except TypeError:
        return None


def remember_answer(target: Model, stats: GenerationStats, path: Path | None = None) -> PlainSpeed | None:
    """Keep the plain rate an answer's one-token passes measured; None where it took too few to tell."""
    count, step_ms = plain_steps(stats)
    return remember(target, step_ms, path) if count >= MIN_STEPS else None


def remember(target: Model, ms_per_token: float, path: Path | None = None) -> PlainSpeed | None:
    """Keep a plain rate measured now (its milliseconds per token) beside the best one; None where none was measured."""
    if ms_per_token <= 0:
        return None
    path = path or _record_file()
    records = _read(path)
    key, rate = _key(target), 1000.0 / ms_per_token
    earlier = _speed(records.get(key))
    speed = PlainSpeed(target.path.name, target.n_threads, rate, max(rate, earlier.best if earlier else rate))
    records[key] = asdict(speed)
    json_cache.write_json(path, records)
    return speed


def recorded(path: Path | None = None) -> list[PlainSpeed]:
    """Every target's record, as `doctor` lists them."""
    return [speed for speed in map(_speed, _read(path or _record_file()).values()) if speed is not None]
