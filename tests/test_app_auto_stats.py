"""The statistics panel of the real app under auto: what auto chose, by source, and what the per-position rows mean."""

from __future__ import annotations

from localspec.engine.drafters.auto.choice import Source
from localspec.session.history import History
from localspec.tui.stats_panel import StatsPanel
from tests.app_pilot import Setup, ask, local_pair, run_async


@run_async
async def test_the_panel_shows_autos_steps_and_tokens_by_source(setup: Setup, tiny):
    """Issue 75: the panel read "drafter auto · K=32" with no split of lookup, the draft model and plain, and its
    per-position rows were labelled "1" and "21" with nothing to say of what."""
    setup.write(local_pair("tiny", tiny["talkative"], tiny["talkative"]), last_pair="tiny", max_tokens=200, drafter="auto")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await ask(pilot, app, "tell me everything")
        text = str(app.query_one(StatsPanel).render())
    history = History(setup.history)
    stats = history.messages(history.conversations()[0].id)[1].stats
    split = stats["decisions_by_source"]  # the record the answer was saved with: the panel shows the same one
    assert stats["drafter"] == "auto" and stats["draft_n"] > 0 and split
    lines = text.splitlines()
    assert "auto · K≤32" in lines[0]  # a cap: auto picks K each step
    header = lines.index(next(line for line in lines if line.startswith("auto chose")))
    assert lines[header].split() == ["auto", "chose", "steps", "tokens"]
    rows = [line.rsplit(maxsplit=2) for line in lines[header + 1 : header + 1 + len(split)]]
    assert rows == [[Source(source).display_name, str(share["steps"]), str(share["tokens"])] for source, share in split.items()]
    assert sum(share["tokens"] for share in split.values()) == stats["predicted_n"] - 1  # the first: the prompt's pass
    assert any(line.startswith(("accepted by pos ▁0% █100%", "accepted by draft position")) for line in lines)
    assert [line.split()[:2] for line in lines if line.startswith("pos ")][0] == ["pos", "1"]
