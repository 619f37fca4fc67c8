//! Test support for shmrc's checkers, in a package of its own so that the tests, the
//! fuzz targets and the benches share it without `#[path]` includes:
//! - [`model_harness`]: one user operation on the real protocol (simulated kernel) and
//!   on the oracle of `shmrc-model`, with P1–P5 checked after every step
//!   (`tests/model_based.rs` and the `refcount` fuzz target);
//! - [`attacks`]: the simulated worlds the decoder fuzz targets attack
//!   (`fuzz/fuzz_targets/`, `tests/fuzz_seeds.rs`);
//! - [`names`]: a `/dev/shm` namespace per test that leaves nothing behind;
//! - [`data`]: test data, its checksum, handles as hex, JSON fields;
//! - [`process`]: child processes with a time limit;
//! - [`users`]: throwaway unprivileged users for attack tests.
#![allow(missing_docs)]

pub mod attacks;
pub mod data;
pub mod model_harness;
pub mod names;
pub mod process;
pub mod users;
