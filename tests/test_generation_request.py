"""One way to read a request (issue 48): the command line, the server and the app meet the same rules, in their own words."""

from __future__ import annotations

import pytest

from localspec.catalog.models_toml import ModelRef, Pair
from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.errors import UsageError
from localspec.serve.options import ServeOptions
from localspec.session.generation_request import APP_NAMES, CLI_NAMES, SERVER_NAMES, Asked, resolve
from localspec.session.settings import Settings, SettingsError
from tests.conftest import cli
from tests.live_server import live_server

PAIR = Pair("p", "P", ModelRef(repo="o/t", file="t.gguf"), ModelRef(repo="o/d", file="d.gguf"), draft_max=6, draft_p_min=0.3)
DOORS = {"command line": CLI_NAMES, "server": SERVER_NAMES, "app": APP_NAMES}


def test_a_silent_request_gets_the_defaults_and_the_pairs_advice():
    plain = resolve(Asked(), parts=registry.PairParts.before_load(True), context=2048)
    assert plain.drafter == registry.DEFAULT and plain.config.draft_max == defaults.AUTO_DRAFT_MAX
    assert plain.config.draft_p_min == defaults.DRAFT_P_MIN and plain.config.max_tokens == 2048  # until the context is full
    assert plain.config.sampling.temperature == defaults.TEMPERATURE and plain.config.sampling.top_k == defaults.TOP_K
    model = resolve(Asked(drafter="model"), parts=registry.PairParts.before_load(True), context=2048, pair=PAIR)
    assert (model.config.draft_max, model.config.draft_p_min) == (6, 0.3)  # the pair's recommendation
    given = resolve(Asked(drafter="model", draft_max=2, draft_p_min=0.9, max_tokens=7), parts=registry.PairParts.before_load(True), context=2048, pair=PAIR)
    assert (given.config.draft_max, given.config.draft_p_min, given.config.max_tokens) == (2, 0.9, 7)
    assert resolve(Asked(max_tokens=-1), parts=registry.PairParts.before_load(True), context=300).config.max_tokens == 300  # llama.cpp's n_predict -1


def test_k_zero_is_plain_decoding_whatever_the_drafter():
    for drafter in registry.DRAFTERS:
        request = resolve(Asked(drafter=drafter, draft_max=0), parts=registry.PairParts.before_load(True), context=512)
        assert (request.drafter, request.config.draft_max) == ("none", 0)


@pytest.mark.parametrize("door", DOORS)
def test_every_door_refuses_the_same_things_naming_its_own_field(door):
    names = DOORS[door]
    refusals = {
        Asked(drafter="magic"): f"{names['drafter']} must be one of auto, model",
        Asked(drafter="tree"): f"{names['drafter']} tree needs a draft model, and none is loaded",
        Asked(draft_max=defaults.DRAFT_MAX_LIMIT + 1): f"{names['draft_max']} must be from 0 to {defaults.DRAFT_MAX_LIMIT}",
        Asked(draft_p_min=1.5): f"{names['draft_p_min']} must be from 0 to 1, not 1.5",
        Asked(max_tokens=0): f"{names['max_tokens']} must be 1 or more",
    }
    for asked, words in refusals.items():
        with pytest.raises(UsageError) as refused:
            resolve(asked, parts=registry.PairParts.before_load(False), context=512, names=names)
        assert words in str(refused.value), (door, asked)


def test_a_request_layers_over_the_servers_options():
    options = ServeOptions(drafter="ngram", draft_max=5, draft_p_min=0.2)
    standing = resolve(Asked().over(options.standing), parts=registry.PairParts.before_load(False), context=512)
    assert (standing.drafter, standing.config.draft_max, standing.config.draft_p_min) == ("ngram", 5, 0.2)
    own = resolve(Asked(drafter="none", temperature=0.7, seed=3).over(options.standing), parts=registry.PairParts.before_load(False), context=512)
    assert (own.drafter, own.config.sampling.temperature, own.config.sampling.seed) == ("none", 0.7, 3)


def test_the_apps_settings_are_checked_by_the_same_rules():
    for change, words in {"draft_max": "draft-max must be from 0 to", "draft_p_min": "draft p-min must be from 0 to 1",
                          "max_tokens": "max tokens must be 1 or more"}.items():
        with pytest.raises(SettingsError, match=words):
            Settings().with_changes(**{change: {"draft_max": 99, "draft_p_min": 2.0, "max_tokens": 0}[change]})
    request = resolve(Settings(drafter="model").asked, parts=registry.PairParts.before_load(True), context=999, pair=PAIR, names=APP_NAMES)
    assert (request.config.max_tokens, request.config.draft_max, request.config.draft_p_min) == (999, 6, 0.3)


def test_the_server_refuses_a_drafter_its_pair_cannot_run_at_start_and_per_request(tiny, tmp_path):
    started = cli("serve", "--target", str(tiny["target"]), "--drafter", "model")
    assert started.returncode == 2 and "--drafter model needs a draft model, and none is loaded" in started.stderr, started.stderr
    with live_server(tmp_path, "--target", str(tiny["target"]), "--drafter", "ngram", "--parallel", "1") as server:
        status, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                                       "max_tokens": 2, "localspec.drafter": "model"})
        assert status == 400 and "localspec.drafter model needs a draft model" in body["error"]["message"], body
        status, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200 and body["localspec"]["drafter"] == "ngram", body
        status, props = server.request("GET", "/props")  # what a silent request gets, resolved by the same rules
        assert props["default_generation_settings"]["params"] == {"speculative.n_max": defaults.DRAFT_MAX,
                                                                  "speculative.p_min": defaults.DRAFT_P_MIN, "localspec.drafter": "ngram"}
