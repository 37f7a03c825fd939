"""sparkrack's engine stand-in: a test double for vLLM's GPU work in the simulated cluster.

`engine.py` runs inside the stand-in image (standard library + Ray only, so it also imports on a
host without Ray); `image.py` builds that image. Real stacks deploy the real vLLM image.
"""
