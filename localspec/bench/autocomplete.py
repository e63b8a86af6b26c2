"""The autocomplete replay: typing through a real source file, a fill-in-the-middle request at every line.

An editor's autocomplete (llama.vim, llama.vscode, Continue's tab) sends the
text before and after the cursor each time the user pauses, and wants the rest
of the line fast. This replays that through a file: at each non-blank line a
request with the cursor after the line's indentation, and another once its
first word is typed; the prefix is everything before the cursor, the suffix
everything after the line, and the request asks for the rest of the line, as
`/infill` builds it (the same `fim_prompt` and decoders). The second request is
where lookup across requests can pay: the first one's completion may be what
follows the typed word. Each mode
replays the whole file in order, as one editor session would, so the prompt
cache and the lookup memory see what they would see in use; the modes take
turns going first from round to round, so drift falls on all alike.

Modes: plain decoding, auto, and auto without lookup across requests (its
memory of earlier requests switched off), which is what tells whether that
memory pays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from localspec.bench.progress import BenchProgress
from localspec.engine import defaults
from localspec.engine.decode import Decoder
from localspec.engine.drafters import registry
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import NewSession
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookups
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.fim import fim_prompt
from localspec.engine.generation_config import GenerationConfig
from localspec.errors import UsageError

# Two small, real source files of this project, shipped with it: the replay's input when the user gives none.
DEFAULT_FILES = ("engine/tokens.py", "engine/drafters/auto/acceptance.py")
LINE_TOKENS = 48  # the most a request may write: the rest of one line, as editors ask
MODES = ("plain", "auto", "auto, no memory")
# Progress every this many requests: each one reads the file's suffix anew, seconds a request on a CPU, and a line per
# mode left a 60-line replay silent for a quarter of an hour.
REPORT_EVERY = 10


@dataclass(frozen=True)
class LineRequest:
    file: str
    line: int  # 1-based, as an editor shows it
    typed: str  # what the user has typed of the line's text so far ("" or its first word)
    prefix: str  # everything before the cursor
    suffix: str


@dataclass
class Completion:
    mode: str
    file: str
    line: int
    typed: str
    text: str
    tokens: int
    accepted: int  # draft tokens the target accepted
    first_token_ms: float
    total_ms: float


@dataclass
class ModeSummary:
    mode: str
    requests: int
    first_token_median_ms: float
    request_median_ms: float
    request_p90_ms: float
    tokens_per_second: float
    same_as_plain: int  # completions equal to plain decoding's (greedy)
    speedup_median: float  # the median over requests of plain's time for the same request over this mode's
    completions: list[Completion] = field(default_factory=list)


def line_requests(name: str, text: str) -> list[LineRequest]:
    """Two requests per line with text, as a user typing it sends them: with the cursor after the indentation, then
    after the line's first word (its suffix unchanged), where the first request's completion may be what comes next."""
    lines = text.splitlines(keepends=True)
    requests = []
    for index, line in enumerate(lines):
        body = line.rstrip("\n")
        words = body.split()
        if not words:
            continue
        indent = body[: len(body) - len(body.lstrip())]
        before = "".join(lines[:index])
        suffix = line[len(body) :] + "".join(lines[index + 1 :])
        requests.append(LineRequest(name, index + 1, "", before + indent, suffix))
        if len(words) > 1:
            requests.append(LineRequest(name, index + 1, words[0], before + indent + words[0], suffix))
    return requests


def read_inputs(files: list[Path]) -> list[tuple[str, str]]:
    """(name, text) for each file given, else for the shipped defaults; a file that cannot be read is a usage error."""
    if not files:
        package = resources.files("localspec")
        return [(f"localspec/{name}", package.joinpath(name).read_text("utf-8")) for name in DEFAULT_FILES]
    inputs = []
    for path in files:
        try:
            inputs.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: the file cannot be read as UTF-8 text ({getattr(exc, 'strerror', None) or exc}). "
                             "Give a source file to replay.") from exc
    return inputs


def _complete(decoder: Decoder, prompt: list[int], config: GenerationConfig) -> tuple[str, int, int, float, float]:
    start = time.perf_counter()
    first, pieces, tokens, accepted = None, [], 0, 0
    for event in decoder.generate(prompt, config):
        if isinstance(event, TokenEvent):
            first = first if first is not None else time.perf_counter()
            pieces.append(event.text)
            tokens += event.token >= 0
        elif isinstance(event, Finished):
            accepted = event.stats.draft_n_accepted
    end = time.perf_counter()
    return "".join(pieces), tokens, accepted, ((first or end) - start) * 1000, (end - start) * 1000


def _decoders(engine: Engine) -> dict[str, Decoder]:
    auto = engine.decoder(registry.ADAPTIVE)
    costs = auto.drafter.measured().costs
    assert costs is not None  # auto measures its costs
    # The one difference: lookup without a memory sees each request's own text only. One cost table, measured once.
    model = ModelDrafter(engine.draft, lazy_start=True) if engine.draft is not None else None
    forgetful = AutoDrafter(costs, model, lookups=Lookups(remember=False, ends_answer=engine.target.vocab.is_eog))
    return {"plain": engine.plain, "auto": auto, "auto, no memory": Decoder(engine.target, forgetful)}


def replay(engine: Engine, requests: list[LineRequest], rounds: int, progress: BenchProgress) -> list[ModeSummary]:
    decoders = _decoders(engine)
    config = GenerationConfig(max_tokens=LINE_TOKENS, stop=("\n",), draft_max=defaults.AUTO_DRAFT_MAX)
    prompts = [fim_prompt(engine.target, r.prefix, r.suffix) for r in requests]
    done: dict[str, list[Completion]] = {mode: [] for mode in MODES}
    for round_index in range(rounds):
        order = MODES[round_index % len(MODES) :] + MODES[: round_index % len(MODES)]
        for mode in order:
            engine.target.forget(0)  # each mode's session starts cold, as an editor's first request does...
            decoders[mode].drafter.observe(NewSession())  # ...and remembers nothing of the last round's
            reported = 0
            for index, (request, prompt) in enumerate(zip(requests, prompts), 1):
                text, tokens, accepted, first_ms, total_ms = _complete(decoders[mode], prompt, config)
                done[mode].append(Completion(mode, request.file, request.line, request.typed, text, tokens, accepted, first_ms, total_ms))
                if index % REPORT_EVERY == 0 or index == len(requests):
                    this_mode = done[mode][-index:]
                    rate = sum(c.tokens for c in this_mode) / max(1e-9, sum(c.total_ms for c in this_mode) / 1000)
                    progress.measured(f"round {round_index + 1} · {mode} · {index}/{len(requests)} requests", rate, index - reported)
                    reported = index
    return [_summary(mode, done[mode], done["plain"]) for mode in MODES]


def _summary(mode: str, completions: list[Completion], plain: list[Completion]) -> ModeSummary:
    """Each mode replays the same requests in the same order, so its completions pair with plain's one for one."""
    plain_text = {(c.file, c.line, c.typed): c.text for c in plain}
    totals = sorted(c.total_ms for c in completions)
    generating_s = sum(c.total_ms - c.first_token_ms for c in completions) / 1000
    return ModeSummary(
        mode, len(completions),
        statistics.median(c.first_token_ms for c in completions),
        statistics.median(totals),
        totals[min(len(totals) - 1, int(0.9 * len(totals)))],
        sum(max(0, c.tokens - 1) for c in completions) / generating_s if generating_s > 0 else 0.0,
        sum(c.text == plain_text.get((c.file, c.line, c.typed)) for c in completions),
        # Paired, request by request: a ratio of the two medians compares different requests wherever the latencies
        # cluster (short lines against lines that read a long suffix), and one request moving across the gap swung it
        # from 1.00x to 0.87x.
        statistics.median(p.total_ms / c.total_ms for c, p in zip(completions, plain) if c.total_ms > 0),
        completions,
    )


