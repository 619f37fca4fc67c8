//! Publish/subscribe between processes, with no `unsafe` and no socket per sample: the
//! parent publishes frames of `Reading`s on service `readings`; two child processes
//! join it and read every frame as `&[Reading]`, the very memory the parent wrote
//! (zero-copy). Then a third child is SIGKILLed while it holds two frames and has one
//! queued: the publisher's next publish and loans get all three back, with no cleanup
//! call by anyone.
//!
//! `cargo run --example pubsub`

// loom and shuttle builds (`--features loom`, clippy of all targets) have no real
// kernel and so no services: the example is empty there.
#[cfg(any(shmrc_loom, shmrc_shuttle))]
fn main() {}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    pubsub::main()
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod pubsub {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, ChildStdout, Command, Stdio};
    use std::time::{Duration, Instant};

    use bytemuck::{Pod, Zeroable};
    use shmrc::Namespace;
    use shmrc::manager::{ManagerMode, set_manager_mode};
    use shmrc::pubsub::{Publisher, PublisherOptions, SlowSubscriber, Subscriber};

    /// What the publisher lends: a plain `#[repr(C)]` struct, `Pod` by derive.
    #[derive(Copy, Clone, Debug, Pod, Zeroable)]
    #[repr(C)]
    struct Reading {
        sensor: u32,
        frame: u32,
        value: f64,
    }

    const READINGS: usize = 4096;
    const FRAMES: u32 = 5;
    /// How long anyone waits for anyone before giving up.
    const LIMIT: Duration = Duration::from_secs(30);

    fn namespace() -> Result<Namespace, shmrc::Error> {
        Namespace::new(format!("shmrc-example-pubsub-{}", std::process::id()))
    }

    pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
        // The publisher's own steps reclaim a dead subscriber's samples: no daemon.
        set_manager_mode(ManagerMode::Off);
        let mut args = std::env::args().skip(1);
        if let Some(role) = args.next() {
            let prefix = args.next().ok_or("a child needs the namespace")?;
            return child(&role, &Namespace::new(prefix)?);
        }
        let ns = namespace()?;
        let options = PublisherOptions::new()
            .namespace(ns.clone())
            .subscribers(4)
            .queue(8)
            .slow(SlowSubscriber::DropOldest);
        let publisher = Publisher::create("readings", options)?;

        // Two subscribers read every frame.
        let mut readers: Vec<(Child, BufReader<ChildStdout>)> = Vec::new();
        for _ in 0..2 {
            readers.push(spawn("reader", &ns)?);
        }
        for (_, out) in &mut readers {
            expect(out, "joined")?;
        }
        for frame in 0..FRAMES {
            let mut loan = publisher.loan::<Reading>(READINGS)?;
            for (i, r) in loan.iter_mut().enumerate() {
                *r = Reading {
                    sensor: i as u32,
                    frame,
                    value: f64::from(frame) + i as f64 / 1000.0,
                };
            }
            let sent = publisher
                .publish(loan)?
                .sent()
                .ok_or("drop-oldest never refuses")?;
            println!("frame {frame}: queued for {} subscribers", sent.delivered);
        }
        for (mut child, mut out) in readers {
            let said = expect(&mut out, "done")?;
            println!("reader {}: {said}", child.id());
            if !child.wait()?.success() {
                return Err("a reader failed".into());
            }
        }

        // A subscriber killed while it holds two frames and has one queued.
        let (mut holder, mut out) = spawn("holder", &ns)?;
        expect(&mut out, "joined")?;
        for frame in 0..3 {
            let mut loan = publisher.loan::<Reading>(READINGS)?;
            loan.fill(Reading {
                sensor: 0,
                frame,
                value: 0.0,
            });
            let _ = publisher.publish(loan)?;
        }
        expect(&mut out, "holding")?;
        let created = publisher.pool_stats().created;
        holder.kill()?;
        holder.wait()?;
        let killed = Instant::now();
        // The publisher's next steps: a reclaim pass (as any publish makes), then loans.
        let freed = publisher.reclaim()?.freed;
        let loans: Vec<_> = (0..3)
            .map(|_| publisher.loan::<Reading>(READINGS))
            .collect::<Result<_, _>>()?;
        println!(
            "the killed subscriber's entry freed ({freed}), its 3 frames back in the pool in {:?} \
             (segments created: {created} before, {} after)",
            killed.elapsed(),
            publisher.pool_stats().created
        );
        drop(loans);
        drop(publisher);
        shmrc::sweep(&ns)?;
        Ok(())
    }

    fn spawn(
        role: &str,
        ns: &Namespace,
    ) -> Result<(Child, BufReader<ChildStdout>), Box<dyn std::error::Error>> {
        let mut child = Command::new(std::env::current_exe()?)
            .args([role, ns.prefix()])
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().ok_or("the child's stdout")?);
        Ok((child, out))
    }

    /// The child's next line, which must start with `what`.
    fn expect(
        out: &mut BufReader<ChildStdout>,
        what: &str,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.starts_with(what) {
            return Err(format!("expected {what:?} from a child, got {line:?}").into());
        }
        Ok(line.trim().to_owned())
    }

    fn child(role: &str, ns: &Namespace) -> Result<(), Box<dyn std::error::Error>> {
        let subscriber = Subscriber::join_in(ns, "readings")?;
        println!("joined");
        if role == "holder" {
            let held = [
                subscriber.recv_timeout::<Reading>(LIMIT)?,
                subscriber.recv_timeout::<Reading>(LIMIT)?,
            ];
            println!(
                "holding frames {} and {}",
                held[0][0].frame, held[1][0].frame
            );
            std::thread::sleep(LIMIT);
            return Err("the holder was not killed".into());
        }
        let mut sum = 0.0;
        for expected in 0..FRAMES {
            let frame = subscriber.recv_timeout::<Reading>(LIMIT)?;
            if frame[0].frame != expected || frame.len() != READINGS {
                return Err(format!("frame {expected}: got {:?}", frame[0]).into());
            }
            sum += frame.iter().map(|r| r.value).sum::<f64>();
        }
        println!("done: {FRAMES} frames, sum of values {sum:.3}");
        Ok(())
    }
}
