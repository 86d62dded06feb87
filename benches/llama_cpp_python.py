"""One batch-1 generation with llama-cpp-python, timed the way memkit's generate bench times its
own engine (crates/memkit-infer/benches/generate.rs runs this script between its own runs).

The prompt (rendered chat text, special tokens included) is read from a file and evaluated from
an empty cache; the completion is greedy, through `Llama.generate`, the token loop under
`create_completion`, until `--decode` tokens or end of generation. Prints one JSON line:
prompt and completion token counts, time to the first token (prefill and the first sample) and
the time of the remaining tokens.
"""

import argparse
import json
import sys
import time

import llama_cpp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--prompt-file", required=True, help="the rendered prompt, UTF-8")
    p.add_argument("--decode", type=int, default=64, help="most tokens to generate")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--n-batch", type=int, default=512)
    args = p.parse_args()

    # The same context as memkit's engine: n_ctx, n_batch = n_ubatch, threads for both phases,
    # and flash attention on: memkit leaves llama.cpp's default "auto", which turns it on for
    # the CPU backend, where llama-cpp-python's flash_attn=False would turn it off.
    llm = llama_cpp.Llama(
        model_path=args.model,
        n_ctx=args.n_ctx,
        n_batch=args.n_batch,
        n_ubatch=args.n_batch,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        flash_attn=True,
        verbose=False,
    )
    with open(args.prompt_file, encoding="utf-8") as f:
        prompt = f.read()
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)

    llm.reset()  # no prefix match with an earlier call: the whole prompt is evaluated
    start = time.perf_counter()
    first = None
    completion = 0
    for token in llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, reset=True):
        if first is None:
            first = time.perf_counter()
        if llama_cpp.llama_token_is_eog(llm._model.vocab, token):
            break
        completion += 1
        if completion >= args.decode:
            break
    end = time.perf_counter()
    json.dump(
        {
            "engine": f"llama-cpp-python {llama_cpp.__version__}",
            "prompt_tokens": len(tokens),
            "completion_tokens": completion,
            "prefill_s": (first or end) - start,
            "decode_s": end - (first or end),
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
