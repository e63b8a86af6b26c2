"""What the GPU check needs on a bare machine with no package registry (a lent GPU machine): a folder to carry there.

It holds the pure-Python packages such a machine's Python lacks (llama_cpp without its libraries, which the check
builds from source there, and gguf, huggingface_hub with httpx2, platformdirs, diskcache), with their metadata, and the
llama-cpp-python sdist without its git history, docs and vocabularies but the Qwen2 one (14 MB against 77 MB).

Run here: .venv/bin/python -m tests.tools.device_bundle [--out .device] (ignore the folder: echo /.device/ >> .git/info/exclude)
Run there: PYTHONPATH=$PWD/.device/site:$PWD python3 -m tests.tools.gpu_check --sdist .device/llama_cpp_python-VERSION.tar.gz ...
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tarfile
from pathlib import Path

from localspec.machine import llama_sources
from tests.tools.gpu_check import VOCAB_MEMBER, find_sdist

PACKAGES = ("llama_cpp", "gguf", "huggingface_hub", "httpx2", "platformdirs", "diskcache")
DISTRIBUTIONS = ("llama_cpp_python", "gguf", "huggingface_hub", "httpx2", "platformdirs", "diskcache")
LEFT_OUT = (".git/", "vendor/llama.cpp/docs/", "vendor/llama.cpp/tools/server/public", "vendor/llama.cpp/tools/server/webui",
            "vendor/llama.cpp/examples/llama.android", "vendor/llama.cpp/examples/llama.swiftui")


def copy_packages(site: Path) -> None:
    """The packages and their dist-info from this environment's site-packages, without compiled caches or llama_cpp's libraries."""
    for name in PACKAGES:
        package = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(package, site / name, ignore=shutil.ignore_patterns("__pycache__", "lib"), dirs_exist_ok=True)
        for distribution in DISTRIBUTIONS:
            for info in package.parent.glob(f"{distribution}-*.dist-info"):
                shutil.copytree(info, site / info.name, dirs_exist_ok=True)


def trimmed_sdist(sdist: Path, out: Path) -> Path:
    """The sdist without what a build does not read; it keeps the Qwen2 vocabulary the check's models use."""
    prefix = f"llama_cpp_python-{llama_sources.llama_cpp_version()}/"
    target = out / sdist.name
    with tarfile.open(sdist) as source, tarfile.open(target, "w:gz") as trimmed:
        for member in source.getmembers():
            inner = member.name.removeprefix(prefix)
            other_vocab = inner.startswith("vendor/llama.cpp/models/") and member.isfile() and inner != VOCAB_MEMBER
            if not inner.startswith(LEFT_OUT) and not other_vocab:
                trimmed.addfile(member, source.extractfile(member) if member.isfile() else None)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.device_bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".device"), help="the folder to carry (default .device)")
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python's source .tar.gz (default: kept from an earlier run, else pip fetches it)")
    args = parser.parse_args(argv)
    site = args.out / "site"
    site.mkdir(parents=True, exist_ok=True)
    copy_packages(site)
    bundled = trimmed_sdist(find_sdist(args.sdist), args.out)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    print(f"device bundle in {args.out} ({size:.0f} MiB): packages in {site}, sources {bundled.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
