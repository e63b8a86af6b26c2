"""The real app, driven by Pilot, on real llama.cpp with tiny generated models (and once with the real pair)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from localspec.engine.decode import Decoder
from localspec.hub.config import HubConfig
from localspec.session.history import History
from localspec.session.settings import Settings
from localspec.tui.conversation_list import ConversationList
from localspec.tui.dialogs import ConfirmDialog
from localspec.tui.download_dialog import DownloadDialog, DownloadView
from localspec.tui.message_view import MessageView
from localspec.tui.models_screen import ModelsScreen
from localspec.tui.prompt_input import PromptInput
from localspec.tui.settings_screen import SettingsScreen
from localspec.tui.stats_panel import StatsPanel
from tests import arch_models, mtp_models
from tests.app_pilot import Setup, answers, ask, local_pair, read_whole, run_async, slowed_generate, wait_for
from tests.hub_server import Fault, LoopbackHub
from tests.lossless import plain_text
from tests.tiny_models import CHAT_TEMPLATE


@run_async
async def test_a_prompt_streams_the_targets_own_text_and_the_statistics(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["same"]), last_pair="tiny", max_tokens=40, drafter="model")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        view = await ask(pilot, app, "hello there")
        panel = app.query_one(StatsPanel)
        assert view.status == "max_tokens" and view.text  # 40 tokens: cut there, and its header says so
        assert "cut at max tokens (F3 raises it)" in view._header()
        assert view.text == plain_text(tiny["target"], "hello there", 40)  # lossless, in the app too
        assert panel.frames >= 1 and panel.last_snapshot is not None
        snapshot = panel.last_snapshot
        assert snapshot.acceptance_answer == 1.0 and snapshot.generated == 40  # an identical draft: every token accepted
        assert snapshot.acceptance_by_position and all(rate == 1.0 for rate in snapshot.acceptance_by_position)
        assert snapshot.speedup is not None and snapshot.plain_tokens_per_second
        assert "100.0% answer" in str(panel.render())
        assert {source for source, _ in view.runs} <= {"accepted", "bonus", "correction", "target"} and view.runs
    stored = History(setup.history).messages(History(setup.history).conversations()[0].id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].status == "max_tokens" and stored[1].stats["draft_n_accepted"] == stored[1].stats["draft_n"] > 0
    assert stored[1].pair_id == "tiny" and stored[1].settings["max_tokens"] == 40


@run_async
async def test_the_app_drafts_with_the_targets_mtp_head_and_shows_its_acceptance(setup: Setup, tmp_path: Path):
    """A pair whose target keeps an MTP layer (made to agree with it), run with the mtp drafter: the answer is the
    target's own, every head token accepted, and the statistics panel shows it by position."""
    source = arch_models.write(tmp_path, "qwen35")
    target = mtp_models.with_mtp_blocks(source, tmp_path / "qwen35-mtp.gguf", heads=(mtp_models.Head.AGREES,), chat_template=CHAT_TEMPLATE)
    setup.write(local_pair("mtp", target, source), last_pair="mtp", max_tokens=30, drafter="mtp", draft_p_min=0.0)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        view = await ask(pilot, app, "hello there")
        assert view.text == plain_text(target, "hello there", 30)
        snapshot = app.query_one(StatsPanel).last_snapshot
        assert snapshot is not None and snapshot.acceptance_answer == 1.0
        assert snapshot.acceptance_by_position and all(rate == 1.0 for rate in snapshot.acceptance_by_position)


def slow_after(monkeypatch: pytest.MonkeyPatch, n_tokens: int) -> None:
    monkeypatch.setattr(Decoder, "generate", slowed_generate(n_tokens))


