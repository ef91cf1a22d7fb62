"""Token provenance in the core loop: every emitted token says whether the target chose it or which
drafter proposed it, and its text; the sources agree with what each round verified."""

from __future__ import annotations

import pytest
import torch

from specdec.acceptance import RoundVerdict
from specdec.drafters import DraftBlock, ModelDrafter, NgramDrafter
from specdec.drafters.base import CommittedSequence
from specdec.drafters.overlap import OverlappedDraftSession
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.enums import TokenSource
from specdec.generation import SpeculativeGenerator
from specdec.output import OutputTracker
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams
from specdec.target_session import round_sources

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
GREEDY = SamplingParams(temperature=0)
DRAFT, LOOKUP, TARGET = TokenSource.DRAFT, TokenSource.LOOKUP, TokenSource.TARGET


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


def _chunks(target, drafter, prompt_ids, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, **{"max_tokens": 60, "ignore_eos": True, "sampling": GREEDY, **fields})
    return list(SpeculativeGenerator(target, drafter).stream(request))


def _check_consistent(chunks) -> list[TokenSource]:
    """Each chunk: one source and one text per token, texts joining to its text, and as many
    drafted tokens as the round accepted (a round's last token is the target's)."""
    sources = []
    for chunk in chunks:
        assert len(chunk.sources) == len(chunk.token_ids) == len(chunk.token_texts)
        assert "".join(chunk.token_texts) == chunk.text
        drafted = [source for source in chunk.sources if source is not TARGET]
        assert chunk.sources[: len(drafted)] == drafted  # accepted candidates first, then the target's token
        if chunk.finish_reason is None:
            assert len(drafted) == chunk.round.num_accepted and chunk.sources[-1] is TARGET
        sources.extend(chunk.sources)
    return sources


def test_lookup_then_model_reports_all_three_sources(tiny_target, tiny_draft, prompt_ids):
    drafter = PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1))
    sources = _check_consistent(_chunks(tiny_target, drafter, prompt_ids, num_draft_tokens=4))
    assert {DRAFT, LOOKUP, TARGET} <= set(sources), sources


def test_the_model_drafter_alone_never_reports_lookup(tiny_target, tiny_draft, prompt_ids):
    sources = _check_consistent(_chunks(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, num_draft_tokens=4))
    assert set(sources) == {DRAFT, TARGET}


def test_ngram_drafter_tokens_are_lookups(tiny_target, prompt_ids):
    sources = _check_consistent(_chunks(tiny_target, NgramDrafter(), prompt_ids, num_draft_tokens=4))
    assert LOOKUP in sources and DRAFT not in sources


def test_without_speculation_every_token_is_the_targets(tiny_target, tiny_draft, prompt_ids):
    chunks = _chunks(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, speculative=False)
    assert set(_check_consistent(chunks)) == {TARGET} and all(len(chunk.token_ids) == 1 for chunk in chunks)


def test_a_round_cut_by_max_tokens_keeps_the_sources_of_the_kept_tokens(tiny_target, prompt_ids):
    chunks = _chunks(tiny_target, NgramDrafter(), prompt_ids, num_draft_tokens=8, max_tokens=3)
    _check_consistent(chunks)
    assert sum(len(chunk.token_ids) for chunk in chunks) == 3


def test_round_sources_follow_a_chain_and_a_tree_path():
    chain = DraftBlock(torch.tensor([4, 5, 6]), sources=(LOOKUP, LOOKUP, DRAFT))
    assert round_sources(chain, RoundVerdict([4, 5], 9, 3)) == [LOOKUP, LOOKUP, TARGET]
    assert round_sources(chain, RoundVerdict([], 9, 3)) == [TARGET]
    assert round_sources(DraftBlock(torch.tensor([4, 5])), RoundVerdict([4, 5], 9, 2)) == [DRAFT, DRAFT, TARGET]  # unlabelled: a model's
    tree = DraftBlock(torch.tensor([4, 5, 6]), tree_parents=[-1, -1, 1], sources=(DRAFT, LOOKUP, LOOKUP))
    assert round_sources(tree, RoundVerdict([5, 6], 9, 3, accepted_nodes=[1, 2])) == [LOOKUP, LOOKUP, TARGET]


class AlternatingSession:
    """A scripted drafter session: candidate = (sum of the sequence) mod 97, labelled a lookup when
    even and a draft model's when odd, as prompt lookup in front of a model mixes them."""

    def __init__(self, prompt: list[int]) -> None:
        self.committed = CommittedSequence(list(prompt))

    def propose(self, num_tokens: int) -> DraftBlock:
        sequence, candidates = list(self.committed.token_ids), []
        for _ in range(num_tokens):
            candidates.append(sum(sequence) % 97)
            sequence.append(candidates[-1])
        block = DraftBlock(torch.tensor(candidates, dtype=torch.long), sources=tuple(LOOKUP if c % 2 == 0 else DRAFT for c in candidates))
        self.committed.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids, accepted_nodes=None) -> None:
        self.committed.apply_feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        pass


def test_a_block_drafted_ahead_token_by_token_keeps_each_tokens_source():
    session = OverlappedDraftSession(AlternatingSession([3, 4]))
    block = session.propose(3).candidate_ids.tolist()
    session.draft_ahead()
    session.feedback(3, [sum([3, 4, *block]) % 97])  # the guessed bonus: the pre-draft is used
    ahead = session.propose(6)  # 3 drafted ahead, 3 more drafted on: joined from 4 parts
    plain = AlternatingSession([3, 4])
    plain.propose(3)
    plain.feedback(3, [sum([3, 4, *block]) % 97])
    expected = plain.propose(6)
    assert session.report.outcome == "used" and ahead.candidate_ids.tolist() == expected.candidate_ids.tolist()
    assert ahead.sources == expected.sources and {LOOKUP, DRAFT} <= set(ahead.sources)


def test_text_released_at_the_end_is_attributed_to_the_last_token(tiny_target):
    tokenizer = tiny_target.tokenizer
    ids = tokenizer("hello there friend")["input_ids"]
    request = GenerationRequest(prompt_ids=[1], max_tokens=len(ids), stop=["friend!"], ignore_eos=True)
    tracker = OutputTracker(tiny_target, request)
    chunk = tracker.push(ids)
    assert chunk.finish_reason == "length"
    # "friend" could start the stop string: held back until the end, then released with the last token
    assert chunk.text == tokenizer.decode(ids) and "".join(chunk.token_texts) == chunk.text
    assert chunk.token_texts[-1].endswith("friend")


def test_text_held_back_past_a_round_is_released_by_a_later_token(tiny_target):
    tokenizer = tiny_target.tokenizer
    ids = tokenizer("go STORm")["input_ids"]
    request = GenerationRequest(prompt_ids=[1], max_tokens=64, stop=["STOP"], ignore_eos=True)
    tracker = OutputTracker(tiny_target, request)
    chunks = [tracker.push([token_id]) for token_id in ids]
    assert "".join(chunk.text for chunk in chunks) == "go STORm"
    assert all("".join(chunk.token_texts) == chunk.text for chunk in chunks)
    assert any(chunk.token_ids and chunk.text == "" for chunk in chunks)  # "ST..." held while it could be "STOP"
