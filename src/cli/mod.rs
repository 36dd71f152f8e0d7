//! Command handlers of the `tilegen` binary that are more than a few lines.

pub mod bundle;
pub mod gpu;
pub mod nvrtc;
