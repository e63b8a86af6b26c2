"""Conversations and messages in SQLite, with a versioned schema and nothing lost on a crash.

An answer is written as it streams: the row is created when generation starts
(status "streaming"), its text is saved every so often, and it is closed with its
statistics when generation ends. If the app is killed mid-answer, the next start
finds the row still "streaming", its writer gone, and marks it "interrupted": the
prompt and every word streamed so far are there. (A row whose writer still runs,
another localspec on the same history, is left streaming.)

The schema version lives in SQLite's `user_version`; each migration upgrades
one step, so an old database opens in a new localspec, and a database from a
newer localspec is refused instead of damaged.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
        status TEXT NOT NULL DEFAULT 'complete',   -- complete | streaming | stopped | cut | max_tokens | interrupted | error
        pair_id TEXT,
        settings TEXT,     -- JSON: the generation settings used
        stats TEXT,        -- JSON: GenerationStats.to_dict()
        provenance TEXT,   -- JSON: [[source, characters], ...] runs over content
        created_at REAL NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    # version 2: the process writing a streaming answer, so another localspec starting up leaves it alone
    """
    ALTER TABLE messages ADD COLUMN owner_pid INTEGER;
    """,
    # version 3: why an answer failed (status 'error'), to say it again after a restart
    """
    ALTER TABLE messages ADD COLUMN error TEXT;
    """,
]
RETRY_S = 30.0  # while the history is in memory, how often saving to disk is tried again


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
    role: Literal["user", "assistant"]  # the table's CHECK holds it to these
    content: str
    status: str
    pair_id: str | None
    settings: dict[str, Any]
    stats: dict[str, Any]
    provenance: list[tuple[str, int]]
    error: str | None = None  # why it failed, where it did (status 'error') and the reason was one to show


class History:
    """The conversations, on disk while the disk takes writes, in memory (and said) while it does not.

    A write that fails (disk full, a read-only file or folder) moves the whole history into memory and the
    app goes on: every chat stays on screen and in the conversation list. Every RETRY_S the memory copy is
    written back whole (SQLite's backup, one transaction); once that works, saving resumes where it stopped.
    A second localspec writing the same file meanwhile would lose its changes to that write-back.
    """

    def __init__(self, path: Path, on_notice: Callable[[str], object] | None = None, retry_s: float = RETRY_S) -> None:
        self.path = path
        self._notice = on_notice or (lambda _text: None)
        self._retry_s = retry_s
        self._retry_at = 0.0
        self._lock = threading.Lock()  # one connection, shared by the UI thread and the generation worker
        self.saving = True  # False while the history lives in memory only
        # Only a copy of what the file held may later replace it: never a blank start over a damaged or newer file.
        self._copy_of_file = True
        self.open_problem: str | None = None  # why the file could not be used at start, for the app to say
        try:
            self._db = self._connect_disk()
            _check_intact(self._db)
            self._migrate(self._db)
            self._mark_orphans_interrupted()
        except (sqlite3.Error, OSError, HistoryError) as exc:
            self._db, self.open_problem = self._memory_copy(exc)
            self.saving = False
            self._retry_at = time.monotonic() + self._retry_s

    def _connect_disk(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise HistoryError(f"The chat history at {self.path} was written by a newer localspec (schema {version}). Upgrade localspec to open it.")
        for number in range(version, len(MIGRATIONS)):
            db.executescript(f"BEGIN; {MIGRATIONS[number]}; PRAGMA user_version = {number + 1}; COMMIT;")

    def _mark_orphans_interrupted(self) -> None:
        """An answer still 'streaming' whose process is gone was cut by a crash; one a live localspec is writing is left alone."""
        for message_id, owner in self._db.execute("SELECT id, owner_pid FROM messages WHERE status = 'streaming'").fetchall():
            if owner is None or not _process_alive(owner):
                self._db.execute("UPDATE messages SET status = 'interrupted' WHERE id = ?", (message_id,))

    def _memory_copy(self, reason: BaseException) -> tuple[sqlite3.Connection, str]:
        """An in-memory history holding what the file holds (read-only if need be), and the words that say what happened.
        Where the file could not be read (damaged, or a newer schema), the session starts empty and is never written back."""
        memory = _memory_db()
        folder = self.path.parent
        copied = False
        if isinstance(reason, HistoryError):  # a newer schema: not read, so it cannot be damaged
            problem = str(reason)
        else:
            try:
                # immutable: a folder that refuses new files cannot hold the -shm file a WAL database wants for reading
                source = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
                try:
                    source.backup(memory)
                    _check_intact(memory)  # the backup copies pages as they are: damaged ones only fail when read
                    copied = True
                finally:
                    source.close()
            except (sqlite3.Error, OSError, ValueError):
                memory.close()
                memory = _memory_db()
            if copied:
                problem = (f"The chat history at {self.path} can be read but not written ({_reason(reason)}). Your chats are shown; "
                           f"this session's are kept in memory and saved there as soon as it can be written: check the free space "
                           f"and the permissions of {folder}.")
            elif not self.path.exists():  # nothing to be damaged: the folder refused a new file (a read-only home, say)
                problem = (f"The chat history cannot be created at {self.path} ({_reason(reason)}). This session is kept in memory "
                           f"only. Make {folder} writable, or set XDG_DATA_HOME to a folder you can write.")
            else:
                problem = (f"The chat history at {self.path} cannot be opened ({_reason(reason)}). This session is kept in memory "
                           f"only. If the disk and the permissions of {folder} are fine, the file may be damaged: move it aside "
                           "(localspec never deletes it) and a new one is started.")
        try:
            self._migrate(memory)
        except HistoryError:
            memory.close()
            memory = _memory_db()  # the copy is of a newer schema: start empty
            self._migrate(memory)
            copied = False
        self._copy_of_file = copied
        return memory, problem

    def _fall_back_to_memory(self, reason: sqlite3.Error) -> None:
        memory = _memory_db()
        self._db.backup(memory)  # reading still works where writing does not
        self._db.close()
        self._db = memory
        self.saving = False
        self._retry_at = time.monotonic() + self._retry_s
        self._notice(f"Saving to the chat history at {self.path} failed ({_reason(reason)}). Nothing is lost: localspec goes on, "
                     f"keeping this session in memory, and saves it as soon as the disk takes writes again (check its free space "
                     f"and the permissions of {self.path.parent}).")

    def _try_saving_again(self) -> None:
        """Write the memory copy back over the file, whole; on success the file is the history again."""
        self._retry_at = time.monotonic() + self._retry_s
        try:
            disk = self._connect_disk()
        except (sqlite3.Error, OSError):
            return
        try:
            self._db.backup(disk)
        except sqlite3.Error:
            disk.close()
            return
        self._db.close()
        self._db = disk
        self.saving = True
        self.open_problem = None
        self._notice(f"The chat history is saved again to {self.path}, this session included.")

    def save_now(self) -> bool:
        """Try to write an in-memory session back at once; whether everything is on disk now (the app asks before quitting)."""
        with self._lock:
            if not self.saving and self._copy_of_file:
                self._try_saving_again()
            return self.saving

    def close(self) -> None:
        with self._lock:
            if not self.saving and self._copy_of_file:
                self._try_saving_again()  # a last try, so a disk freed meanwhile gets the session
            self._db.close()

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            if not self.saving and self._copy_of_file and time.monotonic() >= self._retry_at:
                self._try_saving_again()
            try:
                return self._db.execute(sql, params)
            except sqlite3.Error as exc:
                if not self.saving:
                    raise HistoryError(f"The chat history failed even in memory ({exc}).") from exc
                try:
                    self._fall_back_to_memory(exc)
                except sqlite3.Error as copy_failed:
                    raise HistoryError(f"The chat history at {self.path} failed ({exc}) and could not be read back "
                                       f"({copy_failed}). Check the disk; nothing was deleted.") from exc
                return self._db.execute(sql, params)

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
            "SELECT id, conversation_id, role, content, status, pair_id, settings, stats, provenance, error "
            "FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        ).fetchall()
        return [
            StoredMessage(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6] or "{}"), json.loads(r[7] or "{}"),
                          [tuple(run) for run in json.loads(r[8] or "[]")], r[9])
            for r in rows
        ]

    def add_user_message(self, conversation_id: int, content: str) -> int:
        cursor = self._run("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (?, 'user', ?, ?)",
                           (conversation_id, content, time.time()))
        self._touch(conversation_id)
        return int(cursor.lastrowid or 0)

    def pairs_used(self) -> list[str]:
        """The pairs that answered, the latest first: the last pair used, where the settings lost it."""
        rows = self._run("SELECT pair_id FROM messages WHERE pair_id IS NOT NULL GROUP BY pair_id ORDER BY MAX(id) DESC").fetchall()
        return [row[0] for row in rows]

    def start_answer(self, conversation_id: int, pair_id: str, settings: dict[str, Any]) -> int:
        cursor = self._run(
            "INSERT INTO messages (conversation_id, role, content, status, pair_id, settings, created_at, owner_pid) "
            "VALUES (?, 'assistant', '', 'streaming', ?, ?, ?, ?)",
            (conversation_id, pair_id, json.dumps(settings), time.time(), os.getpid()),
        )
        self._touch(conversation_id)
        return int(cursor.lastrowid or 0)

    def save_partial(self, message_id: int, content: str, provenance: list[tuple[str, int]]) -> None:
        self._run("UPDATE messages SET content = ?, provenance = ? WHERE id = ?", (content, json.dumps(provenance), message_id))

    def finish_answer(self, message_id: int, content: str, status: str, stats: dict[str, Any], provenance: list[tuple[str, int]],
                      error: str | None = None) -> None:
        self._run("UPDATE messages SET content = ?, status = ?, stats = ?, provenance = ?, error = ? WHERE id = ?",
                  (content, status, json.dumps(stats), json.dumps(provenance), error, message_id))

    def delete_message(self, message_id: int) -> None:
        self._run("DELETE FROM messages WHERE id = ?", (message_id,))


def _check_intact(db: sqlite3.Connection) -> None:
    """A sqlite3.DatabaseError where pages are damaged: a file whose header is whole opens, and its damaged pages would
    fail only later, at the first read (the app then stopped at start, its copy in memory as damaged as the file)."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError(f"database disk image is malformed: {problems[0]}")


def _memory_db() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    return db


def _process_alive(pid: int) -> bool:
    """Whether process `pid` runs (another localspec streaming an answer). Our own pid is a dead process's: we have
    started no answer yet. Where signals cannot probe (Windows), every owner counts as gone, as before owners were kept."""
    if pid == os.getpid() or os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
