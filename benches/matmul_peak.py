"""torch's f32 matmul throughput on this machine at the shapes of a SmolLM2-135M training step
(rows: the tokens of a micro-batch of the student's recipe, 4 examples of ~413 tokens), with the
threads torch picks: the ceiling of SFT tokens/s (benches/README.md, "The student's recipe").

    ~/.cache/memkit/venv/bin/python benches/matmul_peak.py
"""

import time

import torch

torch.manual_seed(0)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for m, k, n in [(1652, 576, 1536), (1652, 1536, 576), (1652, 576, 576), (2048, 576, 1536), (4096, 576, 1536)]:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    repeats = 40
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    seconds = (time.perf_counter() - start) / repeats
    print(f"{m} x {k} x {n}: {2 * m * k * n / seconds / 1e9:.1f} GFLOP/s")