@run_async
async def test_escape_stops_mid_answer_and_keeps_the_text(setup: Setup, tiny, monkeypatch):
    setup.write(local_pair("tiny", tiny["talkative"], tiny["talkative_draft"]), last_pair="tiny", max_tokens=3000, drafter="model")
    slow_after(monkeypatch, 40)
    app = setup.app()
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press(*"tell me everything", "enter")
        await wait_for(pilot, lambda: bool(answers(app)) and len(answers(app)[-1].text) > 20)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.streaming is None)
        view = answers(app)[-1]
        assert view.status == "stopped" and "stopped" in str(view.query_one(".message-header").render())
        kept = view.text
        # Issue 56: "context" fell from 59 to 41 after Esc (the freed cells) while the stopped text stayed in the chat
        snapshot = app.query_one(StatsPanel).last_snapshot
        assert snapshot is not None and snapshot.context_used == snapshot.prompt_tokens + snapshot.generated > snapshot.prompt_tokens
    stored = History(setup.history).messages(History(setup.history).conversations()[0].id)[-1]
    assert stored.status == "stopped" and stored.content == kept and 0 < stored.stats["predicted_n"] < 3000


def long_conversation(setup: Setup, pair_id: str) -> None:
    """A first exchange taller than any of the test screens, so the next answer starts below the fold."""
    history = History(setup.history)
    conversation = history.create("long")
    history.add_user_message(conversation.id, "first")
    answer = history.start_answer(conversation.id, pair_id, Settings().generation_dict())
    history.finish_answer(answer, "\n\n".join(f"Paragraph {i} of an earlier answer." for i in range(40)), "complete", {}, [])
    history.close()


@pytest.mark.parametrize("size", [(80, 24), (50, 15)])
@run_async
async def test_the_chat_follows_an_answer_below_the_fold_until_the_user_scrolls_up(setup: Setup, tiny, monkeypatch, size):
    """Issue 56: in a second turn at 80x24, 35 tokens arrived while the answer's block stayed out of sight until it ended."""
    setup.write(local_pair("tiny", tiny["talkative"], tiny["talkative_draft"]), last_pair="tiny", max_tokens=3000, drafter="model")
    long_conversation(setup, "tiny")
    slow_after(monkeypatch, 30)
    app = setup.app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        container = app.query_one("#messages")
        await pilot.press(*"go on", "enter")
        await wait_for(pilot, lambda: app.streaming is not None and len(app.streaming.text) > 40)
        view = app.streaming

        async def grows() -> None:  # by ten characters, or to its end (the model may end its answer: EOS)
            grown = len(view.text)
            await wait_for(pilot, lambda: app.streaming is None or len(view.text) > grown + 10)
            await pilot.pause(0.2)

        await grows()  # as the answer grows, its newest line stays in sight
        assert container.max_scroll_y > 0 and container.scroll_y >= container.max_scroll_y - 1, (container.scroll_y, container.max_scroll_y)
        assert view.region.bottom <= container.region.bottom + 1 and view.region.bottom > container.region.y
        container.scroll_home(animate=False)  # the user scrolls up to read: the chat leaves the view where it is
        await pilot.pause(0.2)
        await grows()
        assert container.scroll_y < 2
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.streaming is None)


@run_async
async def test_an_answer_says_what_it_waits_on_before_its_first_token(setup: Setup, tiny, monkeypatch):
    """Issue 56: the first answer's block stayed empty for 40 s (the prompt read, auto's first cost measurement)."""
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    generate = Decoder.generate

    def slow_start(self, prompt, config, cancel=None):  # type: ignore[no-untyped-def]
        time.sleep(1.0)  # a long prompt read on a busy machine
        yield from generate(self, prompt, config, cancel)

    monkeypatch.setattr(Decoder, "generate", slow_start)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press(*"hello", "enter")
        await wait_for(pilot, lambda: app.streaming is not None and "reading the prompt" in app.streaming._header())
        header = str(app.streaming.query_one(".message-header").render())
        assert re.search(r"reading the prompt \(\d+ tokens\)…", header), header
        await wait_for(pilot, lambda: app.streaming is None)
        assert "reading" not in answers(app)[-1]._header()  # said while it waits, gone once the text comes


