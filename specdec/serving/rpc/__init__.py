"""What the draft and verify services share: proto <-> core conversions and gRPC server scaffolding."""
