//! Dataset loaders, timestamps and windowing (in progress).
