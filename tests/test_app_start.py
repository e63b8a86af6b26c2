"""How the app starts: on a damaged history, on settings that lost the last pair, and on a pair or files named on the
command line. The real app, driven by Pilot, on real llama.cpp with tiny generated models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

from localspec.session.history import History
from tests.app_pilot import Setup, ask, local_pair, run_async, wait_for
from tests.conftest import cli


def damage_pages(path: Path) -> None:
    """Bytes 100-8191 overwritten, as issue 75 found: SQLite's header stays whole, so the file opens, and the pages behind it
    (the schema's, the first tables') are garbage."""
    data = bytearray(path.read_bytes())
    data[100:8192] = b"A" * (8192 - 100)
    path.write_bytes(bytes(data))


@run_async
async def test_a_history_with_damaged_pages_is_kept_and_the_app_starts_in_memory(setup: Setup, tiny):
    """Issue 75: the app exited 1 at start, "The chat history failed even in memory (database disk image is malformed)"."""
    history = History(setup.history)
    for n in range(20):  # several pages of chats, the file's first two among them
        conversation = history.create(f"chat {n}")
        history.add_user_message(conversation.id, f"words of chat {n} " * 50)
    history.close()
    damage_pages(setup.history)
    damaged = setup.history.read_bytes()
    setup.write(local_pair("tiny", tiny["target"], tiny["same"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: any("cannot be opened" in n.message for n in app._notifications))
        said = next(n.message for n in app._notifications if "cannot be opened" in n.message)
        assert "database disk image is malformed" in said and "move it aside" in said and "kept in memory only" in said
        view = await ask(pilot, app, "hello there")  # the session goes on, in memory
        assert view.text and view.status == "max_tokens"
    assert setup.history.read_bytes() == damaged  # never written over, never deleted


def answered_with(history: History, pair_id: str) -> None:
    conversation = history.create(f"a chat with {pair_id}")
    history.add_user_message(conversation.id, "hello")
    answer = history.start_answer(conversation.id, pair_id, {})
    history.finish_answer(answer, "hi", "complete", {}, [])


@run_async
async def test_settings_that_are_not_json_lose_no_pair_the_history_or_the_disk_knows(setup: Setup, tiny):
    """Issue 75: a corrupted settings.json was kept as .bad, and the app then offered the 1.6 GB default download. The last
    pair comes from the history's last answer, else from a pair whose files are here."""
    missing = setup.root / "gone.gguf"
    catalog = (local_pair("gone", missing, missing) + local_pair("older", tiny["target"], tiny["same"])
               + local_pair("newer", tiny["target"], tiny["near"]))
    history = History(setup.history)
    answered_with(history, "older")
    answered_with(history, "newer")
    answered_with(history, "no-longer-in-the-catalog")
    history.close()
    setup.write(catalog)
    setup.settings.write_text('{"last_pair": "newer", ')  # cut short: not JSON
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert app.loaded is not None and app.loaded.pair.id == "newer"  # the last answer's pair that the catalog still has
        assert any("is not valid JSON" in n.message for n in app._notifications)
    assert setup.settings.with_suffix(".json.bad").read_text() == '{"last_pair": "newer", '

    setup.history.unlink()  # no history either: a pair whose files are here, not the default's download
    setup.settings.write_text("not json")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert app.loaded is not None and app.loaded.pair.id == "older"  # "gone" comes first, but its files are not here


