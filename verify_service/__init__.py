"""The target-verify service: a thin gRPC transport over specdec's TargetSession and generator."""
