//! (being written: the op-level oracle)
