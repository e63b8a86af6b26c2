"""The live statistics panel: acceptance, tokens per pass, per-position bars, a sparkline, rates, speedup, time split."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from localspec.engine.drafters import registry
from localspec.engine.drafters.auto.choice import Source
from localspec.session.live_stats import StatsSnapshot

SPARKS = "▁▂▃▄▅▆▇█"
BAR_WIDTH = 12
BAR_POSITIONS = 8  # up to this many drafted positions get a bar each; more (K reaches 32) get one character each
SPARK_COLUMNS = 20  # positions per line of those characters


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "█" * filled + "░" * (width - filled)


def sparkline(values: list[float]) -> str:
    return "".join(SPARKS[min(len(SPARKS) - 1, int(v * (len(SPARKS) - 1) + 0.5))] for v in values)


def percent(value: float | None) -> str:
    return "  -  " if value is None else f"{100 * value:5.1f}%"


def render_snapshot(s: StatsSnapshot) -> Text:
    """The panel's text for one snapshot: pure, so it is cheap to test and to draw. Lines fit 27 columns."""
    text = Text()

    def line(label: str, value: str, style: str = "") -> None:
        text.append(f"{label:<10}", style="dim")
        text.append(value + "\n", style=style)

    line("drafter", _drafter_named(s))
    if s.drafter == registry.ADAPTIVE:
        _auto_choices(text, s)
    if s.grammar_ms_per_row is not None:  # a source of its own: the text it forced, drafted ahead of the drafter's
        if s.forced_n:
            line("grammar", f"{s.forced_n_accepted} tok forced")
        line("" if s.forced_n else "grammar", f"mask {s.grammar_ms_per_row:.{2 if s.grammar_ms_per_row < 10 else 1}f} ms/row")
    line("accepted", f"{percent(s.acceptance_answer)} answer", "bold")
    line("", f"{percent(s.acceptance_conversation)} chat")
    for i, (source, rate) in enumerate(s.acceptance_by_source.items()):  # the grammar's forced text and the drafter's own
        line("" if i else "by source", f"{100 * rate:3.0f}% {source}")
    line("tok/pass", f"{s.tokens_per_pass:.2f}")
    rates = s.acceptance_by_position
    if len(rates) > BAR_POSITIONS:  # a character per position: of the drafts that reached it, the share accepted up to it
        text.append("accepted by pos ▁0% █100%\n", style="dim")
        for start in range(0, len(rates), SPARK_COLUMNS):
            text.append(f"pos {start + 1:<3}", style="dim")
            text.append(sparkline(rates[start : start + SPARK_COLUMNS]) + "\n", style="green")
    elif rates:
        text.append("accepted by draft position\n", style="dim")
        for i, rate in enumerate(rates, start=1):
            text.append(f"pos {i:<2}", style="dim")
            text.append(bar(rate), style="green")
            text.append(f" {100 * rate:3.0f}%\n")
    if s.recent_acceptance:
        line("recent", sparkline(s.recent_acceptance[-16:]), "green")
    line("tok/s", f"{s.tokens_per_second_now:6.1f} now")
    line("", f"{s.tokens_per_second_avg:6.1f} avg", "bold")
    # An answer with nothing drafted was plain decoding: its ratio to plain would be noise, not a speedup.
    if s.speedup is not None and s.plain_tokens_per_second and s.acceptance_answer is not None:
        line("vs plain", f"{s.speedup:.2f}× ({s.plain_tokens_per_second:.1f}/s)", "bold green" if s.speedup >= 1.0 else "bold yellow")
    total = s.t_draft_ms + s.t_verify_ms + s.t_other_ms
    if total > 0:
        line("draft", f"{100 * s.t_draft_ms / total:3.0f}%  verify {100 * s.t_verify_ms / total:3.0f}%")
        line("other", f"{100 * s.t_other_ms / total:3.0f}%")
    line("prompt", f"{s.prompt_tokens} tokens")
    line("context", f"{s.context_used}/{s.n_ctx}")
    return text


def summary_parts(s: StatsSnapshot) -> list[str]:
    """The panel's chief numbers, most telling first: its one line where the terminal has no room for the panel."""
    if not registry.spec(s.drafter).drafts or s.draft_max == 0:
        parts = ["plain"]
    else:
        parts = [f"{percent(s.acceptance_answer).strip()} accepted" if s.acceptance_answer is not None else "nothing drafted yet"]
    if s.speedup is not None and s.plain_tokens_per_second and s.acceptance_answer is not None:
        parts.append(f"{s.speedup:.2f}× plain")
    parts += [f"{s.tokens_per_second_avg:.1f} tok/s", f"{s.tokens_per_pass:.2f} tok/pass", f"context {s.context_used}/{s.n_ctx}"]
    return parts


def render_summary(s: StatsSnapshot, width: int) -> Text:
    """As many of the chief numbers as fit `width` columns, whole: a part that does not fit is left out, not cut."""
    shown: list[str] = []
    for part in summary_parts(s):
        if len(" · ".join([*shown, part])) > width:
            break
        shown.append(part)
    return Text(" · ".join(shown), style="bold" if shown else "")


def _drafter_named(s: StatsSnapshot) -> str:
    if not registry.spec(s.drafter).drafts or s.draft_max == 0:
        return "none (plain)"
    return f"{s.drafter} · K≤{s.draft_max}" if registry.Supports.CHOOSES_K in registry.spec(s.drafter).supports else f"{s.drafter} · K={s.draft_max}"


def _auto_choices(text: Text, s: StatsSnapshot) -> None:
    """What auto chose this answer: steps and the tokens they emitted by source, or that it decoded plainly throughout."""
    if s.acceptance_answer is None:  # nothing drafted
        text.append("auto: plain decoding for\n", style="dim")
        text.append(f"all {s.generated} tokens\n")
        return
    text.append(f"{'auto chose':<13}{'steps':>6}{'tokens':>7}\n", style="dim")
    for share in s.by_source:
        if share.source is Source.GRAMMAR:  # not auto's choice: the grammar's own lines say it
            continue
        text.append(f"{share.source.display_name:<13}{share.steps:>6}{share.tokens:>7}\n")


class StatsPanel(Widget):
    """Repainted (never re-laid-out: its size is fixed) only when a snapshot arrives, at most ten times a second.

    A Static's update() would ask for a layout of the whole screen on every
    snapshot; repainting this one widget costs a fraction of that, and the CPU it
    saves belongs to llama.cpp. It counts its frames for the closing note.
    """

    DEFAULT_CLASSES = "panel"
    IDLE = Text("The numbers appear\nas an answer streams.", style="dim")  # "No answer yet." read wrong beside a reopened chat
    IDLE_FOLDED = Text("The numbers appear here as an answer streams.", style="dim")

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.frames = 0
        self.last_snapshot: StatsSnapshot | None = None
        self.folded = False  # one line under the chat (the "-folded" class), where the chat has no room beside the panel

    def render(self) -> Text:
        if self.last_snapshot is None:
            return self.IDLE_FOLDED if self.folded else self.IDLE
        return render_summary(self.last_snapshot, self.content_size.width) if self.folded else render_snapshot(self.last_snapshot)

    def fold(self, folded: bool) -> None:
        self.folded = folded
        self.set_class(folded, "-folded")

    def clear(self) -> None:
        """Back to the idle text: a new conversation has no numbers yet."""
        self.last_snapshot = None
        self.refresh()

    def show(self, snapshot: StatsSnapshot) -> None:
        self.last_snapshot = snapshot
        self.refresh()
        self.frames += 1
