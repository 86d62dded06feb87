//! Metrics, runners and reports (in progress).
