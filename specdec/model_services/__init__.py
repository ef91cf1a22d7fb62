"""What the draft and verify services share that needs torch: proto -> the core's tensor-holding types
(blocks.py) and CUDA memory gauges (device_metrics.py). specdec/serving, which the gateway loads too,
stays torch-free; the gateway never imports this package."""
