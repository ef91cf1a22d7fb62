"""The gRPC plumbing the services and the gateway share: request fields <-> proto (convert.py) and
server and channel scaffolding. Torch-free, as all of specdec/serving."""
