"""The default acceptance rule (specdec.acceptance_modes.requested_acceptance): a request that carries a
seed and names no mode, on a config that names none, gets coupled acceptance (its text is the seed's,
whatever the drafting and the load, and equal to speculation off); one without a seed keeps rejection.
The verify service's requests (HTTP and gRPC alike) and `specdec generate` read the same rule."""

from __future__ import annotations

import pytest

from specdec.acceptance_modes import SEEDED_DEFAULT, UNSEEDED_DEFAULT, requested_acceptance
from specdec.drafters import ModelDrafter
from specdec.enums import AcceptanceMode
from specdec.generation import SpeculativeGenerator
from specdec.serving.config import SpecdecConfig
from specdec.v1 import common_pb2, verify_pb2
from verify_service.requests import generation_request

COUPLED, REJECTION, GREEDY = AcceptanceMode.COUPLED, AcceptanceMode.REJECTION, AcceptanceMode.GREEDY
PROTO = {"rejection": common_pb2.ACCEPTANCE_MODE_REJECTION, "coupled": common_pb2.ACCEPTANCE_MODE_COUPLED}


@pytest.mark.parametrize(
    ("named", "seeded", "expected"),
    [
        (None, True, COUPLED),
        (None, False, REJECTION),
        (REJECTION, True, REJECTION),
        (COUPLED, False, COUPLED),
        (COUPLED, True, COUPLED),
        (REJECTION, False, REJECTION),
    ],
)
def test_the_rule(named, seeded, expected):
    assert requested_acceptance(named, seeded) is expected
    assert (SEEDED_DEFAULT, UNSEEDED_DEFAULT) == (COUPLED, REJECTION)


def test_the_default_config_names_no_mode_and_a_tree_config_defaults_to_coupled():
    assert SpecdecConfig().speculative.acceptance is None
    assert SpecdecConfig(speculative={"verification": "tree"}).speculative.acceptance is COUPLED
    assert SpecdecConfig(speculative={"acceptance": "rejection"}).speculative.acceptance is REJECTION


def _options(temperature: float = 1.0, seed: int | None = 3, acceptance: str | None = None) -> verify_pb2.GenerationOptions:
    options = verify_pb2.GenerationOptions(
        text="Once upon a time", sampling=common_pb2.SamplingParams(temperature=temperature), max_tokens=40, ignore_eos=True
    )
    if seed is not None:
        options.seed = seed
    if acceptance is not None:
        options.acceptance = PROTO[acceptance]
    return options


@pytest.mark.parametrize(
    ("options", "config", "expected"),
    [
        ({}, {}, COUPLED),
        ({"seed": None}, {}, REJECTION),
        ({"acceptance": "rejection"}, {}, REJECTION),  # the request names a mode
        ({"seed": None, "acceptance": "coupled"}, {}, COUPLED),
        ({}, {"acceptance": "rejection"}, REJECTION),  # the config names one
        ({"seed": None}, {"acceptance": "coupled"}, COUPLED),
        ({"acceptance": "coupled"}, {"acceptance": "rejection"}, COUPLED),  # the request's wins
        ({"temperature": 0.0}, {}, GREEDY),  # temperature 0 runs greedy whatever was asked
    ],
)
def test_verify_requests_follow_the_rule(tiny_target, options, config, expected):
    request = generation_request(_options(**options), tiny_target, SpecdecConfig(speculative=config))
    assert request.acceptance is expected and request.effective_acceptance is expected


def test_a_seeded_request_gives_the_seeds_text_whatever_the_drafting(tiny_target, tiny_draft, load_policy_decided_off):
    """Drafting every round, plain steps chosen by the load-aware policy, and no speculation: one text.
    With rejection the first differs from the last (its draws follow the draft's proposals)."""
    request = generation_request(_options(), tiny_target, SpecdecConfig())
    drafting = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model)).generate(request)
    policy_off = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model), load_policy=load_policy_decided_off()).generate(request)
    target_only = SpeculativeGenerator(tiny_target).generate(request.model_copy(update={"speculative": False}))
    assert drafting.stats.draft_tokens > 0 and policy_off.stats.draft_tokens == 0
    assert drafting.token_ids == policy_off.token_ids == target_only.token_ids
    assert len(set(target_only.token_ids)) > 5  # sampled text, not a loop of one token
