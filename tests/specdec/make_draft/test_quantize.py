"""llama.cpp's quantizer log: its per-tensor lines drive the progress bar, its error lines the message."""

from __future__ import annotations

import io

from tqdm import tqdm

from specdec.make_draft.quantize import LlamaLog, _follow_tensor_lines

INFO, ERROR, CONT = 2, 4, 5


def test_tensor_lines_move_the_bar_to_the_tensor_being_written():
    with tqdm(file=io.StringIO(), disable=False) as bar:
        log = LlamaLog(_follow_tensor_lines(bar))
        log(INFO, b"llama_model_loader: loaded meta data with 30 key-value pairs\n", None)
        assert bar.n == 0
        log(INFO, b"[   1/  39]                    token_embd.weight - [   64,   512,     1,     1], type =    f32, ", None)
        log(CONT, b"converting to q8_0 .. size =     0.12 MiB ->     0.03 MiB\n", None)
        log(INFO, b"[  12/  39]              blk.1.attn_q.weight - [   64,    64,     1,     1], type =    f32, ", None)
        assert (bar.n, bar.total) == (12, 39)
    assert log.error_text == []


def test_the_reason_is_the_error_lines_without_function_prefixes():
    log = LlamaLog()
    log(INFO, b"llama_model_loader: loaded meta data\n", None)
    log(ERROR, b"gguf_init_from_reader: invalid magic characters: 'abcd', expected 'GGUF'\n", None)
    log(ERROR, b"llama_model_quantize: failed to quantize: ", None)
    log(CONT, b"llama_model_loader: failed to load model from x.gguf\n", None)
    assert log.reason() == "invalid magic characters: 'abcd', expected 'GGUF'; failed to load model from x.gguf"
    assert LlamaLog().reason() == "no reason given"
