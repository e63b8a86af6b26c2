"""The installed command in a real terminal (tmux, a pseudo-terminal): it starts, answers, and gives the terminal back
when it is told to stop mid-answer."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from tests.app_pilot import local_pair
from tests.lossless import plain_text


def wait_for_screen(session: str, text: str, timeout: float = 120.0) -> str:
    """The tmux pane once it shows `text`, or as it is when `timeout` seconds have passed (a slow machine gets time)."""
    deadline = time.monotonic() + timeout
    while True:
        screen = subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout
        if text in screen or time.monotonic() > deadline:
            return screen
        time.sleep(0.1)


def test_the_app_answers_in_a_real_terminal(tmp_path, tiny):
    """tmux: the installed command starts, takes a prompt from the keyboard, and answers."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test: apt-get install tmux")
    config = tmp_path / "config" / "localspec"
    config.mkdir(parents=True)
    (config / "models.toml").write_text('default = "tiny"\n' + local_pair("tiny", tiny["target"], tiny["same"]))
    # An identical draft: every token accepted, on any machine, since the answer is clear of near-ties.
    (config / "settings.json").write_text(json.dumps({"drafter": "model", "max_tokens": 24}))
    plain_text(tiny["target"], "hello", 24)
    env = f"XDG_CONFIG_HOME={tmp_path / 'config'} XDG_DATA_HOME={tmp_path / 'data'} XDG_STATE_HOME={tmp_path / 'state'}"
    session = f"localspec-test-{tmp_path.name}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30",
                    f"env {env} {sys.executable} -m localspec"], check=True)
    try:
        screen = wait_for_screen(session, "layers on GPU")  # the device line appears once the pair is loaded
        assert "layers on GPU" in screen, screen
        subprocess.run(["tmux", "send-keys", "-t", session, "hello", "Enter"], check=True)
        screen = wait_for_screen(session, "100.0% answer")
        assert "Assistant" in screen and "100.0% answer" in screen and "tok/s" in screen, screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def test_sigterm_mid_answer_gives_the_terminal_back_and_keeps_the_answer(tmp_path, real_models):
    """Issue 56: SIGTERM while an answer streamed exited 143 with the terminal left in the alternate screen with mouse
    reporting on, until `reset`. The app now closes as Ctrl+Q does, and still exits 128 + 15."""
    import fcntl
    import os
    import pty
    import signal
    import struct
    import termios

    config = tmp_path / "config" / "localspec"
    config.mkdir(parents=True)
    target = real_models[1]  # the 0.5B model: an answer of hundreds of tokens takes seconds, so the signal lands mid-answer
    (config / "models.toml").write_text('default = "small"\n' + local_pair("small", target, target))
    (config / "settings.json").write_text(json.dumps({"drafter": "none", "max_tokens": 2000}))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"), "TERM": "xterm-256color"}
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    app = subprocess.Popen([sys.executable, "-m", "localspec"], stdin=terminal, stdout=terminal, stderr=terminal, env=env,
                           start_new_session=True)
    os.close(terminal)
    screen = bytearray()

    def read_all() -> None:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the app closed its end
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    history_file = tmp_path / "data" / "localspec" / "history.sqlite3"

    def streamed() -> str:
        if not history_file.exists():
            return ""
        with sqlite3.connect(history_file) as db:
            row = db.execute("SELECT content FROM messages WHERE role = 'assistant' AND status = 'streaming'").fetchone()
        return row[0] if row else ""

    try:
        while b"layers on GPU" not in screen:  # the device line: the pair is loaded
            assert app.poll() is None, bytes(screen[-2000:])
            time.sleep(0.1)
        os.write(main, b"Write a long story about a lighthouse keeper.\r")
        while len(streamed()) < 20:  # the answer is being written, and saved as it goes
            assert app.poll() is None, bytes(screen[-2000:])
            time.sleep(0.1)
        before = len(screen)
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=60) == 128 + signal.SIGTERM
        reader.join(timeout=10)
    finally:
        app.kill()
        os.close(main)
    tail = bytes(screen[before:])
    assert b"\x1b[?1049l" in tail, tail[-500:]  # out of the alternate screen
    assert b"\x1b[?1000l" in tail and b"\x1b[?1006l" in tail, tail[-500:]  # mouse reporting off
    assert b"\x1b[?25h" in tail  # the cursor shown again
    with sqlite3.connect(history_file) as db:
        (content,) = db.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
    assert len(content) >= 20  # what was streamed is kept
