"""The app's layout on small terminals, driven by Pilot at the sizes a newcomer met (issue 75): the panes fit, nothing
crashes, and text breaks between words."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable
from textual.widgets._toast import Toast

from localspec.hub.config import HubConfig
from localspec.tui.app import CHAT_MIN_WIDTH
from localspec.tui.dialogs import HelpScreen
from localspec.tui.models_screen import ModelsScreen
from localspec.tui.prompt_input import PromptInput
from localspec.tui.stats_panel import StatsPanel
from tests.test_app import Setup, ask, local_pair, read_whole, run_async, wait_for


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path, HubConfig("http://127.0.0.1:9", tmp_path / "hf", offline=False, token=False))


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
