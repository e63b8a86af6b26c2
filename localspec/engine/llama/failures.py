"""What to tell the user when llama.cpp refuses a model file or a pass: its own words (from its log) and what to do."""

from __future__ import annotations

from pathlib import Path

from localspec.engine.llama import llama_log


def load_failed(path: Path) -> str:
    errors = llama_log.take_recent_errors()
    size = path.stat().st_size
    reason = "; ".join(errors) if errors else "no reason given"
    return (
        f"llama.cpp could not load {path} ({size:,} bytes): {reason}. "
        "The file may be truncated or damaged (download it again), or made for a newer llama.cpp "
        f"(see the full log in {llama_log.log_file_path()})."
    )


def decode_failed(role: str, rc: int, n: int, n_ctx: int, n_past: int) -> str:
    if rc == 1:
        return (
            f"{role} model: no room in the {n_ctx}-token context for {n} more tokens "
            f"({n_past} in use). Start a new conversation or raise the context size."
        )
    errors = "; ".join(llama_log.take_recent_errors()) or f"llama_decode returned {rc}"
    return f"{role} model: decoding failed ({errors}). See {llama_log.log_file_path()}."
