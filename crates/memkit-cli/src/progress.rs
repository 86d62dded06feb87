//! Progress bars for long work (indicatif lives here only).

use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Hands out progress bars, or hidden ones when bars are turned off or stderr is not a terminal.
pub struct Bars {
    multi: MultiProgress,
    enabled: bool,
}

impl Bars {
    pub fn new(enabled: bool) -> Self {
        let multi = MultiProgress::new();
        if !enabled {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        Bars { multi, enabled }
    }

    /// Whether bars are drawn (for libraries that draw their own, such as hf-hub).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A bar with position, rate and ETA for `len` units of `what`.
    pub fn bar(&self, len: u64, what: &str) -> ProgressBar {
        if !self.enabled {
            return ProgressBar::hidden();
        }
        let style = ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} {msg} ({per_sec}, ETA {eta})")
            .expect("static template")
            .progress_chars("=> ");
        let bar = self.multi.add(ProgressBar::new(len)).with_style(style).with_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        bar
    }
}

impl Bars {
    /// A byte-counting bar with throughput and ETA.
    pub fn bytes_bar(&self, total: u64, what: &str) -> ProgressBar {
        if !self.enabled {
            return ProgressBar::hidden();
        }
        let style = ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, ETA {eta})")
            .expect("static template")
            .progress_chars("=> ");
        self.multi.add(ProgressBar::new(total)).with_style(style).with_prefix(what.to_string())
    }
}

/// Implements the eval runner's `Reporter` with one bar per stage.
pub struct StageReporter<'a> {
    bars: &'a Bars,
    current: std::sync::Mutex<Option<ProgressBar>>,
}

impl<'a> StageReporter<'a> {
    pub fn new(bars: &'a Bars) -> Self {
        StageReporter { bars, current: std::sync::Mutex::new(None) }
    }

    fn with_bar(&self, f: impl FnOnce(&mut Option<ProgressBar>)) {
        // A poisoned lock only means another thread panicked mid-update; the bar is still usable.
        let mut guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard);
    }
}

impl memkit_eval::runner::Reporter for StageReporter<'_> {
    fn start(&self, stage: &str, total: u64) {
        let bar = self.bars.bar(total, stage);
        self.with_bar(|b| *b = Some(bar));
    }
    fn advance(&self, n: u64) {
        self.with_bar(|b| {
            if let Some(bar) = b {
                bar.inc(n);
            }
        });
    }
    fn finish(&self) {
        self.with_bar(|b| {
            if let Some(bar) = b.take() {
                bar.finish_and_clear();
            }
        });
    }
}
