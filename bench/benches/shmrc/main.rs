//! Criterion benches: the workloads of `shmrc bench` (the same code,
//! [`shmrc_bench::workloads`]) with shmrc, the raw-syscall floor and the Rust peers
//! (the `memfd` and `shared_memory` crates) in the same groups.
//!
//! Consumers run in peer processes: this bench binary re-executes itself, and a process
//! started with `SHMRC_BENCH_CONTENDER` in its environment serves as the peer
//! instead of benchmarking. `cargo bench -p shmrc-bench` runs everything;
//! `cargo bench -p shmrc-bench -- ping_pong` one group.

mod real;

fn main() {
    real::main()
}
