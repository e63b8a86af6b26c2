"""Storage that fails (a full disk, a read-only folder, a damaged or hand-edited file) loses nothing the user wrote."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from localspec.session.history import History
from localspec.session.settings import Settings, SettingsError, load_settings, save_settings


def fill_up(history: History) -> None:
    """SQLite's own page limit on this connection: the next write that needs a page fails as a full disk does."""
    pages = history._db.execute("PRAGMA page_count").fetchone()[0]
    history._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_moves_the_history_into_memory_and_saves_it_once_the_disk_takes_writes(tmp_path):
    notices: list[str] = []
    path = tmp_path / "h.sqlite3"
    history = History(path, on_notice=notices.append, retry_s=3600)
    conversation = history.create("before")
    history.add_user_message(conversation.id, "written to disk")
    fill_up(history)
    long_prompt = "a prompt longer than any free space on a page " * 400
    message_id = history.add_user_message(conversation.id, long_prompt)  # fails on disk, kept in memory
    assert not history.saving and len(notices) == 1
    assert "database or disk is full" in notices[0] and "Nothing is lost" in notices[0]
    assert [m.content for m in history.messages(conversation.id)] == ["written to disk", long_prompt]
    answer = history.start_answer(conversation.id, "tiny", {})
    history.finish_answer(answer, "an answer written while the disk was full", "complete", {}, [])
    assert message_id > 0 and not history.saving  # the retry waits for its interval

    history._retry_at = 0.0  # the interval has passed, and the disk has room again (a fresh connection has no page limit)
    history.rename(conversation.id, "after")
    assert history.saving and "saved again" in notices[-1]
    history.close()
    reopened = History(path)
    assert reopened.conversation(conversation.id).title == "after"
    assert [m.content for m in reopened.messages(conversation.id)] == ["written to disk", long_prompt, "an answer written while the disk was full"]


def test_a_history_that_can_be_read_but_not_written_is_shown(tmp_path):
    path = tmp_path / "h.sqlite3"
    history = History(path)
    conversation = history.create("kept")
    history.add_user_message(conversation.id, "my words")
    history.close()
    for suffix in ("-wal", "-shm", "-journal"):  # the folder takes no new files: as a read-only folder, even for root
        (tmp_path / f"h.sqlite3{suffix}").mkdir()
    before = path.read_bytes()
    readonly = History(path)
    assert not readonly.saving and "can be read but not written" in (readonly.open_problem or "")
    assert "move it aside" not in (readonly.open_problem or "")
    assert [m.content for m in readonly.messages(conversation.id)] == ["my words"]
    readonly.add_user_message(conversation.id, "typed while read-only")  # kept in memory
    assert [m.content for m in readonly.messages(conversation.id)][-1] == "typed while read-only"
    readonly.close()
    assert path.read_bytes() == before


def test_a_damaged_history_is_never_overwritten(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"not a database, but the user's file" * 100)
    damaged = History(path)
    assert not damaged.saving and "cannot be opened" in (damaged.open_problem or "") and "move it aside" in (damaged.open_problem or "")
    damaged.create("in memory")
    damaged.close()
    assert path.read_bytes() == b"not a database, but the user's file" * 100


HOLD_AN_ANSWER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from localspec.session.history import History
    history = History(Path(sys.argv[1]))
    conversation = history.create()
    answer = history.start_answer(conversation.id, "tiny", {})
    history.save_partial(answer, "streaming in the first app", [])
    print(answer, flush=True)
    time.sleep(120)
""")


def test_a_second_app_leaves_the_first_apps_streaming_answer_alone(tmp_path):
    path = tmp_path / "h.sqlite3"
    first = subprocess.Popen([sys.executable, "-c", HOLD_AN_ANSWER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        answer = int(first.stdout.readline())
        second = History(path)
        assert [m.status for m in second.messages(1)] == ["streaming"]
        second.close()
    finally:
        first.kill()
        first.wait()
    third = History(path)  # the first app is gone now: its answer was cut
    assert [(m.id, m.status, m.content) for m in third.messages(1)] == [(answer, "interrupted", "streaming in the first app")]


def test_one_bad_setting_costs_only_itself(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"temperature": -5, "last_pair": "my-pair", "drafter": "tree", "n_ctx": "big",
                                "max_tokens": 99, "from_a_newer_version": 1}))
    settings, note = load_settings(path)
    assert (settings.last_pair, settings.drafter, settings.max_tokens) == ("my-pair", "tree", 99)
    assert (settings.temperature, settings.n_ctx) == (Settings().temperature, Settings().n_ctx)
    assert note is not None and "temperature = -5" in note and 'n_ctx = "big"' in note and "Every other setting was kept" in note
    assert "last_pair" not in note and "from_a_newer_version" not in note
    assert json.loads(path.read_text())["temperature"] == -5  # the file is not touched until the next save


def test_a_setting_of_the_wrong_type_costs_only_itself_and_is_said_in_jsons_words(tmp_path):
    """Issue 47: threads 1.5 crashed the app at every start (it was saved back); seed true and last_pair 42 were kept."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"threads": 1.5, "seed": True, "last_pair": 42, "max_tokens": "lots", "tint_accepted": "yes",
                                "temperature": 0.5, "draft_max": None}))
    settings, note = load_settings(path)
    assert (settings.threads, settings.seed, settings.last_pair, settings.max_tokens) == (None, None, None, Settings().max_tokens)
    assert (settings.temperature, settings.draft_max, settings.tint_accepted) == (0.5, None, False)
    assert note is not None
    for said in ("threads = 1.5 (threads must be a whole number or null, not 1.5)", "seed = true", "last_pair = 42 (last pair must be text",
                 'max_tokens = "lots" (max tokens must be a whole number or null, not "lots")', 'tint_accepted = "yes" (tint accepted must be true or false'):
        assert said in note, note
    assert "not supported between" not in note and "interpreted as an integer" not in note
    save_settings(settings, path)
    assert json.loads(path.read_text())["threads"] is None  # never written back
    with pytest.raises(SettingsError, match="threads must be a whole number or null, not 1.5"):
        Settings().with_changes(threads=1.5)


