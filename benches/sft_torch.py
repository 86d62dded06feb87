"""SFT throughput of PyTorch + Hugging Face transformers: the peer of memkit's burn trainer.

Run by `just bench-train` (crates/memkit-train/examples/sft_bench.rs), which writes the model
config, runs burn's step, then this script with the same shape, and prints the ratio. One
training step = forward, causal-LM cross-entropy over every position, backward, AdamW; random
weights and random token ids (throughput does not depend on them). Prints one JSON line, with
the first step's loss and the process's peak RSS.

    python benches/sft_torch.py --config cfg.json --batch 4 --seq 256 --steps 3 --warmup 1
"""

import argparse
import json
import resource
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="a Hugging Face config.json")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (timed to torch.cuda.synchronize)")
    p.add_argument("--checkpointing", action="store_true", help="gradient checkpointing (less memory, more time)")
    p.add_argument(
        "--pack",
        type=int,
        default=0,
        help="pack examples of this many tokens into each row: position_ids restart per example and a 4-D "
        "block-diagonal causal mask keeps attention within it (SDPA then reads a dense mask)",
    )
    a = p.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = AutoConfig.for_model(**json.load(open(a.config)))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(a.device)
    model.train()
    if a.checkpointing:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(0, config.vocab_size, (a.batch, a.seq)).to(a.device)
    extra = {}
    if a.pack:
        pos = torch.arange(a.seq)
        segment = pos // a.pack
        # True where query i may attend key j: the same example, j <= i ([batch, 1, seq, seq]).
        allowed = (segment[:, None] == segment[None, :]) & (pos[None, :] <= pos[:, None])
        extra = {
            "position_ids": (pos % a.pack).expand(a.batch, -1).to(a.device),
            "attention_mask": allowed.expand(a.batch, 1, -1, -1).to(a.device),
        }
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)

    times, phases = [], [0.0, 0.0, 0.0]
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids, **extra).loss
        if step == 0:
            first_loss = loss.item()
        sync()
        forward = time.perf_counter()
        loss.backward()
        sync()
        backward = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        end = time.perf_counter()
        if step >= a.warmup:
            times.append(end - start)
            for i, (t0, t1) in enumerate([(start, forward), (forward, backward), (backward, end)]):
                phases[i] += (t1 - t0) / a.steps
    tokens = a.batch * a.seq * len(times)
    print(
        json.dumps(
            {
                "engine": f"PyTorch {torch.__version__} + transformers {transformers.__version__}",
                "attention": model.config._attn_implementation,
                "threads": torch.get_num_threads(),
                "device": a.device,
                "tokens_per_s": tokens / sum(times),
                "step_s": dict(zip(["forward", "backward", "optimizer"], phases)),
                "loss": float(first_loss),
                # Linux reports ru_maxrss in KiB.
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
