"""What auto's methods cost inside a real bench run, per call: a measurement aid, not a test.

The bench's "py ms" column says how much Python a step costs; this says where auto's share goes (its confidence read,
its lookup, its plan, what it learns), timed in place, where a decode has just evicted the caches (cold_numpy.py).
Run: .venv/bin/python -m tests.tools.auto_step_costs BENCH-ARGS...   (e.g. --target T.gguf --drafters none --rounds 1)
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from localspec.cli.main import main as localspec
from localspec.engine.drafters.auto import belief, candidates, controller, planner, search
from localspec.engine.drafters.ngram import PromptLookup

spent: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # name: [ns, calls]


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            entry = spent[name]
            entry[0] += time.perf_counter_ns() - start
            entry[1] += 1
    return wrapper


def main() -> None:
    for owner, name, label in ((controller.AutoDrafter, "propose", "propose"), (controller.AutoDrafter, "accept", "accept"),
                               (controller.AutoDrafter, "observe", "observe (every observation)"),
                               (belief.SequenceBelief, "observe_target", "  the target's confidence"),
                               (PromptLookup, "lookup", "  lookup"), (PromptLookup, "advance", "  lookup's advance"),
                               (planner.Planner, "plan", "  plan"), (planner.Planner, "settle", "  shadows settled"),
                               (belief.SequenceBelief, "stepped", "  belief stepped"),
                               (planner.Planner, "observe_verify", "  verify cost learned")):
        setattr(owner, name, timed(label, getattr(owner, name)))
    planner.candidates = timed("    candidates", candidates.candidates)
    planner.ascend = timed("    ascent", search.ascend)
    sys.argv = ["localspec", "bench", *sys.argv[1:]]
    try:
        localspec()
    except SystemExit:
        pass
    for name, (ns, calls) in spent.items():
        print(f"{name:32} {calls:7} calls {ns / calls / 1e3:8.1f} us a call")


if __name__ == "__main__":
    main()
