"""The app's layout on small terminals, driven by Pilot at the sizes a newcomer met (issues 47, 56, 75): the panes fit,
nothing crashes, text breaks between words, and every dialog, notice, header and button reads whole."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable
from textual.widgets._toast import Toast

from localspec.session.history import History
from localspec.session.settings import Settings
from localspec.tui.app import CHAT_MIN_WIDTH
from localspec.tui.dialogs import ConfirmDialog, HelpScreen
from localspec.tui.models_screen import ModelsScreen
from localspec.tui.prompt_input import PromptInput
from localspec.tui.settings_screen import SettingsScreen
from localspec.tui.stats_panel import StatsPanel
from tests.app_pilot import Setup, answers, ask, local_pair, read_whole, run_async, wait_for


async def typed_and_shown(pilot, app, text: str) -> None:  # type: ignore[no-untyped-def]
    """The prompt box takes keys and draws them: the app lives, and its chat column has room."""
    prompt = app.query_one(PromptInput)
    prompt.focus()
    await pilot.press(*text)
    await pilot.pause()
    assert prompt.text == text and prompt.content_size.width >= 1
    assert any(text in strip.text for strip in prompt.render_lines(prompt.region.reset_offset))
    prompt.clear()


@pytest.mark.parametrize("steps", [
    ((50, 15), "ctrl+b", None),  # the list shown on a small terminal
    ((80, 24), "ctrl+b", (58, 24)),  # shown at 80 columns, then the terminal narrows
    ((80, 24), None, (30, 15)),  # the list hidden, the terminal at 30 columns
])
@run_async
async def test_a_narrow_terminal_keeps_the_prompt_box_and_never_crashes(setup: Setup, tiny, steps):
    """Issue 75: each of these gave the prompt's placeholder a width of 0, and the app died (`range() arg 3 must not be
    zero`, a 1,000-line traceback)."""
    size, key, resized = steps
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        if key:
            await pilot.press(key)
        if resized:
            await pilot.resize_terminal(*resized)
        await pilot.pause(0.2)
        await typed_and_shown(pilot, app, "hi")
        width = app.size.width
        main = app.query_one("#main")
        assert main.region.width >= width // 2  # the chat keeps at least half the terminal, the list at most the rest
        assert app.query_one(StatsPanel).folded  # no room beside the chat for the panel
        view = await ask(pilot, app, "hello")
        assert view.text
    assert app.return_code in (None, 0)


@run_async
async def test_at_50x15_the_statistics_fold_under_the_chat_and_the_lists_show_their_rows(setup: Setup, tiny):
    """Issue 75: at 50x15 the statistics kept 29 columns while the chat got 20; the models list showed one row, and the
    help only its introduction."""
    # the model drafter with no confidence cut drafts at every step, so the folded line has an acceptance to show
    setup.write("".join(local_pair(f"tiny-{i}", tiny["target"], tiny["near"]) for i in range(4)), last_pair="tiny-0", max_tokens=8,
                drafter="model", draft_p_min=0.0)
    app = setup.app()
    async with app.run_test(size=(50, 15)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        panel, main = app.query_one(StatsPanel), app.query_one("#main")
        assert panel.folded and main.region.width == 50 and panel.region.width == 50  # the chat has the whole width
        assert panel.region.y >= main.region.bottom and panel.region.height == 1  # one line under the chat
        view = await ask(pilot, app, "hello there")
        line = read_whole(panel)
        assert "accepted" in line and "tok/s" in line, line  # the chief numbers, each whole
        assert not line.endswith("·")
        assert view.region.width > CHAT_MIN_WIDTH - 10

        await pilot.resize_terminal(120, 40)  # room again: the panel is back beside the chat
        await wait_for(pilot, lambda: not panel.folded and panel.region.width == 30, timeout=5)
        assert "by position" in read_whole(panel) or "accepted" in read_whole(panel)
        await pilot.resize_terminal(50, 15)
        await wait_for(pilot, lambda: panel.folded, timeout=5)

        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert table.size.height >= 4, table.size  # the header and at least three pairs
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)

        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        geometry = app.screen.find_widget(app.screen.query_one("MarkdownTable"))  # the keys' table, before any scrolling
        assert geometry.region.intersection(geometry.clip).height >= 4, (geometry.region, geometry.clip)


def mid_word_breaks(message: str, lines: list[str]) -> list[str]:
    """Where the toast's lines break inside a word of `message`, other than after a path's slash or a name's dash."""
    flat = "".join(message.split())
    word_ends, position = set(), 0
    for word in message.split():
        position += len(word)
        word_ends.add(position)
    breaks, position = [], 0
    for line in lines[:-1]:
        position += len("".join(line.split()))
        if position not in word_ends and flat[position - 1] not in "/-_.":
            breaks.append(f"{flat[position - 8:position]}|{flat[position:position + 8]}")
    return breaks


@pytest.mark.parametrize("size", [(50, 15), (80, 24)])
@run_async
async def test_a_toast_breaks_between_words_and_a_path_after_its_slashes(setup: Setup, tiny, size):
    """Issue 75: toasts broke mid-word ("setting s.json", "GGU F/")."""
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    setup.settings.with_suffix(".json.tmp").mkdir()  # the settings cannot be saved: the notice names their path
    app = setup.app()
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait_for(pilot, lambda: any("could not be saved" in n.message for n in app._notifications))
        notice = next(n for n in app._notifications if "could not be saved" in n.message)
        await wait_for(pilot, lambda: any(t._notification is notice and t.region.width for t in app.screen.query(Toast)))
        toast = next(t for t in app.screen.query(Toast) if t._notification is notice)
        read_whole(toast)  # inside the screen
        lines = [text for strip in toast.render_lines(toast.region.reset_offset) if (text := strip.text.strip(" ▌▐"))]
        assert "".join("".join(lines).split()) == "".join(notice.message.split())  # the whole notice, nothing cut off
        assert len(lines) > 1 and not mid_word_breaks(notice.message, lines), (lines, mid_word_breaks(notice.message, lines))
        assert any(line.rstrip().endswith("/") for line in lines)  # the path broke after a slash
        assert toast.region.width >= min(size[0], 60) - 2  # the terminal's width where it has fewer than 60 columns


@run_async
async def test_the_models_list_reads_whole_at_80x24_and_a_local_pair_says_what_it_needs(setup: Setup, tiny):
    """Issue 75: tags in the models list were cut at the edge ("reasonin"), and a pair of local files read "needs ?"."""
    from localspec.engine import defaults
    from localspec.machine.memory_plan import read_footprint
    from localspec.units import format_bytes

    tagged = local_pair("tagged", tiny["target"], tiny["near"]).replace(
        'title = "Pair tagged"\n', 'title = "Pair tagged"\ntags = ["code", "chat", "reasoning", "multilingual"]\n')
    setup.write(local_pair("tiny", tiny["target"], tiny["near"]) + tagged, last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert table.virtual_size.width <= table.size.width, (table.virtual_size, table.size)  # no column past the edge
        footprint = sum(read_footprint(path, defaults.N_CTX).total_bytes for path in (tiny["target"], tiny["near"]))
        assert table.get_row("tiny")[4] == format_bytes(footprint)  # the planner's reading of its headers
        await pilot.press("down")
        await pilot.pause()
        assert "tags: code, chat, reasoning, multilingual" in " ".join(read_whole(app.screen.query_one("#detail")).split())


def test_the_folded_statistics_keep_each_number_whole_or_leave_it_out():
    from dataclasses import replace

    from localspec.tui.stats_panel import render_summary, summary_parts
    from tests.test_stats_panel import DRAFTED

    parts = summary_parts(DRAFTED)
    assert parts[:2] == ["70.0% accepted", "1.40× plain"]
    for width in range(10, 90):
        line = render_summary(DRAFTED, width).plain
        assert len(line) <= width and (not line or all(part in parts for part in line.split(" · "))), (width, line)
    assert render_summary(replace(DRAFTED, drafter="auto", acceptance_answer=None), 80).plain.startswith("nothing drafted yet")
    assert render_summary(replace(DRAFTED, drafter="none", draft_max=0), 80).plain.startswith("plain ·")


@run_async
async def test_every_dialog_and_notice_reads_whole_at_80_by_24(setup: Setup, tiny):
    """At 80x24 the first-run question read "...is not downlo", and the add-pair form's intro and errors were cut."""
    from textual.widgets import DataTable, Label, Select

    from localspec.tui.models_screen import AddPairDialog
    from tests.test_models_cli import tiny_pair

    hub_pair = tiny_pair("tiny-hub", "target", "near").replace('title = "Tiny tiny-hub"', 'title = "Qwen2.5-Coder 1.5B Instruct with its 0.5B draft"')
    setup.write(hub_pair + local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny-hub")
    app = setup.app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:  # toasts drawn, to be read
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        question = read_whole(app.screen.query_one(Label))
        assert question.endswith("is not downloaded yet (size unknown). Download it now?") and question.startswith("Qwen2.5-Coder 1.5B")
        await pilot.press("y")  # the hub is unreachable here: the notice says how to use local files instead
        await wait_for(pilot, lambda: any("F2, then a" in n.message for n in app._notifications))
        assert any(n.message.startswith("Cannot reach the hub") for n in app._notifications)
        from textual.widgets._toast import Toast

        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        await wait_for(pilot, lambda: any("F2, then" in read_whole(toast) for toast in app.screen.query(Toast)))
        shown = " ".join(" ".join(read_whole(toast) for toast in app.screen.query(Toast)).replace("▌", " ").split())  # wrapped, inside
        assert "GGUF files already on this machine can be added as a pair: F2, then a." in shown
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        title = read_whole(app.screen.query_one(".title"))
        assert title.startswith("Models: Enter uses") and title.endswith("a adds your own")
        table = app.screen.query_one(DataTable)
        local_row = table.get_row("tiny")
        size = tiny["target"].stat().st_size + tiny["near"].stat().st_size
        assert local_row[3] != "?" and local_row[3].split()[0] in (f"{size / 1000:.1f}", f"{size / 1e6:.1f}")  # its real size

        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AddPairDialog))
        intro = read_whole(app.screen.query_one(Label))
        assert intro.endswith("or OWNER/REPO/FILE.gguf on the hub.")
        await pilot.press(*"mine", "tab", *"Mine", "tab", *"owner/model.gguf", "tab", *str(tiny["near"]), "enter")  # Enter saves
        error = app.screen.query_one("#add-error")
        await wait_for(pilot, lambda: bool(read_whole(error)))
        assert read_whole(error).endswith("is neither a local .gguf path nor OWNER/REPO/FILE.gguf.")
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)

        await pilot.press("f3")  # opens with the first field focused
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        assert isinstance(app.focused, Select) and app.focused.id == "drafter"
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)


def fully_shown(widget) -> bool:  # type: ignore[no-untyped-def]
    """Every cell of the widget is on screen: not below the screen's edge, and not clipped by a container around it (at
    80x24 the add-pair form's buttons lay inside the screen, but its dialog cut them to their top edges)."""
    geometry = widget.screen.find_widget(widget)
    return geometry.region.intersection(geometry.clip) == geometry.region and geometry.region.bottom <= widget.screen.size.height


@pytest.mark.parametrize("size", [(80, 24), (50, 15)])
@run_async
async def test_every_dialog_keeps_its_buttons_and_hints_readable_and_the_footer_shows_help_and_settings(setup: Setup, tiny, size):
    """Issue 47: at 80x24 the settings' and help's buttons were below the screen (help could not be scrolled by keys), and
    the footer's F1 and F3 fell off its end. Issue 56: the add-pair form's buttons were cut by the dialog, and every
    settings hint was cut mid-sentence (a placeholder), at 80 and at 120 columns."""
    from textual.widgets import Button, Footer, Label

    from localspec.tui.dialogs import HelpScreen
    from localspec.tui.models_screen import AddPairDialog
    from localspec.tui.settings_screen import FORM

    setup.write(local_pair("tiny", tiny["target"], tiny["near"]), last_pair="tiny", max_tokens=8)
    width, height = size
    app = setup.app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert app.query_one(PromptInput).placeholder.startswith("Ask something. Enter sends")  # the box says what it is for
        assert "No answer yet" not in str(app.query_one(StatsPanel).render())  # it read wrong beside a reopened chat
        await wait_for(pilot, lambda: bool(app.query_one(Footer).query("FooterKey")))  # the footer composes its keys after a refresh
        keys = {key.key: key.region for key in app.query_one(Footer).query("FooterKey")}
        if width == 80:
            assert {"f1", "f2", "f3", "escape", "ctrl+q"} <= keys.keys()
            shown = sorted(keys.values(), key=lambda region: region.x)
            assert all(region.right <= 80 for region in shown) and all(a.right <= b.x for a, b in zip(shown, shown[1:])), keys
        await pilot.press("f2")  # the models screen's Esc goes back, and its footer says so (it said "esc Stop")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        await pilot.pause()
        assert [key.description for key in app.screen.query("FooterKey") if key.key == "escape"] == ["Back"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        for opening, screen in ((("f3",), SettingsScreen), (("f2", "a"), AddPairDialog), (("f1",), HelpScreen)):
            await pilot.press(*opening)
            await wait_for(pilot, lambda screen=screen: isinstance(app.screen, screen))
            await pilot.pause()
            buttons = list(app.screen.query(Button))
            assert buttons and all(fully_shown(b) and b.region.right <= width for b in buttons), \
                (screen.__name__, [(str(b.label), b.region) for b in buttons])
            if screen is SettingsScreen:  # each hint whole, once scrolled to
                hints = list(app.screen.query(".hint").results(Label))
                # whole, however it wraps (at 50 columns a word may fold mid-way)
                assert ["".join(read_whole(hint).split()) for hint in hints] == ["".join(text.split()) for _, _, text in FORM if text]
                for hint in hints:
                    hint.scroll_visible(animate=False, immediate=True)
                    await pilot.pause()
                    assert fully_shown(hint), read_whole(hint)
            if screen is HelpScreen:  # focused on its text: the keys scroll it
                text = app.screen.query_one("#help-text")
                assert app.focused is text and text.max_scroll_y > 0
                await pilot.press("pagedown")
                await wait_for(pilot, lambda text=text: text.scroll_y > 0)
            while len(app.screen_stack) > 1:
                await pilot.press("escape")
                await pilot.pause()


@run_async
async def test_at_80x24_code_headers_and_the_device_line_wrap_instead_of_being_cut(setup: Setup, tiny):
    """Issue 47: at 80x24 a code block's long lines ran out of sight (scrolled sideways with no scrollbar), and an
    answer's header and the device line were cut at the edge."""
    from textual.widgets import Label
    from textual.widgets._markdown import MarkdownFence

    pair_id = "tiny-pair-with-a-rather-long-name"
    setup.write(local_pair(pair_id, tiny["target"], tiny["near"]), last_pair=pair_id, max_tokens=8)
    history = History(setup.history)
    conversation = history.create("code")
    history.add_user_message(conversation.id, "show code")
    answer = history.start_answer(conversation.id, pair_id, Settings().generation_dict())
    code = "Here:\n\n```python\ndef a_function_with_a_long_name(argument_one, argument_two, argument_three, argument_four):\n" \
           "    return argument_one + argument_two + argument_three + argument_four\n```\n"
    history.finish_answer(answer, code, "complete", {"predicted_n": 40, "predicted_ms": 1000.0, "predicted_per_second": 40.0,
                                                     "draft_n": 20, "draft_n_accepted": 15}, [])
    history.close()
    app = setup.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        await pilot.pause(0.3)
        fences = list(app.query(MarkdownFence))
        assert fences and all(fence.max_scroll_x == 0 for fence in fences)  # nothing out of sight sideways
        header = next(v for v in answers(app)).query_one(".message-header", Label)
        assert "75% accepted" in str(header.render()) and header.size.height >= 2  # wrapped, not cut
        device = app.query_one("#device")
        await wait_for(pilot, lambda: len(str(device.render())) > 80)
        await wait_for(pilot, lambda: device.size.height >= 2, timeout=5)
