"""Temperature 0 through the server against `generate --no-draft`, on the bench's prompts (issue 46): not a test, a check.

For each bundled prompt: the reference is `generate --no-draft` (a process of its own, fresh); then one server (the
drafter and slots given) answers the prompt fresh, again with it cached, and once more after another prompt has taken
its slot's cache; with several slots, the prompts are then sent all at once too (each shares its passes with others).
Every answer is compared with the reference, token text for text; a departure is printed with where it starts and the
target's top-2 logit gap there (from a plain run with margins): with one slot and `--drafter none` every answer must
equal it; several slots' shared passes and drafters' verify passes round differently, so their answers may depart, at
near-ties only.

Run: .venv/bin/python -m tests.tools.serve_repeat --target T.gguf [--draft D.gguf --drafter auto] [--parallel 4] [--tokens 64]
     [--only ID,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from localspec.bench.results import BenchPrompt
from localspec.bench.runner import load_prompts
from localspec.engine.chat import chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import TokenEvent
from localspec.engine.generation_config import GenerationConfig
from tests.live_server import live_server


def reference(target: Path, system: str | None, prompt: str, tokens: int) -> str:
    command = [sys.executable, "-m", "localspec", "generate", "--target", str(target), "--no-draft", "--prompt", prompt,
               "--max-tokens", str(tokens), "--json"] + (["--system", system] if system else [])
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["text"]


def plain_gaps(target: Path, prompts: list[BenchPrompt], tokens: int) -> dict[str, tuple[str, list[tuple[int, float]]]]:
    """Per prompt: the plain greedy text, and each token's end (in characters) with the target's top-2 gap there."""
    out = {}
    with Engine(EngineConfig(target)) as engine:
        for prompt in prompts:
            config = GenerationConfig(max_tokens=tokens, record_margins=True)
            events = [e for e in engine.plain.generate(chat_prompt_tokens(engine.target, prompt.messages), config)
                      if isinstance(e, TokenEvent) and e.token >= 0]
            ends, text = [], ""
            for event in events:
                text += event.text
                ends.append((len(text), float(event.margin or 0.0)))
            out[prompt.id] = (text, ends)
    return out


def gap_at(ends: list[tuple[int, float]], at: int) -> float | None:
    """The smaller top-2 gap of the token whose text holds character `at` and the one before it (None: past the plain
    run's end). The texts part at `at`, but the tokens may have parted one token earlier with the same first
    characters (" hash" against " hashes"): the choice was made there."""
    index = next((i for i, (end, _) in enumerate(ends) if end > at), None)
    return None if index is None else min(gap for _, gap in ends[max(0, index - 1) : index + 1])


def departure(a: str, b: str) -> int | None:
    """The first character where two answers differ (None: equal)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def messages(prompt: BenchPrompt) -> list[dict]:
    """The prompt's conversation (the bench's own, BenchPrompt.messages) as a request body holds it."""
    return [{"role": message.role, "content": message.content} for message in prompt.messages]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--drafter", default="none")
    parser.add_argument("--parallel", default="1")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--only", help="comma-separated prompt ids (default: every bundled prompt)")
    args = parser.parse_args()
    prompts = [p for p in load_prompts(None) if not args.only or p.id in args.only.split(",")]
    expected = {p.id: reference(args.target, p.system, p.prompt, args.tokens) for p in prompts}
    gaps = plain_gaps(args.target, prompts, args.tokens)
    for prompt in prompts:
        if gaps[prompt.id][0] != expected[prompt.id]:
            print(f"{prompt.id}: the in-process plain run differs from generate's at character "
                  f"{departure(gaps[prompt.id][0], expected[prompt.id])}: its gaps are not the reference's")
    extra = ["--draft", str(args.draft)] if args.draft else []
    equal = total = 0
    with tempfile.TemporaryDirectory() as scratch, live_server(Path(scratch), "--target", str(args.target), *extra, "--drafter",
                                                               args.drafter, "--parallel", args.parallel, "--ctx-size", "8192") as server:
        def ask(content: list[dict]) -> tuple[str, int]:
            status, body = server.request("POST", "/v1/chat/completions", {"messages": content, "max_tokens": args.tokens,
                                                                          "temperature": 0})
            assert status == 200, body
            return body["choices"][0]["message"]["content"], body["timings"]["cache_n"]

        def report(prompt: BenchPrompt, label: str, text: str, cache_n: int) -> bool:
            at = departure(text, expected[prompt.id])
            gap = None if at is None else gap_at(gaps[prompt.id][1], at)
            print(f"{prompt.id:<22} {label:<14} cache_n {cache_n:>4}  " + ("equal" if at is None else
                  f"departs at character {at}, top-2 gap there {gap if gap is None else round(gap, 4)}"))
            return at is None

        for i, prompt in enumerate(prompts):
            other = prompts[(i + 1) % len(prompts)]
            answers = [("fresh", *ask(messages(prompt))), ("cached", *ask(messages(prompt)))]
            ask([{"role": "user", "content": other.prompt}])
            answers.append(("after another", *ask(messages(prompt))))
            for label, text, cache_n in answers:
                total += 1
                equal += report(prompt, label, text, cache_n)
        if int(args.parallel) > 1:
            with ThreadPoolExecutor(int(args.parallel)) as pool:
                together = list(pool.map(lambda prompt: ask(messages(prompt)), prompts))
            for prompt, (text, cache_n) in zip(prompts, together):
                total += 1
                equal += report(prompt, "together", text, cache_n)
    print(f"\n{equal} of {total} answers equal generate --no-draft ({args.drafter}, {args.parallel} slot(s), {args.tokens} tokens)")
    return 0 if equal == total or args.drafter != "none" else 1


if __name__ == "__main__":
    sys.exit(main())
