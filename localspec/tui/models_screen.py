"""The models screen: the catalog with sizes, tags, memory and download state; download, check, pick, add."""

from __future__ import annotations

from functools import partial

from rich.text import Text
from textual import getters
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, Label, Static

from localspec.catalog.models_toml import CatalogError, Pair
from localspec.catalog.pair_files import PairCheck, download_status, local_pair_paths, pair_size, pair_states
from localspec.catalog.user_pairs import add_user_pair
from localspec.engine import defaults
from localspec.errors import LocalspecError
from localspec.machine.memory_plan import pair_footprint_bytes
from localspec.tui import messages as m
from localspec.tui import workers
from localspec.tui.app_state import AppState
from localspec.tui.download_dialog import DownloadView
from localspec.tui.pair_control import PairControl
from localspec.units import GIB, format_bytes


def describe_check(result: PairCheck) -> Text:
    text = Text()
    for role, report in result.reports:
        where = "over HTTP" if report.remote else "from disk"
        size = f" of {format_bytes(report.file_size)}" if report.file_size else ""
        text.append(f"{role:<7}", style="bold")
        text.append(f"{report.summary.describe()}\n       header read {where}: {format_bytes(report.bytes_read)}{size}\n")
    text.append(result.verdict, style="bold green" if result.compatible else "bold red")
    text.append(f"  ({result.seconds:.2f} s)")
    for note in result.notes:
        text.append(f"\nnote: {note}")
    return text


