//! The kernel entries of shmrc's fixed costs, for `strace -ff`: a producer creates
//! `N` buffers and shares each as handle bytes; a forked consumer attaches each and
//! releases it (the producer still holding: a release beside another live holder).
//! Run it with N and with 0 under `strace -ff -o DIR/trace`; the difference of the
//! consumer's (the child's) trace lengths divided by N is the cost of one attach +
//! release, of the producer's, of one create + share (docs/PERFORMANCE.md):
//!
//! `cargo run --release -p shmrc-bench --example syscall_census -- file_system 100`
//!
//! `… -- alive 100000` instead times the liveness check a release makes beside another
//! holder (`Os::is_alive` of the parent, from a child) against `std::fs::read` of the
//! same `/proc/<pid>/stat` (what it did before), in the same run.
use std::io::Write;

use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, fork};
use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let mut args = std::env::args().skip(1);
    let first = args.next().unwrap_or("file_system".into());
    if first == "alive" {
        let n: u32 = args.next().map_or(Ok(100_000), |a| a.parse())?;
        return time_liveness(n);
    }
    let strategy: Strategy = first.parse()?;
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

/// Times `n` liveness checks of this process's parent against `n` whole-file reads of
/// its `/proc/<pid>/stat`, alternating rounds of each, and prints both per call.
fn time_liveness(n: u32) -> Result<(), Box<dyn std::error::Error>> {
    use shmrc::os::Os;
    use shmrc::os::posix::PosixOs;
    use std::time::Instant;
    let me = PosixOs.current();
    let path = format!("/proc/{}/stat", me.pid());
    let (mut alive_ns, mut read_ns) = (0u128, 0u128);
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n / 5 {
            assert!(PosixOs.is_alive(std::hint::black_box(me)));
        }
        alive_ns += t.elapsed().as_nanos();
        let t = Instant::now();
        for _ in 0..n / 5 {
            std::hint::black_box(std::fs::read(&path)?);
        }
        read_ns += t.elapsed().as_nanos();
    }
    let per = |ns: u128| ns as f64 / f64::from(n) / 1000.0;
    println!(
        "is_alive {:.2} us/call, std::fs::read of /proc/<pid>/stat {:.2} us/call, ratio {:.2}",
        per(alive_ns),
        per(read_ns),
        alive_ns as f64 / read_ns as f64
    );
    Ok(())
}
