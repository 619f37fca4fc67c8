//! `shmrc`: the command-line tool. `demo` runs the main job (worker processes sharing
//! buffers with both strategies, one SIGKILLed, a sweep, a ledger); `ls` and `sweep`
//! show and clean this user's segments; `manager` runs the per-user daemon that sweeps
//! when a process dies, and `status` shows it; `bench` runs the `shmrc-bench` program
//! (shmrc against the raw syscalls; its own package). `soak` runs a bounded soak of the
//! whole system under kills. `worker` and
//! `soak-worker` are the child processes `demo`, `soak` and the integration tests
//! start; they are not meant to be run by hand.

mod bench;
mod cli;
mod demo;
mod error;
mod manager;
mod output;
mod soak;
mod status;
mod table;
mod worker;

fn main() -> std::process::ExitCode {
    cli::main()
}
