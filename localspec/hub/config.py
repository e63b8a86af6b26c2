"""Where the hub is and where its files go, as huggingface-hub's own settings say.

`HF_ENDPOINT`, `HF_HOME` / `HF_HUB_CACHE`, `HF_TOKEN` and `HF_HUB_OFFLINE` mean
what users know them to mean, because we read them through huggingface-hub
rather than parsing them a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import build_hf_headers


@dataclass(frozen=True)
class HubConfig:
    endpoint: str
    cache_dir: Path
    offline: bool
    token: str | bool | None = None  # None: huggingface-hub's own lookup (HF_TOKEN, then the saved login)

    @classmethod
    def from_env(cls) -> HubConfig:
        return cls(endpoint=constants.ENDPOINT, cache_dir=Path(constants.HF_HUB_CACHE), offline=constants.is_offline_mode())

    def headers(self) -> dict[str, str]:
        return build_hf_headers(token=self.token)

    def repo_page(self, repo: str) -> str:
        return f"{self.endpoint}/{repo}"