@run_async
async def test_the_conversation_list_follows_the_terminal_width(setup: Setup, tiny):
    """Issue 56: hidden when the app started under 100 columns, the list stayed hidden after the terminal grew."""
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        sidebar = app.query_one("#sidebar")
        assert not sidebar.display
        await pilot.resize_terminal(120, 40)
        await wait_for(pilot, lambda: sidebar.display, timeout=5)
        await pilot.resize_terminal(90, 30)
        await wait_for(pilot, lambda: not sidebar.display, timeout=5)
        await pilot.press("ctrl+b")  # the user's choice holds until the width crosses the line again
        await pilot.resize_terminal(95, 30)
        await pilot.pause(0.2)
        assert sidebar.display


@run_async
async def test_conversations_switch_and_survive_a_restart(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        first = await ask(pilot, app, "first question")
        first_id = app.conversation_id
        await pilot.press("ctrl+n")
        await ask(pilot, app, "second question")
        assert len(app.query_one(ConversationList).children) == 2
        app.query_one(ConversationList).focus()
        await pilot.press("down", "enter")  # the older conversation
        await wait_for(pilot, lambda: app.conversation_id == first_id)
        shown = [v.text for v in app.query(MessageView)]
        assert shown == ["first question", first.text]
        await pilot.press(*"more")  # typing goes on in the chat picked (issue 47: it went to the list, and was lost)
        assert isinstance(app.focused, PromptInput) and app.focused.text == "more"
    app = setup.app()  # a new process would see the same
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        titles = [item.conversation.title for item in app.query_one(ConversationList).children]  # type: ignore[attr-defined]
        assert titles == ["second question", "first question"]
        assert [v.text for v in app.query(MessageView)][0] == "second question"


@run_async
async def test_download_through_the_loopback_hub_with_progress(setup: Setup, tiny, hub: LoopbackHub):
    for name in ("target", "near"):
        served = hub.add_file(f"tiny/{name}-GGUF", f"{name}.gguf", path=tiny[name])
    hub.fail(served.sha256, Fault("slow", bytes_per_second=200_000))  # the draft trickles, so progress shows
    setup.hub_config = HubConfig(hub.endpoint, setup.root / "hf", offline=False, token=False)
    setup.write('default = "hubpair"\n[[pair]]\nid = "hubpair"\ntitle = "Hub pair"\n'
                '[pair.target]\nrepo = "tiny/target-GGUF"\nfile = "target.gguf"\n'
                '[pair.draft]\nrepo = "tiny/near-GGUF"\nfile = "near.gguf"\n')
    app = setup.app()
    seen: list[str] = []
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "not downloaded yet" in str(app.screen.query_one("Label").render())
        await pilot.click("#yes")
        await wait_for(pilot, lambda: isinstance(app.screen, DownloadDialog))
        dialog = app.screen

        def progress_shown() -> bool:
            if isinstance(app.screen, DownloadDialog):
                seen.append(str(dialog.query_one(DownloadView).query_one("Label").render()))
            return app.loaded is not None

        await wait_for(pilot, progress_shown)
        assert any("[2/2] near.gguf" in line and "/s" in line and "ETA" in line for line in seen), seen
        view = await ask(pilot, app, "hi")
        assert view.text
    assert History(setup.history).conversations()


@run_async
async def test_small_terminal_help_models_settings(setup: Setup, tiny):
    not_gguf = setup.root / "not-a-model.gguf"
    not_gguf.write_text("hello")
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]) + local_pair("other-tokenizer", tiny["target"], tiny["other_vocab"])
                + local_pair("broken", tiny["target"], not_gguf), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert not app.query_one("#sidebar").display  # 80 columns: the chat gets the room
        view = await ask(pilot, app, "short")
        assert view.text

        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        await pilot.pause()
        fields = list(app.screen.query(".field"))
        assert fields
        for field in fields:  # each label beside its input, and the input wide enough to read and type in
            label, control = field.children[0], field.children[1]
            assert label.outer_size.width == 20 and control.size.width >= 20, (label, label.outer_size, control, control.size)
            assert control.region.x >= label.region.right and control.region.y == label.region.y
        app.screen.query_one("#draft_max").value = "2"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
        assert json.loads(setup.settings.read_text())["draft_max"] == 2

        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.press("c")
        await wait_for(pilot, lambda: "compatible" in str(app.screen.query_one("#report").render()), timeout=10)
        await pilot.press("down")  # a draft of another tokenizer: it loads, and the app says it drafts through text
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.loading_pair is None and app.loaded is not None and app.loaded.pair.id == "other-tokenizer")
        assert any("drafts through text" in n.message for n in app._notifications)
        view = await ask(pilot, app, "short")
        assert view.text
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.press("down", "down")  # the broken pair
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.loading_pair is None and app.loaded is None)
        assert any("is not a GGUF file" in n.message for n in app._notifications)  # the app says why
        await pilot.press("f2")  # and it is still usable
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.press("escape")

        await pilot.press("f1")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.press("escape")