def print_summary(summaries: list[ModeSummary], described: str) -> None:
    print(f"Autocomplete replay: {described}")
    print(f"{'mode':18s} {'requests':>8s} {'first token':>12s} {'request':>9s} {'p90':>8s} {'tok/s':>7s} {'× plain':>8s} {'same as plain':>14s}")
    for s in summaries:
        print(f"{s.mode:18s} {s.requests:8d} {s.first_token_median_ms:9.0f} ms {s.request_median_ms:6.0f} ms {s.request_p90_ms:5.0f} ms "
              f"{s.tokens_per_second:7.1f} {s.speedup_median:7.2f}× {s.same_as_plain:>7d}/{s.requests}")
    print("first token and request: medians over every request (a request is the rest of one line, up to "
          f"{LINE_TOKENS} tokens); × plain: the median over requests of plain's time for the request over the mode's; "
          "tok/s after the first token.")


def run_autocomplete(args: argparse.Namespace, engine_config: EngineConfig) -> int:
    inputs = read_inputs(args.files)
    requests = [r for name, text in inputs for r in line_requests(name, text)]
    if args.lines:
        kept = set(list(dict.fromkeys((r.file, r.line) for r in requests))[: args.lines])
        requests = [r for r in requests if (r.file, r.line) in kept]
    if not requests:
        raise UsageError("The files hold no line to complete: give a source file with some non-blank lines.")
    files = ", ".join(name for name, _ in inputs)
    lines = len({(r.file, r.line) for r in requests})
    progress = BenchProgress(args.rounds * len(MODES) * len(requests))
    progress.stage(f"{len(requests)} requests on {lines} lines of {files} (at each line's start, then after its first word) × "
                   f"{len(MODES)} modes × {args.rounds} round(s); loading the pair")
    with Engine(engine_config) as engine:
        summaries = replay(engine, requests, args.rounds, progress)
    print_summary(summaries, f"{len(requests)} requests on {lines} lines of {files}, {args.rounds} round(s)")
    if args.json_file:
        args.json_file.write_text(json.dumps([asdict(s) for s in summaries], indent=2))
        print(f"\nfull results: {args.json_file}")
    return 0
