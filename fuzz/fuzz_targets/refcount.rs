#![no_main]
//! Fuzz target `refcount`: the fuzzer's bytes decoded into a sequence of user
//! operations (create, share, attach, drop a handle, release, write, kill, respawn,
//! sweep, switch strategy, recycle, each possibly with its process killed inside; see
//! `Op::decode` in `shmrc-model`), run on the real protocol over the simulated kernel
//! and on the oracle through the same harness as the model-based tests
//! (`shmrc_testkit::model_harness`). Any disagreement, or P1–P5 broken after any step or after
//! the final kill-all and sweep, panics with the property and the operation list.
//!
//! Input: one byte of initial strategy settings (bit p: process p starts with
//! file_system), then the operations (`harness::decode_input`).
//! Seeds: `fuzz/seeds/refcount/` (written by `tests/model_based.rs`).

use shmrc_testkit::model_harness as harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (strategies, ops) = harness::decode_input(data);
    if let Err(failure) = harness::Harness::with_strategies(0, &strategies).run_all(&ops) {
        panic!("{failure}");
    }
});