@run_async
async def test_tint_toggles_between_provenance_and_markdown(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=16, tint_accepted=False)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        view = await ask(pilot, app, "tint")
        assert view.query_one("Markdown").display and not view.query_one(".message-tint").display
        await pilot.press("ctrl+t")
        assert view.query_one(".message-tint").display and not view.query_one("Markdown").display
        assert json.loads(setup.settings.read_text())["tint_accepted"] is True


@run_async
async def test_regenerate_system_prompt_and_added_pairs(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=12)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        first = await ask(pilot, app, "again")
        first_text = first.text
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.streaming is None and len(answers(app)) == 1 and answers(app)[0] is not first)
        assert answers(app)[0].text == first_text  # greedy: the same answer, regenerated
        assert [m.role for m in app.history.messages(app.conversation_id)] == ["user", "assistant"]  # type: ignore[union-attr]

        await pilot.press("f4")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TextDialog")
        app.screen.query_one("#value").insert("Answer in French.")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: type(app.screen).__name__ != "TextDialog")
        assert app.history.conversation(app.conversation_id).system_prompt == "Answer in French."  # type: ignore[union-attr]

        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.press("a")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "AddPairDialog")
        for field, value in (("id", "mine"), ("title", "Mine"), ("target", str(tiny["target"])), ("draft", "org/repo")):
            app.screen.query_one(f"#pair-{field}").value = value
        await pilot.click("#save")
        assert "neither a local .gguf path nor OWNER/REPO/FILE.gguf" in str(app.screen.query_one("#add-error").render())
        app.screen.query_one("#pair-draft").value = str(tiny["same"])
        await pilot.pause(0.3)  # a button ignores a second press while it still shows the first
        await pilot.click("#save")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        assert "mine" in app.catalog.pairs and app.catalog.get("mine").draft.path == tiny["same"]
        from textual.widgets import DataTable

        table = app.screen.query_one(DataTable)
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "mine"  # the cursor on the new pair
    assert 'id = "mine"' in setup.catalog.read_text() and 'id = "tiny"' in setup.catalog.read_text()  # appended, nothing lost


@run_async
async def test_the_real_pair_end_to_end(setup: Setup, real_models):
    target, draft = real_models
    setup.write(local_pair("qwen", target, draft), last_pair="qwen", max_tokens=48, drafter="model")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None, timeout=180)
        prompt = "Write a Python function that reverses a string."
        view = await ask(pilot, app, prompt)
        snapshot = app.query_one(StatsPanel).last_snapshot
        assert snapshot is not None and snapshot.generated == 48 and snapshot.acceptance_answer is not None
        assert snapshot.acceptance_answer > 0.5 and snapshot.speedup is not None
        assert "def " in view.text
    # the same answer as the command line gives for the same prompt and settings
    cli = subprocess.run([sys.executable, "-m", "localspec", "generate", "--target", str(target), "--draft", str(draft),
                          "--prompt", prompt, "--max-tokens", "48", "--drafter", "model", "--json"], capture_output=True, text=True, timeout=300)
    assert json.loads(cli.stdout)["text"] == view.text


