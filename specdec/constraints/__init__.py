"""Structured outputs: grammars that constrain what the target may generate (docs/structured-outputs.md).

- `grammars`: OpenAI `response_format` (and extensions) or a JSON schema -> an llguidance grammar
  string, checked, errors naming the request field. Torch-free: the gateway uses it.
- `masking`: pure tensor functions that turn an allowed-token mask into masked logits.
- `matcher`: `GrammarConstraint`, one request's grammar over one vocabulary, asked for the tokens
  allowed after any sequence or at every position of a candidate block.
"""
