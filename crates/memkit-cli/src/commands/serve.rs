//! `memkit serve`: an OpenAI-compatible chat-completions server over a local GGUF model.

use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use memkit_infer::generate::{EngineOptions, LlamaEngine};
use memkit_infer::serve::{Limits, Server};

/// Serve a GGUF model over an OpenAI-compatible API: POST /v1/chat/completions (chat template
/// from the GGUF; max_tokens, temperature, top_p, seed, stop, response_format json_schema for
/// constrained JSON), GET /v1/models and GET /health. Requests take turns on the model; a
/// request over a limit gets a 400/413/429 naming it. Ctrl-C or SIGTERM stops accepting
/// connections and exits once the requests in flight are answered.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A GGUF file, an installed model's name, a published extractor or a checkpoint folder (see `memkit models list`).
    #[arg(long, short)]
    model: String,
    /// Address to listen on; keep the loopback default unless the network is trusted.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// llama.cpp threads (default: the cores available).
    #[arg(long)]
    threads: Option<usize>,
    /// KV-cache size in tokens: the longest prompt plus max_tokens.
    #[arg(long, default_value_t = 4096)]
    ctx: u32,
    /// Largest max_tokens a request may ask for.
    #[arg(long, default_value_t = Limits::default().max_tokens)]
    max_tokens: usize,
    /// Longest prompt in tokens (after the chat template).
    #[arg(long, default_value_t = Limits::default().max_prompt_tokens)]
    max_prompt_tokens: usize,
    /// Requests in the server at once, generating or queued for the model; more get 429.
    #[arg(long, default_value_t = Limits::default().max_concurrent)]
    max_concurrent: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = super::model_gguf(&args.model).with_context(|| format!("--model {}", args.model))?;
    let mut options = EngineOptions { n_ctx: args.ctx, ..EngineOptions::default() };
    if let Some(threads) = args.threads {
        options.n_threads = threads;
    }
    let engine = LlamaEngine::load(&path, options).with_context(|| format!("loading {}", path.display()))?;
    let model_id = if path.to_string_lossy() == args.model {
        path.file_stem().map_or_else(|| args.model.clone(), |s| s.to_string_lossy().into_owned())
    } else {
        args.model.clone()
    };
    let limits = Limits {
        max_tokens: args.max_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        max_concurrent: args.max_concurrent,
        max_body_bytes: args.max_body_bytes,
    };
    let server = Server::bind_with_limits(SocketAddr::new(args.host, args.port), engine, model_id.as_str(), limits)?;
    tracing::info!(model = %model_id, url = %format!("http://{}/v1", server.local_addr()), "ready");
    server.run()?;
    Ok(())
}
