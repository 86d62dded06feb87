//! The one tracing subscriber of the process: compact events on stderr, `RUST_LOG` overrides.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber. `RUST_LOG` wins over `--quiet`/`--verbose`.
pub fn init(quiet: bool, verbose: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "warn,llama-cpp-2=error",
        (_, true) => "debug",
        // llama.cpp reports every model load in ~150 lines (and warns about quirks of
        // published GGUFs it fixes itself): errors only unless --verbose. (llama-cpp-2 logs
        // under the target `llama-cpp-2`.)
        _ => "info,llama-cpp-2=error",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .init();
}
