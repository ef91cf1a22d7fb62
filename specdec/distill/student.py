"""The student: a few decoder layers at the target's width, over a reduced vocabulary.

Initialised from the target (its first layers, final norm, and the embedding rows of the chosen
tokens), so training starts from the target's own features rather than from noise.
"""

from __future__ import annotations

import copy

import torch
from transformers import PreTrainedModel

from specdec.distill.data import TeacherSequence
from specdec.engines.reduced_vocab import ReducedVocabLlamaConfig, ReducedVocabLlamaForCausalLM


def choose_vocabulary(sequences: list[TeacherSequence], size: int, always: list[int], target_vocab_size: int) -> torch.Tensor:
    """The `size` target ids carrying the most teacher probability mass (plus `always`), sorted.

    Mass rather than counts of sampled tokens: the draft must cover what the teacher might
    say next, not only what it happened to say.
    """
    mass = torch.zeros(target_vocab_size, dtype=torch.float64)
    for sequence in sequences:
        mass.index_add_(0, sequence.top_ids.reshape(-1), sequence.top_logprobs.double().exp().reshape(-1))
    prompt_ids = torch.cat([s.prompt_ids for s in sequences]) if sequences else torch.empty(0, dtype=torch.long)
    mass.index_add_(0, prompt_ids, torch.full(prompt_ids.shape, 1e-6, dtype=torch.float64))  # break ties towards tokens users type
    mass[torch.tensor(always, dtype=torch.long)] = float("inf")
    return mass.topk(size).indices.sort().values


def coverage(sequences: list[TeacherSequence], vocabulary: torch.Tensor, target_vocab_size: int) -> float:
    """Share of the teacher's (top-k) probability mass that falls inside `vocabulary`."""
    inside = torch.zeros(target_vocab_size, dtype=torch.bool)
    inside[vocabulary] = True
    covered = total = 0.0
    for sequence in sequences:
        probs = sequence.top_logprobs.float().exp()
        covered += float((probs * inside[sequence.top_ids]).sum())
        total += float(probs.sum())
    return covered / max(total, 1e-12)


def build_student(target: PreTrainedModel, vocabulary: torch.Tensor, num_layers: int) -> ReducedVocabLlamaForCausalLM:
    """A `num_layers` student of the target over `vocabulary` ([draft_vocab] target ids)."""
    settings = target.config.to_dict()
    for key in ("architectures", "model_type", "quantization_config", "_name_or_path", "layer_types", "transformers_version", "dtype"):
        settings.pop(key, None)
    settings.update(
        vocab_size=target.get_output_embeddings().out_features,
        draft_vocab_size=len(vocabulary),
        num_hidden_layers=num_layers,
        tie_word_embeddings=True,
    )
    config = ReducedVocabLlamaConfig(**settings)
    student = ReducedVocabLlamaForCausalLM(config)
    student.set_vocabulary(vocabulary)
    _copy_from_target(student, target, vocabulary)
    return student


@torch.no_grad()
def _copy_from_target(student: ReducedVocabLlamaForCausalLM, target: PreTrainedModel, vocabulary: torch.Tensor) -> None:
    target_embeddings = target.get_input_embeddings().weight.float()
    rows = torch.cat([target_embeddings[vocabulary], target_embeddings.mean(0, keepdim=True)])  # + the unknown row
    student.get_input_embeddings().weight.copy_(rows)
    student_decoder, target_decoder = student.get_decoder(), target.get_decoder()
    for student_layer, target_layer in zip(student_decoder.layers, target_decoder.layers, strict=False):
        student_layer.load_state_dict(copy.deepcopy(target_layer.state_dict()))
    student_decoder.norm.load_state_dict(target_decoder.norm.state_dict())
