"""The settings form: drafter and speculation, sampling, and how the models are loaded."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from localspec.engine.defaults import AUTO_DRAFT_MAX
from localspec.engine.drafters.registry import DRAFTERS, PairParts
from localspec.session.settings import Settings, SettingsError

# (field, label, help) in the order shown; None values mean "automatic"
FORM = [
    ("draft_max", "draft-max (K)", f"most tokens drafted per step; empty = {AUTO_DRAFT_MAX} for auto, else the pair's"),
    ("draft_p_min", "draft p-min", "stop drafting below this draft confidence; empty = the pair's"),
    ("temperature", "temperature", "0 = greedy: exactly the target's output"),
    ("top_k", "top-k", "0 = off"),
    ("top_p", "top-p", ""),
    ("min_p", "min-p", ""),
    ("seed", "seed", "empty = random each time"),
    ("max_tokens", "max tokens", "per answer; empty = until it ends or the context is full"),
    ("n_ctx", "context size", "tokens; reloads the pair"),
    ("target_gpu_layers", "target GPU layers", "empty = the memory planner decides, -1 = all; reloads"),
    ("draft_gpu_layers", "draft GPU layers", "empty = the memory planner decides, -1 = all; reloads"),
    ("threads", "threads", "empty = physical cores; reloads"),
    ("self_draft_layers", "self-draft blocks", "the self drafter's share of the target; empty = a quarter; reloads"),
    ("rpc_servers", "RPC servers", "HOST:PORT[,...] of ggml-rpc-servers for the target's layers; trusted networks only; reloads"),
]
_TYPES = {f.name: f.type for f in fields(Settings)}


def parse_field(name: str, text: str) -> Any:
    text = text.strip()
    kind = str(_TYPES[name])
    if not text:
        if "None" in kind:
            return None
        raise SettingsError(f"{name.replace('_', ' ')} needs a value.")
    if kind.startswith("str"):
        return text
    try:
        return int(text) if kind.startswith("int") else float(text)
    except ValueError:
        raise SettingsError(f"{name.replace('_', ' ')}: {text!r} is not a number.") from None


class SettingsScreen(ModalScreen["Settings | None"]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, settings: Settings, parts: PairParts | None = None) -> None:
        """`parts`: what the loaded pair offers the drafters (None while none is loaded)."""
        super().__init__()
        self.settings = settings
        self.parts = parts

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog settings"):
            yield Label("Settings (Ctrl+S saves, Esc cancels)", classes="title")
            with VerticalScroll():
                with Horizontal(classes="field"):
                    yield Label("drafter", classes="field-label")
                    with Vertical(classes="field-input"):
                        yield Select([(f"{d.name}: {d.description}", d.name) for d in DRAFTERS.values()],
                                     value=self.settings.drafter, allow_blank=False, id="drafter")
                        yield Label(self.drafter_problem(self.settings.drafter), id="drafter-problem", classes="error")
                for name, label, help_text in FORM:
                    value = getattr(self.settings, name)
                    with Horizontal(classes="field"):
                        yield Label(label, classes="field-label")
                        # the hint wraps under its input: as a placeholder it was cut mid-sentence at 80 and 120 columns
                        with Vertical(classes="field-input"):
                            yield Input("" if value is None else str(value), id=name)
                            if help_text:
                                yield Label(help_text, classes="hint")
            yield Label("", id="settings-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#drafter", Select).focus()  # the keyboard starts in the form, not nowhere

    def drafter_problem(self, drafter: object) -> str:
        """Why the loaded pair cannot run `drafter`, said as it is picked: saved without a word, it failed the first send."""
        problem = self.parts.problem(str(drafter)) if self.parts is not None else ""
        return f"{problem[0].upper()}{problem[1:]}." if problem else ""

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "drafter":
            self.query_one("#drafter-problem", Label).update(self.drafter_problem(event.value))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        try:
            changes = {name: parse_field(name, self.query_one(f"#{name}", Input).value) for name, _, _ in FORM}
            changes["drafter"] = self.query_one("#drafter", Select).value
            if problem := self.drafter_problem(changes["drafter"]):
                raise SettingsError(problem)
            self.dismiss(self.settings.with_changes(**changes))
        except SettingsError as exc:
            self.query_one("#settings-error", Label).update(str(exc))
