"""The search for a batch's choices: the candidates that maximise the batch's expected tokens over its expected time.

One slot at a time given the others (coordinate ascent), from plain decoding or from every slot drafting with a model
at once, then the pass filled with lookup tokens; a slot alone is a batch of one, whose one move is its best candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.engine.drafters.auto.acceptance import prefix_curves
from localspec.engine.drafters.auto.candidates import Candidates, SlotOptions, model_curve
from localspec.engine.drafters.auto.choice import PLAIN, Choice, Source
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.auto.step_price import StepPrice
from localspec.engine.tuning import ASCENT_ROUNDS, MODEL_K_MAX

MARGIN = 1 + 1e-9


def beats(rate: float, best: float) -> bool:
    """A choice replaces the best so far only by more than rounding: among equals the earlier (plainer) one stays."""
    return rate > best * MARGIN


def ascend(price: StepPrice, slots: Sequence[SlotOptions], asking: Sequence[int],
           candidates: Mapping[int, Candidates]) -> tuple[list[Choice], float]:
    """The best choices among the candidates of the slots `asking`, and their rate: each slot's best move given the
    others, in turn, until every slot's choice is its best given the others' (or ASCENT_ROUNDS rounds), from plain
    decoding or from every slot drafting at once (_together), then the pass filled with lookup tokens (_fill). Both
    joint moves need two slots that move."""
    choices = [PLAIN] * len(slots)
    best_rate = price.rate(choices, slots)
    joint = len(asking) > 1
    if joint:
        together = _together(price, slots, asking, candidates)
        together_rate = price.rate(together, slots)
        if together_rate > best_rate:
            choices, best_rate = together, together_rate
    settled = 0  # slots in a row whose choice is their best given the others': once all are, no move changes anything
    for turn in range(ASCENT_ROUNDS * len(asking)):
        if settled == len(asking):
            break
        i = asking[turn % len(asking)]
        moved = _best_move(price, choices, slots, i, candidates[i], best_rate)
        if moved is None:
            settled += 1
        else:
            choices, best_rate, settled = moved[0], moved[1], 1
    if joint:
        choices, best_rate = _fill(price, choices, slots, asking, candidates, best_rate)
    return choices, best_rate


def _best_move(price: StepPrice, choices: list[Choice], slots: Sequence[SlotOptions], i: int, found: Candidates,
               best_rate: float) -> tuple[list[Choice], float] | None:
    """Slot i's best candidate given the others' choices, where it beats `best_rate`: the new choices and their rate.
    Plain and lookup's K's add tokens to the others' pass and nothing to their drafting, so the rest of the step is
    priced once for all of them."""
    best: tuple[list[Choice], float] | None = None
    rest = list(choices)
    rest[i] = PLAIN
    rest_tokens, rest_verify = 0.0, 0
    for j, (choice, options) in enumerate(zip(choices, slots)):
        if j != i:
            rest_tokens += choice.predicted + options.forced
            rest_verify += choice.k + 1 + options.forced
    rest_ms = price.drafting_ms(rest, slots, spread=True)
    forced = slots[i].forced
    best_k, bar = None, best_rate * MARGIN  # beats(), kept for the run of K's
    targets = price.target_ms_from(rest_verify + 1 + forced, len(found.lookup))
    for k, (expected, target_ms) in enumerate(zip(found.lookup, targets)):
        rate = (rest_tokens + ((1 + expected) + forced)) / (target_ms + rest_ms)
        if rate > bar:
            best_k, best_rate, bar = k, rate, rate * MARGIN
    if best_k is not None:
        rest[i] = found.lookup_choice(best_k)
        best = rest, best_rate
    for candidate in found.drafting:
        trial = [*choices[:i], candidate, *choices[i + 1 :]]
        rate = price.rate(trial, slots)
        if beats(rate, best_rate):
            best, best_rate = (trial, rate), rate
    return best


def _together(price: StepPrice, slots: Sequence[SlotOptions], asking: Sequence[int], candidates: Mapping[int, Candidates]) -> list[Choice]:
    """The other joint move the ascent cannot make: every slot drafting with the model at once, each at the choice
    that is best for it as a step of its own. Draft passes are shared by the slots drafting that deep, so one slot's
    draft alone can lose beside the others' lookup runs where all of them drafting wins."""
    together = [PLAIN] * len(slots)
    for i in asking:
        if candidates[i].drafting:
            alone = [slots[i]]
            together[i] = max(candidates[i].drafting, key=lambda candidate: price.rate([candidate], alone))
    return together


