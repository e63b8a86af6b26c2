"""Conversations and messages in SQLite, with a versioned schema and nothing lost on a crash.

An answer is written as it streams: the row is created when generation starts
(status "streaming"), its text is saved every so often, and it is closed with its
statistics when generation ends. If the app is killed mid-answer, the next start
finds the row still "streaming" and marks it "interrupted": the prompt and every
word streamed so far are there.

The schema version lives in SQLite's `user_version`; each migration upgrades
one step, so an old database opens in a new localspec, and a database from a
newer localspec is refused instead of damaged.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.errors import LocalspecError

MIGRATIONS = [
    # version 1
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'complete',   -- complete | streaming | stopped | interrupted | error
        pair_id TEXT,
        settings TEXT,     -- JSON: the generation settings used
        stats TEXT,        -- JSON: GenerationStats.to_dict()
        provenance TEXT,   -- JSON: [[source, characters], ...] runs over content
        created_at REAL NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
]


class HistoryError(LocalspecError):
    """The history database cannot be opened or written."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    updated_at: float


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    status: str
    pair_id: str | None
    settings: dict[str, Any]
    stats: dict[str, Any]
    provenance: list[tuple[str, int]]


class History:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # one connection, shared by the UI thread and the generation worker
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._migrate()
            self._db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"The chat history at {path} cannot be opened ({exc}). Move the file aside to start a new one; it is not deleted.") from exc

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise HistoryError(f"The chat history at {self.path} was written by a newer localspec (schema {version}). Upgrade localspec to open it.")
        for number in range(version, len(MIGRATIONS)):
            self._db.executescript(f"BEGIN; {MIGRATIONS[number]}; PRAGMA user_version = {number + 1}; COMMIT;")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._db.execute(sql, params)
            except sqlite3.Error as exc:
                raise HistoryError(f"Saving to the chat history at {self.path} failed ({exc}). Check the disk; nothing was deleted.") from exc

    # --- conversations ---------------------------------------------------------------------------

    def conversations(self) -> list[Conversation]:
        rows = self._run("SELECT id, title, system_prompt, updated_at FROM conversations ORDER BY updated_at DESC, id DESC").fetchall()
        return [Conversation(*row) for row in rows]

    def conversation(self, conversation_id: int) -> Conversation:
        row = self._run("SELECT id, title, system_prompt, updated_at FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise HistoryError(f"Conversation {conversation_id} no longer exists.")
        return Conversation(*row)

    def create(self, title: str = "New chat", system_prompt: str = "") -> Conversation:
        now = time.time()
        cursor = self._run("INSERT INTO conversations (title, system_prompt, created_at, updated_at) VALUES (?, ?, ?, ?)",
                           (title, system_prompt, now, now))
        return Conversation(int(cursor.lastrowid or 0), title, system_prompt, now)

    def rename(self, conversation_id: int, title: str) -> None:
        self._run("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self._run("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._run("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self._run("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conversation_id))

    # --- messages ----------------------------------------------------------------------------------

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._run(
            "SELECT id, conversation_id, role, content, status, pair_id, settings, stats, provenance "
            "FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        ).fetchall()
        return [
            StoredMessage(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6] or "{}"), json.loads(r[7] or "{}"),
                          [tuple(run) for run in json.loads(r[8] or "[]")])  # type: ignore[misc]
            for r in rows
        ]

    def add_user_message(self, conversation_id: int, content: str) -> int:
        cursor = self._run("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (?, 'user', ?, ?)",
                           (conversation_id, content, time.time()))
        self._touch(conversation_id)
        return int(cursor.lastrowid or 0)

    def start_answer(self, conversation_id: int, pair_id: str, settings: dict[str, Any]) -> int:
        cursor = self._run(
            "INSERT INTO messages (conversation_id, role, content, status, pair_id, settings, created_at) "
            "VALUES (?, 'assistant', '', 'streaming', ?, ?, ?)",
            (conversation_id, pair_id, json.dumps(settings), time.time()),
        )
        self._touch(conversation_id)
        return int(cursor.lastrowid or 0)

    def save_partial(self, message_id: int, content: str, provenance: list[tuple[str, int]]) -> None:
        self._run("UPDATE messages SET content = ?, provenance = ? WHERE id = ?", (content, json.dumps(provenance), message_id))

    def finish_answer(self, message_id: int, content: str, status: str, stats: dict[str, Any], provenance: list[tuple[str, int]]) -> None:
        self._run("UPDATE messages SET content = ?, status = ?, stats = ?, provenance = ? WHERE id = ?",
                  (content, status, json.dumps(stats), json.dumps(provenance), message_id))

    def delete_message(self, message_id: int) -> None:
        self._run("DELETE FROM messages WHERE id = ?", (message_id,))
