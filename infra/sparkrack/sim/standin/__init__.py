"""sparkrack's engine stand-in: a test double for vLLM's GPU work in the simulated cluster.

`engine.py` runs inside the stand-in image (standard library + Ray only, so it also imports on a
host without Ray): the Ray driver and the entry point. Beside it in the image: `serve_args.py`
(the `vllm serve` flags), `api.py` (the OpenAI API and its token pacing), `metrics.py` (vllm:*
metrics), `cuda.py` (a GPU or not), `nccl.py` (the transport a rank's node would give) and
`reach.py` (whether two ranks' HCAs reach each other through the fabric).
`image.py` builds that image. Real stacks deploy the real vLLM image.
"""
