"""`localspec generate`: answer one prompt, streaming the text, then the statistics (or one JSON object)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from localspec.cli.answer_format import answer_format
from localspec.cli.pair_args import engine_config_from_args, memory_plan_from_args, resolve_models
from localspec.engine.chat import Message, chat_prompt_tokens, message_dicts, raw_prompt_tokens, with_system
from localspec.engine.drafters import registry
from localspec.engine.drafters.auto.choice import Source
from localspec.engine.engine import Engine
from localspec.engine.errors import EngineError
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.stats import GenerationStats
from localspec.machine.device import device_record
from localspec.session import plain_speed
from localspec.session.generation_request import Asked, refuse_unconstrained, resolve
from localspec.session.plain_rate import plain_rate_for, speedup, updated_plain_ms


def run_generate(args: argparse.Namespace) -> int:
    pair = resolve_models(args)
    held_to = answer_format(args.json_schema, args.grammar)
    asked = Asked(drafter=registry.PLAIN if args.no_draft else args.drafter, draft_max=0 if args.no_draft else args.draft_max,
                  draft_p_min=args.draft_p_min, max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                  top_p=args.top_p, min_p=args.min_p, seed=args.seed, verification=args.verification, stop=tuple(args.stop))
    parts = registry.PairParts.before_load(args.draft is not None)
    request = resolve(asked, parts=parts, context=args.ctx_size, pair=pair)  # said before anything loads
    if held_to is not None:
        refuse_unconstrained(request.drafter)  # before the load too: the grammar itself is made on the target's vocabulary
    plan = memory_plan_from_args(args, with_draft=not args.no_draft)
    for warning in plan.warnings:
        print(f"localspec: warning: {warning}", file=sys.stderr)
    with Engine(engine_config_from_args(args, with_draft=not args.no_draft, plan=plan)) as engine:
        device = device_record(engine) | {"plan": plan.to_dict()}
        if engine.drafting_note and registry.spec(request.drafter).drafts:
            print(f"localspec: note: {engine.drafting_note}", file=sys.stderr)
        if held_to is not None:
            request = resolve(replace(asked, grammar=held_to.grammar_for(engine.target)), parts=parts, context=args.ctx_size, pair=pair)
        if args.raw:
            prompt = raw_prompt_tokens(engine.target, args.prompt)
        else:
            messages = with_system(args.system, [Message("user", args.prompt)])
            prompt = chat_prompt_tokens(engine.target, messages)
            request = replace(request, config=replace(request.config, conversation=tuple(message_dicts(messages))))
        pieces: list[str] = []
        tokens: list[int] = []
        finished: Finished | None = None
        decoder = engine.decoder(request.drafter)  # before the answer: a drafter these models cannot run is the user's to change
        try:
            for event in decoder.generate(prompt, request.config):
                if isinstance(event, TokenEvent):
                    pieces.append(event.text)
                    if event.token >= 0:
                        tokens.append(event.token)
                    if not args.json:
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                else:
                    finished = event
        except KeyboardInterrupt:  # Ctrl-C: keep what was printed, say it stopped
            print("\n[stopped]", file=sys.stderr)
            return 130
        except EngineError as exc:  # mid-answer (an RPC server lost): what was written stays, then why it ends
            if args.json:
                print(json.dumps({"text": "".join(pieces), "tokens": tokens, "error": str(exc), "device": device}, ensure_ascii=False))
            else:
                sys.stdout.write("\n")
                print(f"localspec: {exc}", file=sys.stderr)
            return 1
        assert finished is not None
        speed = plain_speed.remember_answer(engine.target, finished.stats)
        # The baseline as the app and the server keep it: the plain step auto measured here before, moved by this answer's
        # own one-token passes (0.0: neither, and no "× plain" is claimed)
        plain_ms = updated_plain_ms(engine.known_plain_ms() or 0.0, finished.stats)
    stats = finished.stats
    if speed is not None and speed.slowed:
        print(f"localspec: warning: {speed.note()}", file=sys.stderr)
    if args.json:
        payload = {"text": "".join(pieces), "tokens": tokens, "stop_reason": finished.reason.value, "stats": stats.to_dict(),
                   "plain_ms_per_token": plain_ms or None, "plain_per_second": plain_rate_for(stats, plain_ms),
                   "speedup": speedup(stats, plain_ms), "device": device}
        if finished.message:
            payload["message"] = finished.message
        print(json.dumps(payload, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        if finished.message:
            print(f"localspec: {finished.message}", file=sys.stderr)
        print(_summary(stats, plain_ms), file=sys.stderr)
    return 0


def _summary(stats: GenerationStats, plain_ms: float) -> str:
    """What ran and how it went; under auto, a line with what it chose (stats.by_source); under a grammar, a line with
    what it forced and what its masks cost."""
    parts = [_drafter_named(stats), f"{stats.predicted_n} tokens", f"{stats.predicted_per_second:.1f} tok/s"]
    times = speedup(stats, plain_ms)
    if stats.draft_n and times is not None:  # with nothing drafted it was plain decoding: the ratio would be noise
        parts.append(f"{times:.2f}× plain")
    if stats.draft_n:
        parts.append(f"accepted {stats.draft_n_accepted}/{stats.draft_n} ({100 * stats.acceptance_rate:.1f}%)")
        parts.append(f"{stats.tokens_per_step:.2f} tok/pass")
    parts.append(f"prompt {stats.prompt_n} tokens in {stats.prompt_ms:.0f} ms")
    lines = ["[" + " · ".join(parts) + "]"]
    if stats.drafter == registry.ADAPTIVE:
        lines.append(_auto_choices(stats))
    if stats.grammar_rows:
        lines.append(_grammar_share(stats, plain_ms))
    return "\n".join(lines)


def _drafter_named(stats: GenerationStats) -> str:
    if not registry.spec(stats.drafter).drafts or stats.draft_max == 0:
        return "no drafter (plain decoding)"
    if registry.Supports.CHOOSES_K in registry.spec(stats.drafter).supports:
        return f"{stats.drafter}, K up to {stats.draft_max}"
    return f"{stats.drafter} K={stats.draft_max}"


def _auto_choices(stats: GenerationStats) -> str:
    """auto's steps and their tokens by source (a grammar's forced text is not its choice: its own line says it); when it
    drafted nothing, that it decoded plainly throughout."""
    if stats.draft_n == stats.forced_n:  # nothing of its own drafted
        besides = " besides the grammar's" if stats.forced_n else ""
        return (f"[auto: plain decoding for all {stats.predicted_n - stats.forced_n_accepted} tokens{besides}: no draft it could make "
                "was expected to be faster]")
    shares = [share for share in stats.by_source if share.source is not Source.GRAMMAR]
    parts = [f"{shares[0].source.display_name} {shares[0].tokens} tokens in {shares[0].steps} steps"]
    parts += [f"{share.source.display_name} {share.tokens} in {share.steps}" for share in shares[1:]]
    if first := stats.predicted_n - sum(share.tokens for share in stats.by_source):  # the answer's first token is no step's
        parts.append(f"{first} from the prompt's pass")
    return "[auto chose: " + " · ".join(parts) + "]"


def _grammar_share(stats: GenerationStats, plain_ms: float) -> str:
    """The grammar as a source of its own: the forced tokens drafted and kept, its time per masked row, and the plain rate
    under it (the one the "× plain" divides by)."""
    forced = next((share for share in stats.by_source if share.source is Source.GRAMMAR), None)
    parts = [f"grammar {forced.tokens} tokens in {forced.steps} steps: {stats.forced_n_accepted} of {stats.forced_n} forced kept"
             if forced else "grammar: no forced text drafted"]
    parts.append(f"masks {stats.grammar_ms_per_row:.2f} ms a row ({stats.grammar_rows} rows)")
    if (plain := plain_rate_for(stats, plain_ms)) is not None:
        parts.append(f"plain under it {plain:.1f} tok/s")
    return "[" + " · ".join(parts) + "]"
