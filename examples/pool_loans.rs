//! Typed pooled loans between two processes, with no `unsafe`: the parent lends itself
//! a pooled buffer as `&mut [Reading]`, fills it, turns it into a read-only sample and
//! sends it; the child reads the same memory as `&[Reading]`. Once the child lets go,
//! the segment is back in the pool and the next loan reuses it (a new generation, no
//! new segment). Then the child is SIGKILLed while it holds a sample: the next loan
//! gets that segment back too, with no cleanup call.
//!
//! `cargo run --example pool_loans`

// loom and shuttle builds (`--features loom`, clippy of all targets) have no real
// kernel and so no loans: the example is empty there.
#[cfg(any(shmrc_loom, shmrc_shuttle))]
fn main() {}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    loans::main()
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod loans {
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use bytemuck::{Pod, Zeroable};
    use shmrc::manager::{ManagerMode, set_manager_mode};
    use shmrc::{CreateOptions, PoolLimits, Sample, ShmPool, Strategy, transport};

    /// What the producer lends: a plain `#[repr(C)]` struct, `Pod` by derive.
    #[derive(Copy, Clone, Debug, Pod, Zeroable)]
    #[repr(C)]
    struct Reading {
        sensor: u32,
        flags: u32,
        value: f64,
    }

    const READINGS: usize = 4096;
    /// How long either side waits for the other before it gives up.
    const LIMIT: Duration = Duration::from_secs(30);

    pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
        // A memfd pool involves no daemon: a dead holder's slot is reclaimed by the pool.
        set_manager_mode(ManagerMode::Off);
        let mut args = std::env::args().skip(1);
        if args.next().as_deref() == Some("child") {
            return child(&args.next().ok_or("the child needs the socket path")?);
        }

        let pool = ShmPool::new(
            CreateOptions::new().strategy(Strategy::FileDescriptor),
            PoolLimits::default(),
        )?;
        let path = std::env::temp_dir().join(format!("shmrc-example-loans-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("child")
            .arg(&path)
            .stdin(Stdio::null())
            .spawn()?;
        let (socket, _) = listener.accept()?;
        std::fs::remove_file(&path)?;
        socket.set_read_timeout(Some(LIMIT))?;

        // Frame 0: lend, write as &mut [Reading], share read-only.
        let mut loan = pool.loan::<Reading>(READINGS)?;
        for (i, reading) in loan.iter_mut().enumerate() {
            *reading = Reading {
                sensor: (i % 16) as u32,
                flags: 0,
                value: i as f64,
            };
        }
        let sample = loan.into_sample();
        let expected: f64 = sample.iter().map(|r| r.value).sum();
        transport::send(&socket, b"read and let go", vec![sample.share()?])?;
        drop(sample);
        let reply = transport::recv(&socket)?;
        println!("child: {}", String::from_utf8_lossy(&reply.payload));
        assert_eq!(reply.payload, format!("sum {expected}").as_bytes());
        let stats = pool.stats();
        println!("after the child let go: {stats:?}");
        assert_eq!(stats.idle, 1);

        // Frame 1: the same segment, a new use.
        let mut loan = pool.loan::<Reading>(READINGS)?;
        assert_eq!((loan.generation(), pool.stats().created), (1, 1));
        loan.iter_mut().for_each(|r| r.flags = 1);
        let sample = loan.into_sample();
        transport::send(&socket, b"read and hold", vec![sample.share()?])?;
        drop(sample);
        let reply = transport::recv(&socket)?;
        println!("child: {}", String::from_utf8_lossy(&reply.payload));
        assert_eq!(pool.stats().lent, 1);

        // The child dies holding it: the next loan reclaims its slot and reuses the segment.
        child.kill()?;
        child.wait()?;
        let loan = pool.loan::<Reading>(READINGS)?;
        let stats = pool.stats();
        println!(
            "after the child was killed: generation {}, {stats:?}",
            loan.generation()
        );
        assert_eq!(
            (loan.generation(), stats.created, stats.recycled),
            (2, 1, 2)
        );
        Ok(())
    }

    /// The child: reads each sample as `&[Reading]`; lets go of the first, holds the second.
    fn child(path: &str) -> Result<(), Box<dyn std::error::Error>> {
        let socket = UnixStream::connect(path)?;
        socket.set_read_timeout(Some(LIMIT))?;
        let mut message = transport::recv(&socket)?;
        let sample = Sample::<Reading>::attach(message.handles.remove(0))?;
        let readings: &[Reading] = &sample; // the parent's memory, read in place
        let sum: f64 = readings.iter().map(|r| r.value).sum();
        drop(sample);
        transport::send(&socket, format!("sum {sum}").as_bytes(), vec![])?;

        let mut message = transport::recv(&socket)?;
        let held = Sample::<Reading>::attach(message.handles.remove(0))?;
        let flagged = held.iter().filter(|r| r.flags == 1).count();
        transport::send(
            &socket,
            format!(
                "holding generation {}, {flagged} flagged",
                held.generation()
            )
            .as_bytes(),
            vec![],
        )?;
        // Wait to be killed (or for the parent to go away).
        let _ = transport::recv(&socket);
        drop(held);
        Ok(())
    }
}
