//! Local inference (in progress).