@run_async
async def test_the_device_line_shows_the_layers_on_the_gpu_and_the_memory_plan(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny")
    app = setup.app()
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        line = app.query_one("#device").render()
        assert app.loaded.plan.target.gpu_layers == sum(layer.on_gpu for layer in app.loaded.layers if layer.role == "target")
        assert "draft 0/3, target 0/3 layers on GPU" in line  # two blocks and the output layer each, as llama.cpp counts
        assert f"planned {app.loaded.plan.amounts}" in line and "planned RAM " in line and "in use RAM " in line


@run_async
async def test_a_pair_too_big_for_this_machine_is_refused_before_loading(setup: Setup, tiny):
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", n_ctx=2**30)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: any("does not fit" in n.message for n in app._notifications))
        assert app.loaded is None
        assert "tiny is not loaded" in app.query_one("#device").render()


@run_async
async def test_the_device_line_refreshes_behind_a_screen_and_while_the_app_closes(setup: Setup, tiny):
    """The line's 2 s refresh once queried the screen on top: with the settings screen open, or as the app closed,
    it found no device line and the app died."""
    setup.write(local_pair("tiny", tiny["target"], tiny["same"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press("f3")
        await wait_for(pilot, lambda: len(app.screen_stack) > 1)
        app.refresh_device_line()  # what the interval does, with the settings screen on top
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        assert "layers on GPU" in app.query_one("#device").render()
    app.refresh_device_line()  # and after the app has closed


def test_a_cancelled_load_is_told_apart_by_its_error_type_not_its_wording(tmp_path, tiny):
    """The app once searched the message for the word "cancelled" to decide between information and an error."""
    from localspec.catalog.models_toml import parse_catalog
    from localspec.tui import messages as m
    from localspec.tui import workers

    pair = parse_catalog(local_pair("tiny", tiny["target"], tiny["near"]), "test", require_default=False).get("tiny")
    posted: list[object] = []
    stopped = threading.Event()
    stopped.set()  # Esc pressed before the draft loads
    workers.load(posted.append, pair, tiny["target"], tiny["near"], Settings(), stopped)
    failed = [p for p in posted if isinstance(p, m.PairLoadFailed)]
    assert len(failed) == 1 and failed[0].cancelled

    posted.clear()
    workers.load(posted.append, pair, tiny["target"], tmp_path / "cancelled.gguf", Settings(), threading.Event())
    failed = [p for p in posted if isinstance(p, m.PairLoadFailed)]
    assert len(failed) == 1 and not failed[0].cancelled and "cancelled.gguf" in failed[0].error  # a word in a path is not a cancel


@run_async
async def test_storage_that_stops_taking_writes_mid_chat_loses_nothing(setup: Setup, tiny):
    """A full disk or a read-only folder once killed the app at the next prompt (and the prompt was gone), and a config
    folder that refused the settings killed it as the pair loaded."""
    setup.write(local_pair("tiny", tiny["target"], tiny["same"]), last_pair="tiny", max_tokens=12)
    setup.settings.with_suffix(".json.tmp").mkdir()  # the settings can be read but no longer saved (even by root)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert any("settings could not be saved" in n.message for n in app._notifications)
        first = await ask(pilot, app, "hello there")
        app.history._db.execute("PRAGMA query_only = ON")  # from now on the file refuses every write
        second = await ask(pilot, app, "the quick brown fox")
        await wait_for(pilot, lambda: any("Nothing is lost" in n.message for n in app._notifications))
        assert not app.history.saving and second.status in ("complete", "max_tokens") and second.text
        assert [v.text for v in answers(app)] == [first.text, second.text]  # both answers on screen
        assert app.query_one("#prompt").text == ""  # the prompt went into the conversation
        connect = app.history._connect_disk
        app.history._connect_disk = lambda: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
        await pilot.press("ctrl+q")  # the disk still refuses: quitting would lose the session, so it asks (issue 47)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "only in memory" in read_whole(app.screen.query_one("Label")) and app.is_running
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        app.history._connect_disk = connect  # the disk takes writes again: Ctrl+Q saves, and quits without asking
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running)
    stored = History(setup.history)  # the session was written back as the app quit
    assert [m.content for m in stored.messages(stored.conversations()[0].id)][-2:] == ["the quick brown fox", second.text]
