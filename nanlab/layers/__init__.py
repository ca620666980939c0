"""Layer-level tools that work on any model.

- ``half_matmul``  fp16 matrix products on a CPU, computed the way a GPU computes them
- ``fp32_region``  a flag for code run in fp32 on purpose, which fp16 emulations respect
- ``norms``        the normalisation layers of any model and the field holding their eps
- ``fake_fp8``     FP8 matmuls in fake quant (scale, cast to float8, cast back): delayed
                   or current scaling, per tensor or per row
- ``moe``          a small top-k mixture-of-experts MLP: its router, z-loss and load
"""
