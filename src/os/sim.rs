//! The simulated kernel (placeholder until implemented).
