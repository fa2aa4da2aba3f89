"""The per-op time model of one rank (issue 10 item 1): GEMMs by shape on an efficiency curve (gemm.py),
attention kernels and memory-bound ops (kernels.py), collectives with latency and bandwidth terms and the overlap
rule of each (comm_time.py), the per-GPU-generation constants and where each comes from (constants.py), and the
step assembled from them (step.py). Pure: no torch, no I/O."""
