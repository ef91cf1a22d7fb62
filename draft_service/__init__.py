"""The draft service: a thin gRPC transport over a specdec drafter."""
