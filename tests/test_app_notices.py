"""What the app says when a choice is made, not at the first message (issue 75): the pair check's notes, a drafter the
pair cannot run, a target without a chat template, and what the first answer waits on."""

from __future__ import annotations

import json
from pathlib import Path

from gguf import GGUFReader, GGUFValueType, GGUFWriter

from localspec.tui.models_screen import ModelsScreen
from tests.app_pilot import Setup, answers, ask, local_pair, read_whole, run_async, wait_for
from tests.conftest import cli
from tests.gguf_files import finish


def renamed_architecture(source: Path, path: Path, architecture: str) -> Path:
    """`source`'s header (no weights) as another architecture's: enough for `check`, which reads headers only."""
    reader = GGUFReader(source)
    old = str(reader.fields["general.architecture"].contents())
    writer = GGUFWriter(path, architecture)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY and not field.contents():
            continue
        writer.add_key_value(name.replace(f"{old}.", f"{architecture}.", 1), field.contents(), kind,
                             sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    return finish(writer, path)


@run_async
async def test_the_models_screens_check_gives_the_notes_check_prints(setup: Setup, tiny, tmp_path: Path):
    """Issue 75: the app's check of a hybrid target left out the "drafts capped at 8" note that `check` prints."""
    hybrid = renamed_architecture(tiny["target"], tmp_path / "hybrid.gguf", "qwen35")
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]) + local_pair("hybrid", hybrid, tiny["near"]), last_pair="tiny")
    printed = cli("check", "--target", str(hybrid), "--draft", str(tiny["near"]))
    assert printed.returncode == 0, printed.stderr
    notes = [line for line in printed.stdout.splitlines() if line.startswith("note: ")]
    assert any("rolls back at most 8 tokens, so each draft is capped there" in note for note in notes), printed.stdout
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.press("down", "c")
        report = app.screen.query_one("#report")
        await wait_for(pilot, lambda: "compatible" in str(report.render()), timeout=10)
        shown = " ".join(read_whole(report).split())
        for note in notes:  # the same words, from the same source
            assert " ".join(note.split()) in shown, (note, shown)
        verdict = next(line for line in printed.stdout.splitlines() if line.startswith("compatible"))
        assert " ".join(verdict.split()) in shown


@run_async
async def test_the_settings_say_which_drafters_a_pair_of_two_tokenizers_runs_as_the_drafter_is_picked(setup: Setup, tiny):
    """Issue 75: drafter `model` was saved for a pair whose draft has another tokenizer without a word, and the first
    send failed ("needs a draft with the target's tokenizer, and this pair has none", though it has a draft)."""
    from textual.widgets import Select

    from localspec.tui.settings_screen import SettingsScreen

    setup.write(local_pair("two-tokenizers", tiny["target"], tiny["other_vocab"]), last_pair="two-tokenizers", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        problem = app.screen.query_one("#drafter-problem")
        assert read_whole(problem) == ""  # auto runs on it
        app.screen.query_one("#drafter", Select).value = "model"
        await wait_for(pilot, lambda: bool(read_whole(problem)))
        said = " ".join(read_whole(problem).split())
        assert "needs a draft with the target's tokenizer, which this pair lacks" in said and "pick bridged, auto" in said, said
        await pilot.press("ctrl+s")  # refused, and said where the form says what is wrong
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)
        assert "pick bridged" in " ".join(read_whole(app.screen.query_one("#settings-error")).split())
        assert json.loads(setup.settings.read_text())["drafter"] == "auto"
        app.screen.query_one("#drafter", Select).value = "bridged"
        await wait_for(pilot, lambda: not read_whole(problem))
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
        assert json.loads(setup.settings.read_text())["drafter"] == "bridged"
        view = await ask(pilot, app, "hello")
        assert view.text and view.status != "error"


@run_async
async def test_a_target_without_a_chat_template_is_said_at_load_and_the_prompt_is_kept(setup: Setup, tiny):
    """Issue 75: a model without a chat template loaded fine and failed only on the first message. The app has no raw
    mode, so the load says what to do instead."""
    setup.write(local_pair("no-template", tiny["no_template"], tiny["same"]), last_pair="no-template", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        said = [n.message for n in app._notifications if "no chat template" in n.message]
        assert said and "pick a pair with a chat model (F2)" in said[0] and "generate --raw" in said[0], said
        app.query_one("#prompt").focus()
        await pilot.press(*"hello", "enter")
        await pilot.pause(0.2)
        assert not answers(app) and app.query_one("#prompt").text == "hello"  # nothing sent, nothing lost
        assert len([n for n in app._notifications if "no chat template" in n.message]) == 2


@run_async
async def test_the_first_answer_says_how_far_auto_has_timed_this_machines_passes(setup: Setup, tiny, monkeypatch, tmp_path):
    """Issue 75: the first answer showed "preparing the auto drafter…" for about 60 s on a busy machine, while auto timed
    the models' passes, with no word of what it did or how far it was."""
    import re

    from localspec.tui.message_view import MessageView

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no costs measured here before: auto times them now
    said: list[str] = []
    set_waiting = MessageView.set_waiting

    def heard(view: MessageView, stage: str) -> None:  # every stage the header showed, however fast they passed
        said.append(stage)
        set_waiting(view, stage)

    monkeypatch.setattr(MessageView, "set_waiting", heard)
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        view = await ask(pilot, app, "hello")
        assert view.text
    timing = [re.fullmatch(r"preparing the auto drafter: timing the models' passes on this machine, (\d+) of (\d+) \(once per pair\)", s)
              for s in said]
    counts = [(int(m[1]), int(m[2])) for m in timing if m]
    assert counts, said
    total = counts[0][1]
    assert [done for done, _ in counts] == list(range(1, total + 1)) and all(t == total for _, t in counts)
    assert said.index("preparing the auto drafter") < said.index(next(s for s in said if "timing" in s))
    assert any(s.startswith("reading the prompt") for s in said[said.index(next(s for s in said if f"{total} of" in s)):])
