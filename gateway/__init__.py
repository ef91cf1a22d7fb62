"""The OpenAI-compatible HTTP gateway: routes, auth, admission, SSE. No weights, no tokenizer."""
