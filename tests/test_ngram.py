"""Prompt lookup (ngram): which earlier occurrence it continues, and its memory of earlier requests."""

from __future__ import annotations

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import NewSession
from localspec.engine.drafters.ngram import MATCH_CAP, SEPARATOR, Lookup, LookupMemory, NgramDrafter, PromptLookup
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable
from tests.conftest import run
from tests.drafting import GPU_LIKE
from tests.lossless import assert_lossless


def test_prompt_lookup_continues_the_latest_earlier_occurrence():
    drafter = PromptLookup(n_min=2, n_max=3)
    drafter.start([5, 6, 7, 8, 1, 5, 6, 7, 9, 5, 6])
    assert drafter.lookup(3).tokens == [7, 9, 5]  # (5, 6) last seen before the end at index 6: 7, 9, 5 follow
    drafter.advance([7])
    assert drafter.lookup(2) == Lookup([9, 5], 3)  # now (5, 6, 7): its latest earlier occurrence is followed by 9
    drafter.start([1, 2, 3])
    assert drafter.lookup(4) == Lookup()  # nothing repeats yet
    with pytest.raises(ValueError):
        PromptLookup(n_min=3, n_max=2)


def test_prompt_lookup_copies_the_occurrence_that_agrees_longest():
    drafter = PromptLookup(n_min=2, n_max=2)
    drafter.start([1, 2, 3, 4, 9, 7, 3, 4, 8, 1, 2, 3, 4])
    # (3, 4) ends at 3 and at 7; the text before index 3 agrees with the end for 4 tokens, before 7 for only 2.
    assert drafter.lookup(3) == Lookup([9, 7, 3], 4)


def test_lookup_memory_finds_the_last_requests_answer_which_the_new_prompt_lacks():
    prefix, answer = list(range(100, 160)), list(range(500, 540))
    drafter = PromptLookup(memory=LookupMemory())
    drafter.start(prefix)
    drafter.advance(answer)
    drafter.start(prefix + answer[:3])  # an autocomplete after the user typed the first three tokens of the last completion
    assert drafter.lookup(8) == Lookup(answer[3:11], MATCH_CAP)  # found in the memory alone (see below)
    forgetful = PromptLookup()
    forgetful.start(prefix)
    forgetful.advance(answer)
    forgetful.start(prefix + answer[:3])
    assert forgetful.lookup(8) == Lookup()
    drafter.forget_requests()  # a new session (the bench's next prompt)
    drafter.start(prefix + answer[:3])
    assert drafter.lookup(8) == Lookup()


def test_lookup_memory_keeps_what_is_new_bounded_and_never_copies_across_texts():
    memory = LookupMemory(max_tokens=400)
    conversation = list(range(100, 200))
    memory.remember(conversation)
    memory.remember(conversation + [7, 8, 9])  # the next turn continues the last: only its tail is added, with some context
    assert memory.tokens == [SEPARATOR, *conversation, SEPARATOR, *conversation[-MATCH_CAP:], 7, 8, 9]
    memory.remember(conversation + [7, 8, 9])
    assert len(memory.tokens) == 1 + 100 + 1 + MATCH_CAP + 3  # nothing new: nothing added
    for start in range(1000, 5000, 100):
        memory.remember(list(range(start, start + 100)))
    assert len(memory.tokens) <= 400 and memory.tokens[-100:] == list(range(4900, 5000))  # the oldest half dropped
    drafter = PromptLookup(memory=LookupMemory())
    drafter.memory.remember([1, 2, 3])  # type: ignore[union-attr]
    drafter.start([9, 2, 3])
    assert drafter.lookup(4) == Lookup()  # (2, 3) ends the remembered text: nothing follows it there


def test_lookup_across_requests_is_lossless_and_drafts_the_answer_a_request_gave_before(tiny):
    config = GenerationConfig(max_tokens=60, draft_max=8, draft_p_min=0.0)
    with Engine(EngineConfig(tiny["target"])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
        for drafter in (NgramDrafter(), AutoDrafter(CostTable.given(GPU_LIKE[0]))):
            decoder = Decoder(engine.target, drafter)
            first = run(decoder, prompt, config)
            again = run(decoder, prompt, config)  # an editor sends the same request again: the answer is only in the memory
            assert_lossless(plain, first, label=drafter.name)
            assert_lossless(plain, again, label=drafter.name)
            assert again.finished.stats.draft_n_accepted >= 0.8 * len(again.tokens) > first.finished.stats.draft_n_accepted
            drafter.observe(NewSession())  # a new session (the bench's next measurement): the answer is gone from the memory
            forgotten = run(decoder, prompt, config)
            assert_lossless(plain, forgotten, label=drafter.name)
            assert forgotten.finished.stats.draft_n_accepted < 0.8 * len(forgotten.tokens), drafter.name
