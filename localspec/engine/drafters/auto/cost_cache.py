"""auto's cost table, kept between runs: measured once per model file and machine, then refined by every answer.

Timing every batch size at load made the first token wait 10 s on an idle
2-core machine and over a minute on a busy one. Now the first use of a pair
times a few short passes, the decode loop refines the table from real steps,
and the table is saved when a generation ends; the next load reads it and times
nothing. It is keyed by what the costs depend on: both model files, the
llama.cpp build (its version and the CPU features and backends it reports),
the CPU weight buffers in use (AMX or not: engine/llama/amx.py), the thread count and
the GPU layers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from localspec.engine import json_cache
from localspec.engine.llama import amx
from localspec.engine.pass_costs import CostTable, PassCosts

if TYPE_CHECKING:
    from localspec.engine.llama.model import Model

# Bumped when the table's meaning changes: older files are then ignored. 2: a draft token's cost includes its ask's sampling.
# 3: the draft's passes have their own costs by size. 4: no size's first pass is timed (a GPU's tables priced its batches
# at their one-off costs, and auto kept them). 5: a size's cost is that of a pass after one of its size; a change of
# size is priced apart (engine/pass_costs.py). 6: a calibrated size's sample is the faster pass of its pair (one slowed
# pass priced a size auto then never ran, for good).
FORMAT = 6


def _file_identity(model: Model) -> str:
    stat = model.path.stat()
    return f"{model.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def cache_file(directory: Path, target: Model, draft: Model | None) -> Path:
    parts = [f"format {FORMAT}", llama_cpp.__version__, llama_cpp.llama_print_system_info().decode(errors="replace"),
             f"weight buffers {','.join(amx.cpu_weight_buffers())}",
             f"threads {target.n_threads}", f"target {_file_identity(target)} gpu {target.config.resolved_gpu_layers()}"]
    if draft is not None:
        parts.append(f"draft {_file_identity(draft)} gpu {draft.config.resolved_gpu_layers()} threads {draft.n_threads}")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return directory / f"{target.path.stem}.{key}.json"


def _pass_costs(data: dict[str, Any]) -> PassCosts:
    return PassCosts({int(n): float(ms) for n, ms in data["ms"].items()}, {int(n): float(c) for n, c in data["observations"].items()},
                     float(data["switch_ms"]), float(data["switch_observations"]))


def _pass_data(costs: PassCosts) -> dict[str, Any]:
    return {"ms": {str(n): ms for n, ms in sorted(costs.ms.items())}, "observations": {str(n): c for n, c in sorted(costs.observations.items())},
            "switch_ms": costs.switch_ms, "switch_observations": costs.switch_observations}


def load(path: Path) -> CostTable | None:
    """The saved table, or None when there is none (or it cannot be read: then it is measured again)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return CostTable(_pass_costs(data["target"]), None if data.get("draft") is None else _pass_costs(data["draft"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save(path: Path, table: CostTable) -> None:
    """Atomically; a cache that cannot be written only means measuring again next time."""
    data = {"target": _pass_data(table.target), "draft": None if table.draft is None else _pass_data(table.draft)}
    json_cache.write_json(path, data)