def test_settings_that_are_not_json_are_kept_beside_the_file(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"last_pair": "my-pair",')
    settings, note = load_settings(path)
    assert settings == Settings() and note is not None and "not valid JSON" in note
    assert (tmp_path / "settings.json.bad").read_text() == '{"last_pair": "my-pair",'


def test_a_byte_that_is_not_utf8_costs_no_setting_and_the_file_is_kept_beside(tmp_path):
    """Issue 56: one invalid byte dropped every field, kept no copy, and the next save overwrote the file."""
    path = tmp_path / "settings.json"
    raw = b'{"last_pair": "my-pair", "max_tokens": 99, "system_note": "caf\xe9"}'
    path.write_bytes(raw)
    settings, note = load_settings(path)
    assert (settings.last_pair, settings.max_tokens) == ("my-pair", 99)
    assert note is not None and "not UTF-8" in note and "settings.json.bad" in note
    assert (tmp_path / "settings.json.bad").read_bytes() == raw  # byte for byte, before any save rewrites the file


def test_settings_that_cannot_be_saved_say_so(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(SettingsError, match="could not be saved to .*They apply until localspec closes"):
        save_settings(Settings(), blocked / "settings.json")




def test_a_history_that_cannot_be_created_is_not_called_damaged(tmp_path):
    """Issue 47: a read-only home was told "the file may be damaged" about a file that did not exist."""
    (tmp_path / "a-file").write_text("")
    history = History(tmp_path / "a-file" / "history.sqlite3")  # its folder cannot be made: as a read-only home, even for root
    problem = history.open_problem or ""
    assert not history.saving and "cannot be created" in problem and "XDG_DATA_HOME" in problem and "damaged" not in problem
    history.create("kept in memory")
    assert [c.title for c in history.conversations()] == ["kept in memory"]


def test_os_errors_get_advice_for_their_cause():
    """Issue 47: "Is a directory" was told to check the free space."""
    import errno

    from localspec.errors import os_error_advice

    assert os_error_advice(IsADirectoryError(errno.EISDIR, "Is a directory")) == "that path is a folder: give a file's path"
    assert "free some space" in os_error_advice(OSError(errno.ENOSPC, "No space left on device"))
    assert "read-only" in os_error_advice(OSError(errno.EROFS, "Read-only file system"))


def test_a_killed_app_keeps_the_prompt_and_the_streamed_text(tmp_path):
    history = History(tmp_path / "h.sqlite3")
    conversation = history.create()
    history.add_user_message(conversation.id, "question")
    answer = history.start_answer(conversation.id, "tiny", {"max_tokens": 5})
    history.save_partial(answer, "half an ans", [("accepted", 4), ("correction", 7)])
    del history  # no finish_answer: the process died here
    reopened = History(tmp_path / "h.sqlite3")
    user, assistant = reopened.messages(conversation.id)
    assert user.content == "question"
    assert (assistant.content, assistant.status, assistant.provenance) == ("half an ans", "interrupted", [("accepted", 4), ("correction", 7)])


def test_history_schema_is_versioned(tmp_path):
    import sqlite3

    from localspec.session.history import MIGRATIONS

    path = tmp_path / "h.sqlite3"
    version_1 = sqlite3.connect(path)  # a history written by the first schema, with an answer in it
    version_1.executescript(f"BEGIN; {MIGRATIONS[0]}; PRAGMA user_version = 1; COMMIT;")
    version_1.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old', 0, 0)")
    version_1.execute("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'kept', 0)")
    version_1.commit()
    version_1.close()
    upgraded = History(path)
    assert [m.content for m in upgraded.messages(1)] == ["kept"] and upgraded.saving
    upgraded.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 3
    sqlite3.connect(path).execute("PRAGMA user_version = 99")

    newer = History(path)  # refused, never damaged: the session runs in memory and says why
    assert not newer.saving and "written by a newer localspec" in (newer.open_problem or "")
    newer.create("this session")
    newer.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 99
