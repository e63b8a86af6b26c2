"""The bench's two charts, as PNG files: tok/s against K for each drafter (auto and plain as lines), and acceptance by position.

matplotlib draws them headless (the Agg backend), so they work over SSH and in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localspec.bench.report import total
from localspec.bench.results import BenchResult
from localspec.engine.drafters import registry

SPEED_CHART = "bench-speed.png"
ACCEPTANCE_CHART = "bench-acceptance.png"


def save_charts(result: BenchResult, directory: Path) -> list[Path]:
    import matplotlib  # only with --charts: a bench without charts does not pay for matplotlib's import

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    drafters = list(dict.fromkeys(mode.drafter for mode in result.modes if mode.fixed))

    def rate(**match: object) -> float:
        runs = [m for m in result.measurements if all(getattr(m.mode, key) == value for key, value in match.items())]
        return total(runs).predicted_per_second

    speed, axes = plt.subplots(figsize=(8, 5))
    for drafter in drafters:
        axes.plot(result.ks, [rate(drafter=drafter, k=k, verification="speculative") for k in result.ks], marker="o", label=drafter)
    axes.axhline(rate(plain=True), color="black", linestyle="--", label="plain")
    if any(mode.adaptive for mode in result.modes):
        axes.axhline(rate(adaptive=True), color="tab:red", linestyle="-.", linewidth=2, label=registry.ADAPTIVE)
    axes.set(xlabel="K (most tokens drafted per step)", ylabel="tokens per second", xticks=result.ks,
             title=f"Speed by drafter and K (all prompts, temperature {result.temperature:g})")
    paths = [_finish(speed, axes, directory / SPEED_CHART)]

    acceptance, axes = plt.subplots(figsize=(8, 5))
    k = result.ks[-1]
    for drafter in [*drafters, registry.ADAPTIVE]:
        runs = [m for m in result.measurements if m.mode.drafter == drafter and (m.mode.adaptive or m.mode.k == k)
                and m.mode.verification == "speculative"]
        by_position = total(runs).acceptance_by_position
        if by_position:
            axes.plot(range(1, len(by_position) + 1), by_position, marker="o", label=drafter)
    axes.set(xlabel="draft position", ylabel="share accepted (this and every earlier position)", ylim=(0, 1.05),
             title=f"Acceptance by position (K={k}; auto at the K it chose)")
    paths.append(_finish(acceptance, axes, directory / ACCEPTANCE_CHART))
    return paths


def _finish(figure: Any, axes: Any, path: Path) -> Path:
    """Legend, grid, and the PNG written; the figure is closed so a long bench does not hold every chart."""
    from matplotlib import pyplot as plt  # already imported by save_charts, which selected the backend first

    axes.legend()
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path
