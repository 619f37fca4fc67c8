//! The kernel entries of shmrc's fixed costs, for `strace -ff`: a producer creates
//! `N` buffers and shares each as handle bytes; a forked consumer attaches each and
//! releases it (the producer still holding: a release beside another live holder).
//! Run it with N and with 0 under `strace -ff -o DIR/trace`; the difference of the
//! consumer's (the child's) trace lengths divided by N is the cost of one attach +
//! release, of the producer's, of one create + share (docs/PERFORMANCE.md):
//!
//! `cargo run --release -p shmrc-bench --example syscall_census -- file_system 100`
use std::io::Write;

use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, fork};
use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let mut args = std::env::args().skip(1);
    let strategy: Strategy = args.next().unwrap_or("file_system".into()).parse()?;
    let n: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let ns = Namespace::new(format!("shmrc-census-{}", std::process::id()))?;
    let options = CreateOptions::new().strategy(strategy).namespace(ns);
    // Created before the fork so that the producer's census counts create + share.
    let bufs: Vec<ShmBuf> = (0..n)
        .map(|_| ShmBuf::with_options(4096, &options))
        .collect::<Result<_, _>>()?;
    let handles: Vec<Vec<u8>> = match strategy {
        Strategy::FileSystem => bufs
            .iter()
            .map(|b| b.share()?.into_bytes())
            .collect::<Result<_, _>>()?,
        // A memfd travels over a socket, not as bytes: count creates only.
        Strategy::FileDescriptor => Vec::new(),
    };
    std::io::stdout().flush()?;
    // SAFETY: single-threaded here (the manager is off), so no lock is held at the fork.
    match unsafe { fork() }? {
        ForkResult::Child => {
            for bytes in &handles {
                let buf = ShmBuf::attach(ShareHandle::from_bytes(bytes)?)?;
                buf.write_at(0, &[1])?;
                drop(buf);
            }
            std::process::exit(0);
        }
        ForkResult::Parent { child } => {
            waitpid(child, None)?;
        }
    }
    drop(bufs);
    Ok(())
}
