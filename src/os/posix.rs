//! The production backend (placeholder until implemented).
