"""Fill-in-the-middle prompts, built from the model's own FIM tokens as llama.cpp's server builds them.

Autocomplete sends the text before and after the cursor (and, for repository-level
completion, chunks of other files). The prompt is `[extra] <PRE> prefix <SUF>
suffix <MID>`, with the extra context as `<REP>myproject\\n` and `<SEP>filename\\n`
chunks where the vocabulary has those tokens; the header and the closing `<SEP>filename\\n` come with or without
chunks, as llama.cpp's server adds them (a prompt without them completed differently). A long prefix keeps its end and a
long suffix its start, three to one, within half the context.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.llama.model import Model
from localspec.errors import LocalspecError


class FimUnsupportedError(LocalspecError):
    """The model's vocabulary has no fill-in-the-middle tokens."""


def _tokens(model: Model, text: str) -> list[int]:
    return model.vocab.tokenize(text, add_special=False, parse_special=False) if text else []


def fim_prompt(model: Model, prefix: str, suffix: str, extra: Sequence[tuple[str, str]] = (), prompt: str = "",
               n_ctx: int | None = None) -> list[int]:
    """The prompt that makes the model write what goes between `prefix` (+ `prompt`, the current line) and `suffix`,
    within `n_ctx`, the context one request may fill (a slot's share when slots share the model; default: all of it)."""
    n_ctx = n_ctx or model.n_ctx
    fim = model.vocab.fim_tokens()
    if not {"pre", "suf", "mid"} <= fim.keys():
        raise FimUnsupportedError(
            f"{model.path.name} has no fill-in-the-middle tokens, so it cannot complete between a prefix and a suffix. "
            "Use a code model trained for it (Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder...)."
        )
    budget = n_ctx // 2
    prompt_tokens = _tokens(model, prompt)
    prefix_tokens = _tokens(model, prefix)[-(3 * budget // 4) :] if 3 * budget // 4 else []
    suffix_room = max(0, budget // 4 - 2 - len(prompt_tokens))
    suffix_tokens = _tokens(model, suffix)[:suffix_room]
    context: list[int] = []  # the repository and file header, with or without other files' chunks, as llama.cpp always adds
    if "rep" in fim:
        context += [fim["rep"], *_tokens(model, "myproject\n")]
    for filename, text in extra:
        if "sep" in fim:
            context += [fim["sep"], *_tokens(model, f"{filename or 'tmp'}\n")]
        context += _tokens(model, text)
    if "sep" in fim:
        context += [fim["sep"], *_tokens(model, "filename\n")]
    context = context[-(n_ctx // 4) :]  # the extra context yields first: the cursor's own file matters most
    bos = [model.vocab.bos] if model.vocab.add_bos and model.vocab.bos >= 0 else []
    return [*context, *bos, fim["pre"], *prefix_tokens, *prompt_tokens, fim["suf"], *suffix_tokens, fim["mid"]]
