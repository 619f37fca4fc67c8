//! The kernel entries of shmrc's fixed costs, for `strace -ff`: a producer creates
//! `N` buffers and shares each as handle bytes; a forked consumer attaches each and
//! releases it (the producer still holding: a release beside another live holder).
//! Run it with N and with 0 under `strace -ff -o DIR/trace`; the difference of the
//! consumer's (the child's) trace lengths divided by N is the cost of one attach +
//! release, of the producer's, of one create + share (docs/PERFORMANCE.md):
//!
//! `cargo run --release -p shmrc-bench --example syscall_census -- file_system 100`
//!
//! `… -- time 2000` times, in the forked consumer, 2000 attach + release of a
//! file_system buffer the producer still holds against the floor's `shm_open` + `mmap`
//! + write + `munmap` + `close` of a 4 KiB object, alternating rounds, same run.
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
    let timed = first == "time";
    if first == "alive" {
        let n: u32 = args.next().map_or(Ok(100_000), |a| a.parse())?;
        return time_liveness(n);
    }
    let strategy: Strategy = if timed {
        Strategy::FileSystem
    } else {
        first.parse()?
    };
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
        ForkResult::Child if timed => {
            time_attach_release(&handles)?;
            std::process::exit(0);
        }
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
    use shmrc::checkers::os::Os;
    use shmrc::checkers::os::posix::PosixOs;
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

/// The consumer's attach + release of each handle against the floor, in 10 alternating
/// rounds; prints per-operation times and the ratio.
fn time_attach_release(handles: &[Vec<u8>]) -> Result<(), Box<dyn std::error::Error>> {
    use shmrc_bench::floor;
    use std::time::Instant;
    let name = format!("shmrc-census-floor-{}", std::process::id());
    drop(floor::create_named(&name, 4096, true)?);
    let rounds = 10;
    let per_round = handles.len() / rounds;
    let (mut shmrc_ns, mut floor_ns) = (0u128, 0u128);
    for round in 0..rounds {
        let t = Instant::now();
        for bytes in &handles[round * per_round..(round + 1) * per_round] {
            let buf = ShmBuf::attach(ShareHandle::from_bytes(bytes)?)?;
            buf.write_at(0, &[1])?;
            drop(buf);
        }
        shmrc_ns += t.elapsed().as_nanos();
        let t = Instant::now();
        for _ in 0..per_round {
            let fd = floor::open_named(&name)?;
            let map = floor::FloorMap::new(std::os::fd::AsFd::as_fd(&fd), 4096)?;
            map.write_byte(0, 1)?;
            drop((map, fd));
        }
        floor_ns += t.elapsed().as_nanos();
    }
    floor::unlink_named(&name)?;
    let n = (per_round * rounds) as f64;
    println!(
        "attach+release {:.2} us, floor {:.2} us, ratio {:.2}",
        shmrc_ns as f64 / n / 1000.0,
        floor_ns as f64 / n / 1000.0,
        shmrc_ns as f64 / floor_ns as f64
    );
    Ok(())
}