def _fill(price: StepPrice, choices: list[Choice], slots: Sequence[SlotOptions], asking: Sequence[int],
          candidates: Mapping[int, Candidates], best_rate: float) -> tuple[list[Choice], float]:
    """The joint move the ascent cannot make: lookup tokens for several slots at once, filling the pass to a size
    that costs little more. Where passes are lumpy (a CPU's: a longer pass can cost less than a shorter one), one
    slot's few lookup tokens can lose alone and several slots' win together, so the ascent, one slot at a time from
    plain, stays plain there. The best tokens to add are each slot's next lookup token with the most expected gain (a
    run's gains fall with depth), taken in that order; each count is weighed whole."""
    gains: list[tuple[float, int]] = []  # (expected tokens gained, slot) for every lookup token a slot could add
    filling: list[int] = []
    for i in asking:
        choice = choices[i]
        if choice.source not in (Source.NONE, Source.NGRAM):
            continue  # a model's plan stands as the ascent chose it
        expected = candidates[i].lookup
        filling.append(i)
        gains += [(expected[k] - expected[k - 1], i) for k in range(choice.k + 1, len(expected))]
    if not gains:
        return choices, best_rate
    gains.sort(key=lambda gain: -gain[0])
    n_verify = sum(choice.k + 1 + options.forced for choice, options in zip(choices, slots))
    predicted = sum(choice.predicted + options.forced for choice, options in zip(choices, slots))
    step_ms = price.step_ms(choices, slots, spread=True)
    best_m, gained = 0, 0.0
    for m, (gain, _) in enumerate(gains, start=1):
        gained += gain
        rate = (predicted + gained) / (step_ms + price.costs.verify(n_verify + m) - price.costs.verify(n_verify))
        if beats(rate, best_rate):
            best_m, best_rate = m, rate
    if not best_m:
        return choices, best_rate
    ks = {i: choices[i].k for i in filling}
    for _, i in gains[:best_m]:
        ks[i] += 1
    filled = list(choices)
    for i, k in ks.items():
        filled[i] = candidates[i].lookup_choice(k)
    return filled, best_rate


def explore(price: StepPrice, exploration: ExplorationBudget, choices: list[Choice], slots: Sequence[SlotOptions],
            asking: Sequence[int], best_rate: float) -> list[Choice]:
    """Now and then, let a model draft one slot when it is losing, so that it can win back (it costs a pass to judge,
    unlike lookup): the cheapest K that would win for the slot, as a step of its own, if accepted as often as its
    target has lately been sure, once the exploration budget pays for what the try could lose in the batch: every
    drafting cost it incurs (its catch-up whole, its passes, the longer verify) if none of its tokens is accepted.
    Judged against the whole batch's rate, one slot's hoped-for draft would never win beside the others' lookup runs,
    and a draft that pays would never be learned."""
    sources = price.sources
    if not sources or any(c.model_k for c in choices):
        return choices
    exploration.accrue(price.step_ms(choices, slots))
    if exploration.spendable_ms < min(source.costs.cost(1) for source in sources):  # no try loses less than a draft pass
        return choices
    for i in asking:
        hoped = prefix_curves([slots[i].belief.confidence.hope] * MODEL_K_MAX)[0]
        alone = [slots[i]]
        own_rate = price.rate([choices[i]], alone)
        for source in sources:  # the cheapest K of the first model that would win for the slot
            expected = model_curve(slots[i], source.k_max, source)
            for k in range(1, min(slots[i].cap, source.k_max) + 1):
                if price.rate([Choice(source.source, k, 1 + hoped[k])], alone) <= own_rate:
                    continue
                trial = [*choices[:i], Choice(source.source, k, 1 + expected[k]), *choices[i + 1 :]]
                worst_tokens = sum(c.predicted + o.forced for c, o in zip(choices, slots)) - choices[i].predicted + 1  # the try's slot gets one
                worst_loss = price.step_ms(trial, slots) - worst_tokens / best_rate
                return trial if exploration.afford(worst_loss) else choices
    return choices