class ModelsScreen(Screen[None]):
    app = getters.app(PairControl)  # typed: the screen opens pairs, downloads and reloads the catalog through it

    BINDINGS = [
        Binding("enter", "use", "Use pair", priority=True),
        Binding("d", "download", "Download"),
        Binding("x", "cancel_download", "Cancel download"),
        Binding("c", "check", "Check"),
        Binding("a", "add", "Add pair"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._measured_needs: dict[str, int | None] = {}  # read once per visit: a header read is not free

    def compose(self) -> ComposeResult:
        yield Label("Models: Enter uses the selected pair · d downloads · c checks it from its headers · a adds your own", classes="title")
        yield DataTable(id="pairs", cursor_type="row", zebra_stripes=True)
        with Vertical(id="pair-detail"):
            yield Static("", id="detail")
            yield DownloadView(id="download")
            yield Static("", id="report")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # no tags column: cut at the screen's edge ("reasonin"), they are whole in the selected pair's detail
        table.add_columns("", "pair", "downloaded", "size", "needs")
        self.refresh_rows()
        current = self.app.loaded.pair.id if self.app.loaded is not None else self.app.settings.last_pair
        ids = list(self.app.catalog.pairs)
        if current in ids:
            table.move_cursor(row=ids.index(current))
        self.query_one("#download").display = self.app.downloading_pair is not None
        table.focus()

    def refresh_rows(self) -> None:
        app = self.app
        table = self.query_one(DataTable)
        selected = table.cursor_row
        table.clear()
        for pair in app.catalog.pairs.values():
            states = pair_states(app.hub_config, pair)
            status = download_status(states)
            if pair.id == app.downloading_pair:
                status = "downloading"
            size = pair_size(states)
            loaded = app.loaded is not None and app.loaded.pair.id == pair.id
            needs = self.memory_needed(pair, status)
            table.add_row("▶" if loaded else "", pair.id, status, format_bytes(size) if size else "?",
                          format_bytes(needs) if needs else "?", key=pair.id)
        if table.row_count:
            table.move_cursor(row=min(selected, table.row_count - 1))

    def memory_needed(self, pair: Pair, status: str) -> int | None:
        """The catalog's estimate, else (the user's own files) what the planner reads from the headers on disk, at the
        context the catalog's estimates assume: a local pair read "needs ?"."""
        if pair.memory_gib:
            return int(pair.memory_gib * GIB)
        if status != "yes":
            return None
        if pair.id not in self._measured_needs:
            try:
                target, draft = local_pair_paths(self.app.hub_config, pair)
                self._measured_needs[pair.id] = pair_footprint_bytes(target, draft, defaults.N_CTX)
            except LocalspecError:  # not a GGUF file, say: the load says what is wrong
                self._measured_needs[pair.id] = None
        return self._measured_needs[pair.id]

    def selected_pair(self) -> Pair | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else self.app.catalog.pairs.get(key)

    def on_data_table_row_highlighted(self) -> None:
        pair = self.selected_pair()
        if pair is None:
            return
        lines = [f"{pair.title}", pair.description] if pair.description else [pair.title]
        for role, ref in pair.models:
            facts = ", ".join(x for x in (ref.quantization, format_bytes(ref.size) if ref.size else None, ref.license) if x)
            lines.append(f"{role}: {ref.label}" + (f" ({facts})" if facts else ""))
        if pair.tags:
            lines.append(f"tags: {', '.join(pair.tags)}")
        if pair.draft_max:
            lines.append(f"recommended: draft-max {pair.draft_max}, p-min {pair.draft_p_min}")
        if pair.notes:
            lines.append(pair.notes)
        self.query_one("#detail", Static).update("\n".join(lines))
        self.query_one("#report", Static).update("")

    def action_use(self) -> None:
        pair = self.selected_pair()
        if pair is not None:
            self.app.pop_screen()
            self.app.open_pair(pair.id)

    def action_download(self) -> None:
        pair = self.selected_pair()
        if pair is None:
            return
        if download_status(pair_states(self.app.hub_config, pair)) == "yes":
            self.notify(f"{pair.id} is already downloaded.", timeout=3)
            return
        if self.app.start_download(pair.id):
            self.query_one("#download").display = True
            self.refresh_rows()

    def action_cancel_download(self) -> None:
        self.app.cancel_download()

    def action_check(self) -> None:
        pair = self.selected_pair()
        if pair is None:
            return
        self.query_one("#report", Static).update(f"Reading the GGUF headers of {pair.id}…")
        self.app.run_worker(partial(workers.check, self.app.post_message, self.app.hub_config, pair),
                            thread=True, group="check", name=f"check {pair.id}")

    def action_add(self) -> None:
        def added(pair_id: str | None) -> None:
            if pair_id:
                self.app.reload_catalog()
                self.refresh_rows()
                table = self.query_one(DataTable)
                table.move_cursor(row=table.get_row_index(pair_id))  # on the new pair: Enter uses it, d downloads it
                self.notify(f"Pair {pair_id!r} saved to your models.toml.", timeout=4)

        self.app.push_screen(AddPairDialog(), added)

    def action_back(self) -> None:
        self.app.pop_screen()

    def receive(self, message: object) -> None:
        if isinstance(message, m.DownloadProgressed):
            self.query_one("#download", DownloadView).show(message.progress)
        elif isinstance(message, (m.DownloadDone, m.DownloadFailed)):
            self.refresh_rows()
        elif isinstance(message, m.CheckDone):
            self.query_one("#report", Static).update(describe_check(message.result))
        elif isinstance(message, m.CheckFailed):
            self.query_one("#report", Static).update(Text(message.error, style="red"))


class AddPairDialog(ModalScreen["str | None"]):
    """A custom pair from local files or hub files, saved to the user's models.toml."""

    app = getters.app(AppState)  # typed: the dialog writes to the app's catalog file

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Add a pair. Models are local .gguf paths, or OWNER/REPO/FILE.gguf on the hub.")
            yield Input(placeholder="id, e.g. my-7b", id="pair-id")
            yield Input(placeholder="title", id="pair-title")
            yield Input(placeholder="target: /path/to/target.gguf or OWNER/REPO/FILE.gguf", id="pair-target")
            yield Input(placeholder="draft: /path/to/draft.gguf or OWNER/REPO/FILE.gguf (empty: the target alone)", id="pair-draft")
            yield Label("", id="add-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#pair-id", Input).focus()

    def on_input_submitted(self) -> None:
        self.save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.save()
        else:
            self.dismiss(None)

    def save(self) -> None:
        values = {name: self.query_one(f"#pair-{name}", Input).value for name in ("id", "title", "target", "draft")}
        try:
            pair = add_user_pair(self.app.catalog_file, values["id"], values["title"], values["target"], values["draft"])
        except CatalogError as exc:
            error = self.query_one("#add-error", Label)
            error.update(str(exc))
            error.scroll_visible()
            return
        self.dismiss(pair.id)
