//! shmrc's benchmarks (published with their program, `shmrc-bench`): the raw-syscall [`floor`] every ratio is taken
//! against, the [`workloads`] shared by the program and the criterion benches, the
//! [`harness`] behind `shmrc bench`, the SIGKILL-to-unlink measurement
//! ([`kill_latency`]), what names another user plants in `/dev/shm` cost a victim
//! ([`planted`]), what the workloads write and check in each buffer
//! ([`payload`]: one byte, or every byte), the performance goals every run judges
//! ([`goals`]). `peers.py` beside this package adds
//! torch and Python's shared_memory. See `docs/PERFORMANCE.md`.

pub mod floor;
pub mod goals;
pub mod harness;
pub mod kill_latency;
pub mod payload;
pub mod planted;
pub mod workloads;
