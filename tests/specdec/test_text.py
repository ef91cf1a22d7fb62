"""IncrementalDetokenizer (UTF-8 safe streaming) and StopStringMatcher (stop strings across deltas)."""

import pytest

from specdec.text import IncrementalDetokenizer, StopStringMatcher

REPLACEMENT = "\ufffd"


@pytest.fixture(scope="module")
def tokenizer(tiny_target):
    return tiny_target.tokenizer


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _stream(tokenizer, token_ids):
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push(token_id) for token_id in token_ids]
    return deltas, detokenizer.flush()


def _splits_a_character(tokenizer, token_ids):
    """True when some token boundary falls inside a multi-byte character."""
    return any(tokenizer.decode(token_ids[:end]).endswith(REPLACEMENT) for end in range(1, len(token_ids)))


# --- IncrementalDetokenizer ---------------------------------------------------------------


@pytest.mark.parametrize("text", ["héllo 世界 🙂 naïve café", "Ωμέγα ∑ 🚀🚀 日本語"])
def test_streamed_text_equals_full_decode_without_replacement_chars(tokenizer, text):
    token_ids = _encode(tokenizer, text)
    # Byte-level BPE must split at least one character across tokens, or hold-back is untested.
    assert _splits_a_character(tokenizer, token_ids)
    deltas, tail = _stream(tokenizer, token_ids)
    assert "".join(deltas) + tail == tokenizer.decode(token_ids) == text
    assert not any(REPLACEMENT in delta for delta in deltas), deltas
    assert tail == ""


def test_incomplete_character_is_held_until_the_token_that_completes_it(tokenizer):
    token_ids = _encode(tokenizer, "世")
    assert len(token_ids) > 1
    deltas, _ = _stream(tokenizer, token_ids)
    assert deltas == [""] * (len(token_ids) - 1) + ["世"]


def test_ascii_tokens_are_emitted_immediately(tokenizer):
    token_ids = _encode(tokenizer, "The quick brown fox jumps over the lazy dog.")
    deltas, tail = _stream(tokenizer, token_ids)
    assert deltas == [tokenizer.decode([token_id]) for token_id in token_ids]
    assert all(deltas) and tail == ""


def test_flush_releases_bytes_that_never_complete_a_character(tokenizer):
    token_ids = _encode(tokenizer, "ok 🙂")[:-1]  # cut inside the emoji's four bytes
    deltas, tail = _stream(tokenizer, token_ids)
    assert not any(REPLACEMENT in delta for delta in deltas)
    assert REPLACEMENT in tail
    assert "".join(deltas) + tail == tokenizer.decode(token_ids)


def test_special_tokens_produce_no_text(tokenizer):
    token_ids = [tokenizer.convert_tokens_to_ids("<|im_start|>"), *_encode(tokenizer, "hi"), tokenizer.eos_token_id]
    deltas, tail = _stream(tokenizer, token_ids)
    assert "".join(deltas) + tail == "hi"


# --- StopStringMatcher --------------------------------------------------------------------


def _push_all(matcher, pieces):
    return [matcher.push(piece) for piece in pieces]


def test_stop_string_split_across_pushes_is_detected_and_not_emitted():
    matcher = StopStringMatcher(["</end>"])
    assert matcher.push("Hello </") == "Hello "
    assert not matcher.stopped
    assert matcher.push("en") == ""
    assert not matcher.stopped
    assert matcher.push("d> and more") == ""
    assert matcher.stopped


def test_stop_string_inside_one_push_emits_only_the_text_before_it():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.push("abc STOP xyz") == "abc "
    assert matcher.stopped


def test_partial_match_is_held_then_released_when_it_diverges():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.push("go ST") == "go "
    assert matcher.push("O") == ""
    assert matcher.push("Rm") == "STORm"
    assert not matcher.stopped


def test_overlapping_partial_match_keeps_only_the_live_suffix():
    matcher = StopStringMatcher(["ab"])
    assert _push_all(matcher, ["a", "a", "b"]) == ["", "a", ""]
    assert matcher.stopped


def test_flush_releases_held_text():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.push("the end ST") == "the end "
    assert matcher.flush() == "ST"
    assert matcher.flush() == ""
    assert not matcher.stopped


@pytest.mark.parametrize("stop", [["world", "lo"], ["lo", "world"]])
def test_earliest_stop_string_wins_regardless_of_list_order(stop):
    matcher = StopStringMatcher(stop)
    assert "".join(_push_all(matcher, ["hel", "lo world"])) == "hel"
    assert matcher.stopped


def test_earliest_start_wins_when_two_stop_strings_complete_together():
    matcher = StopStringMatcher(["cd", "bcde"])
    assert matcher.push("abcdef") == "a"
    assert matcher.stopped


@pytest.mark.parametrize("stop", [[], [""]])
def test_no_stop_strings_pass_everything_through(stop):
    matcher = StopStringMatcher(stop)
    pieces = ["abc", "</", "STOP", ""]
    assert _push_all(matcher, pieces) == pieces
    assert matcher.flush() == ""
    assert not matcher.stopped
