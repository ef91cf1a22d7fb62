"""What the services and the gateway share: configuration, metrics, telemetry and the gRPC plumbing.

Nothing here imports torch or transformers (the gateway loads this package; what the model services
share that needs torch is specdec/model_services) or the services themselves."""
