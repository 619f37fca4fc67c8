//! (being written: the step-level protocol)
