"""The user's settings: what the app's settings screen edits, saved as JSON in the config directory.

A settings file that cannot be read is never overwritten: it is moved aside
(`settings.json.bad`), the defaults are used, and the caller is told, so what
the user saved is not lost.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.engine.errors import SamplingSettingsError
from localspec.engine.sampling import SamplingParams
from localspec.errors import LocalspecError


class SettingsError(LocalspecError):
    """A setting with a value the engine cannot use."""


@dataclass(frozen=True)
class Settings:
    drafter: str = registry.DEFAULT
    draft_max: int | None = None  # None: defaults.draft_max_for(drafter, the pair's recommendation)
    draft_p_min: float = defaults.DRAFT_P_MIN
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    seed: int | None = None
    max_tokens: int = 2048
    n_ctx: int = defaults.N_CTX
    target_gpu_layers: int | None = None  # None: the memory planner decides (localspec.machine.memory_plan)
    draft_gpu_layers: int | None = None
    threads: int | None = None  # None: physical cores
    self_draft_layers: int | None = None  # the self drafter's blocks (None: a quarter of the target's)
    last_pair: str | None = None
    tint_accepted: bool = False  # Markdown by default; Ctrl+T shows the provenance tint

    def validate(self) -> Settings:
        checks = [
            (self.drafter in registry.DRAFTERS, f"drafter must be one of {', '.join(registry.DRAFTERS)}"),
            (self.draft_max is None or 0 <= self.draft_max <= 32, "draft-max must be 0 to 32"),
            (0.0 <= self.draft_p_min <= 1.0, "draft p-min must be 0 to 1"),
            (self.max_tokens >= 1, "max tokens must be 1 or more"),
            (self.n_ctx >= 256, "context size must be 256 or more"),
            (self.threads is None or self.threads >= 1, "threads must be 1 or more"),
            (self.self_draft_layers is None or self.self_draft_layers >= 1, "self-draft layers must be 1 or more"),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(f"Invalid setting: {message}.")
        try:
            self.sampling.validate()  # the engine's own rule, so the two cannot drift apart
        except SamplingSettingsError as exc:
            raise SettingsError(f"Invalid setting: {exc}.") from None
        return self

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes).validate()

    def generation_dict(self) -> dict[str, Any]:
        """What an answer was generated with, stored beside it."""
        return {k: v for k, v in asdict(self).items() if k not in ("last_pair", "tint_accepted")}


def settings_path() -> Path:
    return paths.config_dir() / "settings.json"


def load_settings(path: Path | None = None) -> tuple[Settings, str | None]:
    """The saved settings, or the defaults and a note saying why the file was set aside."""
    path = path or settings_path()
    if not path.exists():
        return Settings(), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {f.name for f in fields(Settings)}
        return Settings(**{k: v for k, v in data.items() if k in known}).validate(), None
    except (OSError, ValueError, TypeError, SettingsError) as exc:
        aside = path.with_suffix(".json.bad")
        path.replace(aside)
        return Settings(), f"{path} could not be used ({exc}); it was moved to {aside} and the defaults apply."


def save_settings(settings: Settings, path: Path | None = None) -> None:
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
    temporary.replace(path)  # atomic: a crash mid-write never leaves half a file