class Terminal:
    """`python -m localspec ARGS` in a pseudo-terminal of its own, as a user starts it; what it draws is kept."""

    def __init__(self, root: Path, *args: str) -> None:
        import fcntl
        import pty
        import struct
        import termios

        env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"), "XDG_DATA_HOME": str(root / "data"),
               "XDG_STATE_HOME": str(root / "state"), "XDG_CACHE_HOME": str(root / "cache"), "TERM": "xterm-256color"}
        self.main, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        self.process = subprocess.Popen([sys.executable, "-m", "localspec", *args], stdin=terminal, stdout=terminal, stderr=terminal,
                                        env=env, start_new_session=True)
        os.close(terminal)
        self.screen = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.main, 65536)
            except OSError:  # the app closed its end
                return
            if not chunk:
                return
            self.screen.extend(chunk)

    def wait_for(self, text: bytes, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            assert self.process.poll() is None, bytes(self.screen[-3000:])
            assert time.monotonic() < deadline, bytes(self.screen[-3000:])
            time.sleep(0.1)

    def type(self, keys: bytes) -> None:
        os.write(self.main, keys)

    def quit(self) -> int:
        """Ctrl+Q, and the exit status."""
        try:
            self.type(b"\x11")
            return self.process.wait(timeout=60)
        finally:
            self.process.kill()
            self.reader.join(timeout=10)
            os.close(self.main)


def saved_pairs(root: Path) -> dict[str, list[str]]:
    """Each pair of the user's models.toml, by id: its files' paths."""
    text = (root / "config" / "localspec" / "models.toml").read_text()
    return {pair["id"]: [pair[role]["path"] for role in ("target", "draft") if role in pair] for pair in tomllib.loads(text)["pair"]}


def last_pair(root: Path) -> str:
    return json.loads((root / "config" / "localspec" / "settings.json").read_text())["last_pair"]


def test_the_bare_command_opens_the_app_on_files_or_a_pair(tmp_path: Path, tiny):
    """Issue 75: `localspec --target F.gguf` said "invalid choice: 'F.gguf'". Files become a pair in models.toml, as the app's
    "add pair" form makes one (the same files, the same pair); a target alone answers too; `--pair ID` opens that pair."""
    config = tmp_path / "config" / "localspec"
    config.mkdir(parents=True)
    (config / "settings.json").write_text(json.dumps({"max_tokens": 12}))
    target, draft = tiny["target"], tiny["same"]

    with_draft = Terminal(tmp_path, "--target", str(target), "--draft", str(draft))
    with_draft.wait_for(b"layers on GPU")  # the device line: the pair is loaded
    assert with_draft.quit() == 0
    assert saved_pairs(tmp_path) == {"target": [str(target), str(draft)]} and last_pair(tmp_path) == "target"

    alone = Terminal(tmp_path, "--target", str(target))  # no draft: another pair, and it answers
    alone.wait_for(b"layers on GPU")
    alone.type(b"hello\r")
    alone.wait_for(b"cut at max tokens")  # the answer's header, once it is whole
    assert alone.quit() == 0
    assert saved_pairs(tmp_path) == {"target": [str(target), str(draft)], "target-2": [str(target)]}
    history = History(tmp_path / "data" / "localspec" / "history.sqlite3")
    (answer,) = [m for c in history.conversations() for m in history.messages(c.id) if m.role == "assistant"]
    history.close()
    assert answer.pair_id == "target-2" and answer.status == "max_tokens" and answer.content

    again = Terminal(tmp_path, "--target", str(target), "--draft", str(draft))  # the same files: the same pair, nothing added
    again.wait_for(b"layers on GPU")
    assert again.quit() == 0 and last_pair(tmp_path) == "target" and len(saved_pairs(tmp_path)) == 2

    by_id = Terminal(tmp_path, "--pair", "target-2")
    by_id.wait_for(b"layers on GPU")
    assert by_id.quit() == 0 and last_pair(tmp_path) == "target-2"


def test_the_bare_commands_models_typed_wrong_exit_2_before_the_app_starts(tmp_path: Path, tiny):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    target = str(tiny["target"])
    cases = {
        ("--target", str(tmp_path / "missing.gguf")): "--target " + str(tmp_path / "missing.gguf") + ": there is no such file",
        ("--target", target, "--draft", str(tmp_path)): f"--draft {tmp_path} is a folder: give the .gguf file inside it",
        ("--draft", target): "--draft needs --target",
        ("--pair", "no-such-pair"): "No pair named 'no-such-pair'",
        ("--pair", "some-pair", "--target", target): "Give --pair, or --target (and --draft), not both.",
        ("--target", target, "generate", "--prompt", "hi"): "give them after it (localspec generate --target F.gguf ...)",
    }
    for args, expected in cases.items():
        result = cli(*args, env=env, timeout=60)
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), (args, result.stderr)
        assert expected in result.stderr, (args, result.stderr)
    assert not (tmp_path / "config").exists()  # nothing was saved for a command line that was wrong
