"""What the services and the gateway share: configuration, metrics, telemetry and the gRPC plumbing.

Nothing here imports torch at import time (the gateway loads this package) or the services themselves."""
