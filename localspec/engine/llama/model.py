"""One GGUF model and its llama.cpp context, over llama-cpp-python's low-level API.

Its context holds one sequence, or several (the batch scheduler's slots, a tree draft's second branch). For every
sequence it remembers which tokens sit in the cache (`cells`, cells.py), so callers speak in tokens and positions
are derived, never tracked twice; sequence 0's are the one-sequence callers' `kv_tokens`. Logits are zero-copy
numpy views of llama.cpp's own buffer: copying 150k floats per row into Python would cost more than the Python side
of a whole speculative step. The vocabulary is an object of its own (vocabulary.py).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import llguidance
import numpy as np

from localspec.engine import defaults, grammar, prompt_passes
from localspec.engine.errors import EngineError, LoadCancelled, ModelLoadError
from localspec.engine.grammar import Grammar, GrammarText, LLGuidanceGrammar
from localspec.engine.llama import amx, cpu_share, device_faults, failures, hardware, llama_log
from localspec.engine.llama.cells import SequenceCells
from localspec.engine.llama.entry import Entry
from localspec.engine.llama.gbnf_sampler import GbnfGrammar
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.engine.llama.load_abort import LoadAbort
from localspec.engine.llama.memory import RECURRENT_SNAPSHOTS, MemoryKind, draft_limit
from localspec.engine.llama.model_facts import ModelFacts
from localspec.engine.llama.sequence_memory import SequenceMemory
from localspec.engine.llama.vocabulary import Vocabulary
from localspec.engine.tokens import common_prefix

DEFAULT_N_BATCH = 512

_backend_lock = threading.Lock()
_backend_ready = False
_context_serials = itertools.count(1)  # Model.context_serial


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_log.install()
            llama_cpp.llama_backend_init()
            llama_cpp.llama_supports_gpu_offload()  # loads dynamically built backends (the CPU's among them) first
            amx.settle_amx()  # before any weight is placed: AMX stays where this build's matmul is sound (amx.py)
            _backend_ready = True


@dataclass(frozen=True)
class TreeFork:
    """A tree draft's second branch in a pass: sequence `seq`'s tokens from position `split` on have another
    continuation, `tokens`, placed on sequence `into` (which borrows `seq`'s cells before the split)."""

    seq: int
    into: int
    split: int
    tokens: Sequence[int]


@dataclass(frozen=True)
class ModelConfig:
    """How to load one model. `None` means: pick the best default for this machine."""

    n_gpu_layers: int | None = None
    n_ctx: int = defaults.N_CTX
    n_batch: int = DEFAULT_N_BATCH
    n_threads: int | None = None
    n_seq: int = 1  # 2 lets a tree draft's two branches share the cache (one unified KV buffer, so no context is lost)
    devices: tuple[int, ...] | None = None  # the GPU-type devices (ggml_backend_dev_t) to offload to; None: all
    load_mtp: bool = True  # a file's MTP layers (the mtp head): llama.cpp refuses a file whose MTP tensors it must skip

    def resolved_gpu_layers(self) -> int:
        if self.n_gpu_layers is not None:
            return self.n_gpu_layers
        return -1 if hardware.gpu_offload_supported() else 0

    def resolved_threads(self) -> int:
        return self.n_threads or hardware.physical_core_count()


class Model(ModelFacts):
    """A loaded GGUF model, its vocabulary, and one llama.cpp context holding one sequence or several."""

    def __init__(self, path: str | Path, config: ModelConfig = ModelConfig(), role: str = "model",
                 cancel: threading.Event | None = None) -> None:
        """Load the weights and open the context; `cancel` (or Ctrl-C on the main thread) stops the load midway."""
        self._owner: Model | None = None  # whose weights this context runs on, where they are another's (beside)
        self.path = Path(path)
        self.role = role
        self.config = config
        check_gguf_file(self.path)
        _init_backend()
        llama_log.rotate_if_large()
        llama_log.take_recent_errors()

        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = config.resolved_gpu_layers()
        model_params.load_mtp = config.load_mtp
        if config.devices is not None:  # NULL-terminated; llama.cpp copies the list during the load
            devices = (ctypes.c_void_p * (len(config.devices) + 1))(*config.devices, None)
            model_params.devices = ctypes.addressof(devices)
        abort = LoadAbort(cancel)
        model_params.progress_callback = abort.callback
        try:
            with abort.interrupts_deferred():
                self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), model_params)
                if not self._model:
                    raise LoadCancelled("Loading the pair was cancelled.") if abort.stopped else ModelLoadError(failures.load_failed(self.path))
                self.vocab = Vocabulary(llama_cpp.llama_model_get_vocab(self._model))
                self.n_vocab = self.vocab.n_vocab
                self._lltokenizer: llguidance.LLTokenizer | None = None  # llguidance's view of the vocabulary, made at the first grammar
                self.n_threads = config.resolved_threads()
                self.n_decoded = 0  # tokens ever passed to llama_decode: proves nothing is evaluated twice
                self.decode_ns = 0  # time inside llama_decode until its work is done, for the Python-overhead figure
                self._open_context(config.n_seq)
        except BaseException:
            self.close()
            raise

    def _open_context(self, n_seq: int) -> None:
        """A fresh context (and empty cache) holding `n_seq` sequences; more than one share one unified KV buffer."""
        config = self.config
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = config.n_ctx
        ctx_params.n_batch = config.n_batch
        ctx_params.n_ubatch = config.n_batch
        ctx_params.n_seq_max = n_seq
        ctx_params.kv_unified = n_seq > 1
        ctx_params.n_threads = self.n_threads
        ctx_params.n_threads_batch = self.n_threads
        self.threads_now = self.n_threads  # what passes take now: fewer while other programs hold cores (cpu_share.py)
        ctx_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        recurrent = llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model)
        ctx_params.n_rs_seq = RECURRENT_SNAPSHOTS if recurrent else 0  # llama.cpp keeps 0 where the architecture has none
        ctx_params.swa_full = False  # a sliding-window model keeps the window's cells only (memory.py)
        self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            errors = "; ".join(llama_log.take_recent_errors()) or "no reason given"
            raise ModelLoadError(
                f"Could not create a {config.n_ctx}-token context for {self.path.name} ({errors}). "
                "This is usually a lack of memory: try a smaller context size or fewer GPU layers."
            )
        # which context this is: a reopened one (ensure_sequences) often comes back at the freed one's address
        self.context_serial = next(_context_serials)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch: int = llama_cpp.llama_n_batch(self._ctx)
        self.n_seq = n_seq
        self.snapshots: int = llama_cpp.llama_n_rs_seq(self._ctx)
        self.n_swa: int = llama_cpp.llama_model_n_swa(self._model)
        self.memory = MemoryKind.ATTENTION if not recurrent else MemoryKind.SNAPSHOTS if self.snapshots else MemoryKind.RECURRENT
        self.draft_limit = draft_limit(self.memory, self.snapshots)  # the most draft tokens a verify pass may hold (None: any)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, n_seq)
        self._empty_cells()
        self._view_key: tuple[int, int] | None = None  # the logits view's (buffer address, rows): a new context, a new buffer
        self._view = np.empty((0, 0), dtype=np.float32)

    def ensure_sequences(self, n_seq: int) -> None:
        """Hold at least `n_seq` sequences (a tree draft's second branch), reopening the context if it holds fewer: one is
        the fast default, a unified cache made only for a drafter that uses it. The weights stay; the cache starts empty."""
        if n_seq <= self.n_seq:
            return
        held = self.n_seq
        self._close_context()
        try:
            self._open_context(n_seq)
        except ModelLoadError:
            self._open_context(held)  # the model stays usable as it was; the caller hears why the drafter cannot run
            raise

    # --- lifetime -----------------------------------------------------------------

    def _close_context(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    @classmethod
    def beside(cls, owner: Model) -> Model:
        """Another context on `owner`'s weights, one copy of them in memory, its own cache and compute buffers: the bench's
        lockstep (bench/lockstep.py). Close it before its owner."""
        second = cls.__new__(cls)
        second.path, second.role, second.config, second._model = owner.path, owner.role, owner.config, owner._model
        second.vocab, second.n_vocab, second.n_threads, second.n_decoded, second.decode_ns = owner.vocab, owner.n_vocab, owner.n_threads, 0, 0
        second._owner = owner
        second._open_context(owner.n_seq)
        return second

    def close(self) -> None:
        self._close_context()
        if getattr(self, "_model", None) and getattr(self, "_owner", None) is None:  # a context beside another's weights frees none
            llama_cpp.llama_model_free(self._model)
        self._model = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def handles(self) -> tuple[llama_cpp.llama_model_p, llama_cpp.llama_context_p]:
        """The llama.cpp model and its current context (a new one after ensure_sequences): for a head that shares them."""
        return self._model, self._ctx

    def __del__(self) -> None:
        self.close()

    # --- KV cache and decoding ------------------------------------------------------

    def _empty_cells(self) -> None:
        self.cells = SequenceCells.empty(self.n_seq)  # what each sequence's cells hold, kept at every decode, rollback and share
        self.kv_tokens = self.cells.tokens[0]  # sequence 0's: the one-sequence callers' cache (the same list, never replaced)
        self.sequences = SequenceMemory(self._ctx, self.memory, self.snapshots, self.n_swa, self.n_seq)  # what each may drop

    @property
    def forks(self) -> bool:
        """Whether a tree's two branches can share this cache: a recurrent state cannot be lent by position."""
        return self.memory is MemoryKind.ATTENTION

    @property
    def canonical_n(self) -> int:
        return self.cells.canonical[0]

    @property
    def n_past(self) -> int:
        return len(self.kv_tokens)

    def decode(self, tokens: Sequence[int], outputs: int) -> np.ndarray:
        """Append `tokens` to the cache in one llama_decode; return logits of the last `outputs` tokens.

        The result is an (outputs, n_vocab) view into llama.cpp's buffer, valid until the next decode (empty for none).
        """
        pos0 = len(self.kv_tokens)
        rows = self._run_batch([(token, pos0 + i, (0,)) for i, token in enumerate(tokens)], outputs)
        self.kv_tokens.extend(tokens)  # sequence 0's record, in one call (the other passes place entry by entry)
        self.sequences.last_pass[0] = len(tokens)
        return rows

    def settle_tree(self, fork: TreeFork, n_fork_kept: int | None) -> None:
        """End a forked pass: with `n_fork_kept` None the main branch stays (truncate it as usual), else the fork's first
        tokens replace it. The fork's sequence is emptied either way."""
        if n_fork_kept is not None:
            llama_cpp.llama_memory_seq_rm(self._memory, fork.seq, fork.split, -1)
            llama_cpp.llama_memory_seq_cp(self._memory, fork.into, fork.seq, fork.split, fork.split + n_fork_kept)
            self.cells.replace_tail(fork.seq, fork.split, self.cells.tokens[fork.into][fork.split : fork.split + n_fork_kept])
        llama_cpp.llama_memory_seq_rm(self._memory, fork.into, -1, -1)
        self.cells.cut(fork.into, 0)

    def _run_batch(self, entries: Sequence[tuple[int, int, tuple[int, ...]]], outputs: int) -> np.ndarray:
        """llama_decode over (token, position, sequences) entries; logits of the last `outputs` entries."""
        first_output = len(entries) - outputs
        return self._decode_entries(entries, [i >= first_output for i in range(len(entries))])

    def decode_sequences(self, entries: Sequence[Entry], fork: TreeFork | None = None) -> np.ndarray:
        """One llama_decode over the entries of several sequences at once, and a tree's second branch where `fork` says.

        The batch scheduler's pass: every slot's tokens under its own sequence id, each placed at the end of what its
        sequence holds (`cells`). A fork's sequence first borrows its slot's whole cache (a unified cache only tags the
        cells); the slot's tokens before the split go in both sequences, its tokens past it in its own, and the fork's
        branch in the fork's, right after the slot's entries, so each branch attends to the context and its own tokens,
        never the other's; `settle_tree` keeps one. Returns a row per entry that wants logits (a fork's: every one), in
        that order: a view valid until the next decode.
        """
        placed: list[tuple[int, int, tuple[int, ...]]]
        if fork is None:
            placed = [(token, pos, (seq,)) for token, pos, seq, _ in entries]
            wants = [entry.logits for entry in entries]
        else:
            placed, wants = self._fork_entries(entries, fork)
        rows = self._decode_entries(placed, wants)
        self.cells.placed(placed)
        if self.memory is not MemoryKind.ATTENTION:  # what each sequence may drop next (memory.py)
            for seq, n in Counter(entry.seq for entry in entries).items():
                self.sequences.last_pass[seq] = n
        return rows

    def _fork_entries(self, entries: Sequence[Entry], fork: TreeFork) -> tuple[list[tuple[int, int, tuple[int, ...]]], list[bool]]:
        if self.n_seq <= fork.into or not self.forks:
            raise EngineError(f"{self.role} model holds no sequence past its slots', or a recurrent state; a tree draft needs one more "
                              "sequence of an attention cache (ensure_sequences).")
        llama_cpp.llama_memory_seq_cp(self._memory, fork.seq, fork.into, -1, -1)
        self.cells.share(fork.seq, fork.into, len(self.cells.tokens[fork.seq]))
        placed: list[tuple[int, int, tuple[int, ...]]] = []
        wants: list[bool] = []
        last = max(i for i, entry in enumerate(entries) if entry.seq == fork.seq)
        for i, (token, pos, seq, logits) in enumerate(entries):
            placed.append((token, pos, (seq, fork.into) if seq == fork.seq and pos < fork.split else (seq,)))
            wants.append(logits)
            if i == last:
                placed += [(token, fork.split + j, (fork.into,)) for j, token in enumerate(fork.tokens)]
                wants += [True] * len(fork.tokens)
        return placed, wants

    def forget(self, seq: int, from_pos: int = 0) -> int:
        """Drop sequence `seq`'s tokens from position `from_pos` on: the one rollback, of a rejected draft or of a cache
        a prompt reuses in part. Where the memory cannot drop just those (memory.py), the whole sequence goes. How many
        tokens the sequence holds after."""
        held = len(self.cells.tokens[seq])
        if from_pos >= held:
            return held
        from_pos = self.sequences.drop_point(seq, from_pos, held)
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq, from_pos, -1):
            raise EngineError(f"llama.cpp could not drop sequence {seq}'s cells of {self.path.name} from position {from_pos}.")
        self.cells.cut(seq, from_pos)
        self.sequences.dropped(seq, from_pos)
        return from_pos

    def mark_read(self, seq: int, n: int) -> None:
        """Sequence `seq`'s first `n` cells, all it holds, were read as prompt in canonical passes (prompt_passes): a
        later prompt may reuse them. A recurrent state is saved there, so that prompt restores it instead of reading
        everything again (memory.py)."""
        self.cells.canonical[seq] = n
        self.sequences.read(seq, n)

    def reusable_prefix(self, seq: int, shared: int, n_prompt: int) -> int:
        """How many of the `shared` leading tokens sequence `seq` holds a prompt of `n_prompt` tokens keeps
        (SequenceMemory.reusable_prefix)."""
        return self.sequences.reusable_prefix(seq, shared, self.cells.canonical[seq], n_prompt)

    def lendable(self, source: int, n: int) -> int:
        """How many of sequence `source`'s first `n` tokens another sequence can take (share_cells)."""
        return self.sequences.lendable(source, n)

    def share_cells(self, source: int, seq: int, n: int) -> None:
        """Sequence `seq` takes sequence `source`'s cells for positions 0..n-1 (one cache's prefix lent to another slot: in a
        unified cache the cells are tagged, not copied). `seq` must hold no cells there; `n` at most lendable()."""
        llama_cpp.llama_memory_seq_cp(self._memory, source, seq, 0, n)
        self.cells.share(source, seq, n)

    def clear_cache(self) -> None:
        """Every sequence's cells gone: the multi-sequence scheduler starts from an empty cache."""
        llama_cpp.llama_memory_clear(self._memory, True)
        self._empty_cells()

    def cells_held(self, seq: int) -> int:
        """Positions sequence `seq` holds in the cache (its highest position + 1): a leak check for the scheduler's tests."""
        return llama_cpp.llama_memory_seq_pos_max(self._memory, seq) + 1

    def _decode_entries(self, entries: Sequence[tuple[int, int, tuple[int, ...]]], wants_logits: Sequence[bool]) -> np.ndarray:
        n = len(entries)
        if n > self.n_batch:
            raise ValueError(f"batch of {n} tokens exceeds n_batch={self.n_batch}")
        batch = self._batch
        for i, (token, pos, seqs) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = len(seqs)
            for j, seq in enumerate(seqs):
                batch.seq_id[i][j] = seq
            batch.logits[i] = wants_logits[i]
        batch.n_tokens = n
        if self.config.n_threads is None:  # a count the user set is kept as it is
            self._take_threads(cpu_share.SHARE.threads(self.n_threads))
        start = time.perf_counter_ns()
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc == 0:  # CUDA, Metal and RPC return before the pass is done: its time ends when its work does
            llama_cpp.llama_synchronize(self._ctx)
        self.decode_ns += time.perf_counter_ns() - start
        device_faults.raise_if_lost()  # a device lost during the pass is seen before a row is read (or explains rc)
        outputs = sum(1 for wants in wants_logits if wants)
        pointer = llama_cpp.llama_get_logits(self._ctx) if rc == 0 and outputs else None
        if rc != 0:
            raise EngineError(failures.decode_failed(self.role, rc, n, self.n_ctx, self.n_past))
        self.n_decoded += n
        address = ctypes.cast(pointer, ctypes.c_void_p).value if pointer is not None else None
        return self._logits_view(address, outputs) if address is not None else np.empty((0, self.n_vocab), dtype=np.float32)

    def _take_threads(self, threads: int) -> None:
        if threads != self.threads_now:
            llama_cpp.llama_set_n_threads(self._ctx, threads, threads)
            self.threads_now = threads

    def _logits_view(self, address: int, outputs: int) -> np.ndarray:
        """The (outputs, n_vocab) view of llama.cpp's logits buffer, made again only when the buffer moves or the row count
        changes: np.ctypeslib.as_array took 66 us a pass on a 152k vocabulary, a quarter of plain decoding's Python."""
        if self._view_key != (address, outputs):
            buffer = (ctypes.c_float * (outputs * self.n_vocab)).from_address(address)
            self._view = np.frombuffer(memoryview(buffer), dtype=np.float32).reshape(outputs, self.n_vocab)
            self._view_key = (address, outputs)
        return self._view

    def grammar(self, text: GrammarText) -> Grammar:
        """A fresh answer's grammar state over this model's vocabulary (engine/grammar.py); llguidance's view of the
        vocabulary is made at the first grammar and kept."""
        if text.llguidance is None:
            return GbnfGrammar(self.vocab.handle, self.n_vocab, text.gbnf or "")
        if self._lltokenizer is None:
            self._lltokenizer = grammar.tokenizer(self.vocab.handle, self.n_vocab)
        return LLGuidanceGrammar(self._lltokenizer, text.llguidance, self.n_vocab)

    def prefill(self, tokens: Sequence[int]) -> int:
        """Make the cache hold exactly `tokens`, read as a prompt (prompt_passes); how many cached cells were reused."""
        keep = self.reusable_prefix(0, common_prefix(list(tokens), self.kv_tokens), len(tokens))
        keep = self.forget(0, keep)
        self._read(tokens, keep)
        return keep

    def _read(self, tokens: Sequence[int], start: int) -> None:
        """Decode tokens[start:] in the passes prompt_passes cuts, asking no logits."""
        begin = start
        while begin < len(tokens):
            stop = prompt_passes.next_pass_end(begin, len(tokens), self.n_batch)
            self.decode(tokens[begin:stop], outputs=0)
            if self.canonical_n == begin and prompt_passes.is_canonical(begin, stop, len(tokens)):
                self.mark_read(0, stop)
            begin = stop
