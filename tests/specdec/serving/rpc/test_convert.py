"""The request fields' table (specdec.fields) against the protos, and the torch-free conversions built on it."""

from __future__ import annotations

import pytest

from specdec.enums import AcceptanceMode, SpeculationPolicy
from specdec.errors import InvalidRequestError
from specdec.fields import ACCEPTANCE, BY_NAME, FIELDS, SPECULATION_POLICY, http_name
from specdec.serving.rpc.convert import (
    acceptance_from_proto,
    acceptance_to_proto,
    mode_number,
    policy_from_proto,
    present_values,
    set_field,
    vocab_fingerprint,
)
from specdec.v1 import common_pb2, verify_pb2


@pytest.mark.parametrize("field", FIELDS, ids=[field.name for field in FIELDS])
def test_every_row_names_a_field_of_generate_request(field):
    descriptor = verify_pb2.GenerateRequest.DESCRIPTOR
    for part in field.message.split(".") if field.message else []:
        descriptor = descriptor.fields_by_name[part].message_type
    assert field.proto_name in descriptor.fields_by_name


@pytest.mark.parametrize("mode", [ACCEPTANCE, SPECULATION_POLICY], ids=["acceptance", "policy"])
def test_every_proto_value_of_a_mode_is_a_member_and_back(mode):
    assert all(mode.enum(choice) for choice in mode.choices)
    for member in mode.enum:
        assert mode_number(mode, member) == mode_number(mode, member.value) > 0


@pytest.mark.parametrize("mode", list(AcceptanceMode))
def test_acceptance_round_trips(mode):
    assert acceptance_from_proto(acceptance_to_proto(mode)) is mode


def test_unspecified_acceptance_is_none_and_an_unspecified_policy_auto():
    assert acceptance_from_proto(common_pb2.ACCEPTANCE_MODE_UNSPECIFIED) is None
    assert policy_from_proto(verify_pb2.SPECULATION_POLICY_UNSPECIFIED) is SpeculationPolicy.AUTO
    assert policy_from_proto(verify_pb2.SPECULATION_POLICY_ALWAYS) is SpeculationPolicy.ALWAYS


def test_unknown_modes_raise_naming_the_field():
    with pytest.raises(InvalidRequestError) as caught:
        acceptance_from_proto(99)
    assert caught.value.field == "acceptance" and "unknown acceptance mode 99" in str(caught.value)
    with pytest.raises(InvalidRequestError) as caught:
        policy_from_proto(7)
    assert caught.value.field == "speculation_policy" and "unknown speculation policy 7" in str(caught.value)


def test_set_field_puts_each_kind_where_its_row_says():
    request = verify_pb2.GenerateRequest()
    set_field(request, BY_NAME["top_k"], 5)
    set_field(request, BY_NAME["logit_bias"], {3: 1.5})
    set_field(request, BY_NAME["stop"], "END")
    set_field(request, BY_NAME["acceptance"], "coupled")
    set_field(request, BY_NAME["speculation_policy"], SpeculationPolicy.ALWAYS)
    set_field(request.options, BY_NAME["seed"], 7, root="options")
    assert request.options.sampling.top_k == 5 and dict(request.options.penalties.logit_bias) == {3: 1.5}
    assert list(request.options.stop) == ["END"] and request.options.seed == 7
    assert request.options.acceptance == common_pb2.ACCEPTANCE_MODE_COUPLED
    assert request.speculation_policy == verify_pb2.SPECULATION_POLICY_ALWAYS


def test_present_values_leaves_unset_fields_out():
    assert present_values(common_pb2.SamplingParams(temperature=0.0), tuple(BY_NAME[n] for n in ("temperature", "top_p"))) == {
        "temperature": 0.0
    }


@pytest.mark.parametrize(
    ("named", "param"),
    [
        ("options.sampling.temperature", "temperature"),
        ("options.penalties.logit_bias", "logit_bias"),
        ("options.grammar", "response_format"),
        ("grammar", "response_format"),
        ("options.acceptance", "speculative.acceptance"),
        ("speculation_policy", "speculative.policy"),
        ("options.chat.messages", "messages"),
        ("prompt", "messages"),
        ("options.token_ids", "prompt"),
        ("options.chat.messages[2].role", "options.chat.messages[2].role"),  # no row: as verify named it
    ],
)
def test_verify_field_names_map_back_to_the_openai_names(named, param):
    assert http_name(named) == param


def test_vocab_fingerprint_matches_for_the_tiny_pair(tiny_target, tiny_draft):
    fingerprint = vocab_fingerprint(tiny_target.tokenizer)
    assert fingerprint == vocab_fingerprint(tiny_draft.tokenizer)
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0


def test_vocab_fingerprint_differs_for_a_foreign_tokenizer(tiny_target, foreign_tokenizer):
    assert vocab_fingerprint(foreign_tokenizer) != vocab_fingerprint(tiny_target.tokenizer)
