//! shmrc's publish/subscribe (`shmrc::pubsub`), the contender issue 33 item 6 is about:
//! the publisher loans from its service's pool, stamps and publishes (the descriptor
//! goes into each subscriber's ring in shared memory, and the wake word wakes blocking
//! receivers by futex); each subscriber receives (`recv_timeout`, or `try_recv` in a
//! loop), checks, drops the sample and acknowledges on a service of its own
//! (`ack-INDEX`, a `u64` sample) that the publisher receives the same way. No socket on
//! the hot path. Recovery: a subscriber holding samples is SIGKILLed, and the publisher
//! loans until it holds them all again (its pool recycles a dead holder's segment in the
//! loan itself: no cleanup call). Runs without the manager, in a namespace of the run's
//! own (`shmrc-compare-PID`), which the run sweeps at the end.

use std::path::Path;
use std::time::{Duration, Instant};

use shmrc::Namespace;
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::pubsub::{Publisher, PublisherOptions, Received, SlowSubscriber, Subscriber};

use crate::error::{Error, Result};
use crate::iox::spin;
use crate::peer::{
    HOLDING, PEER_TIMEOUT, Peer, READY, control_socket, namespace_name, wait_for_close,
};
use crate::rounds::{Receive, RoundTrip, STOP, THROUGHPUT_BATCH, read_stamp, stamp};

/// The run's namespace (the publisher's process id).
pub fn namespace() -> Result<Namespace> {
    Ok(Namespace::new(namespace_name())?)
}

/// Removes what the run's namespace still holds (nothing, when every publisher and
/// subscriber let go as it should; a SIGKILLed subscriber's leftovers otherwise).
pub fn remove_namespace() -> Result<()> {
    shmrc::sweep(&namespace()?)?;
    Ok(())
}

fn options(subscribers: usize, samples: usize) -> Result<PublisherOptions> {
    Ok(PublisherOptions::new()
        .namespace(namespace()?)
        .subscribers(subscribers)
        .queue(THROUGHPUT_BATCH)
        .samples(samples)
        .slow(SlowSubscriber::Backpressure))
}

/// Enough samples for a throughput round in flight and the previous one coming back.
const SAMPLES: usize = 2 * THROUGHPUT_BATCH + 2;

fn receive<T: bytemuck::Pod>(subscriber: &Subscriber, how: Receive) -> Result<Received<T>> {
    match how {
        Receive::Blocking => Ok(subscriber.recv_timeout::<T>(PEER_TIMEOUT)?),
        Receive::Polling => {
            let start = Instant::now();
            let mut tries = 0u32;
            loop {
                if let Some(sample) = subscriber.try_recv::<T>()? {
                    return Ok(sample);
                }
                tries = tries.wrapping_add(1);
                if tries.is_multiple_of(1024) && start.elapsed() > PEER_TIMEOUT {
                    return Err(Error::Peer(format!("nothing received in {PEER_TIMEOUT:?}")));
                }
                spin();
            }
        }
    }
}

fn publish_u8(publisher: &Publisher, size: usize, seq: u64, subscribers: usize) -> Result<()> {
    let mut loan = publisher.loan::<u8>(size)?;
    stamp(&mut loan, seq);
    let sent = publisher
        .publish(loan)?
        .sent()
        .ok_or_else(|| Error::Peer(format!("sample {seq}: a subscriber's queue is full")))?;
    if sent.delivered as usize != subscribers {
        return Err(Error::Peer(format!(
            "sample {seq} reached {} of {subscribers} subscribers",
            sent.delivered
        )));
    }
    Ok(())
}

/// The publisher side of the round trip.
pub struct PubSub {
    publisher: Publisher,
    acks: Vec<Subscriber>,
    receive: Receive,
    size: usize,
    peers: Vec<Peer>,
}

impl PubSub {
    /// The data service and `subscribers` peers of `program`, each with its ack service.
    pub fn start(
        program: &Path,
        receive: Receive,
        size: usize,
        subscribers: usize,
    ) -> Result<PubSub> {
        set_manager_mode(ManagerMode::Off);
        let service = format!("data-{}", crate::iox::fresh_tag());
        let publisher = Publisher::create(&service, options(subscribers, SAMPLES)?)?;
        // Every sample made now, as iceoryx2 preallocates its pool: a pool that grows on
        // demand grows in the middle of timed rounds, one segment at a time (a blocking
        // pair runs in lock step, one sample at a time, until it has enough; each new
        // segment of 1 MiB or more then takes long enough to bring the lock step back):
        // at 1 MiB, the first 50 rounds of 8 after the round trips took 57 µs each where
        // the later ones took 19 (`examples/pubsub_batches.rs`).
        let made = (0..THROUGHPUT_BATCH + 2)
            .map(|_| publisher.loan::<u8>(size))
            .collect::<shmrc::Result<Vec<_>>>()?;
        drop(made);
        let mut peers = Vec::with_capacity(subscribers);
        for index in 0..subscribers {
            peers.push(Peer::spawn(
                program,
                &[
                    "shmrc-pubsub".into(),
                    receive.name().into(),
                    service.clone(),
                    index.to_string(),
                ],
            )?);
        }
        let ns = namespace()?;
        let mut acks = Vec::with_capacity(subscribers);
        for (index, peer) in peers.iter_mut().enumerate() {
            peer.expect(READY)?;
            acks.push(Subscriber::join_in(&ns, &format!("{service}-ack-{index}"))?);
        }
        Ok(PubSub {
            publisher,
            acks,
            receive,
            size,
            peers,
        })
    }

    /// The subscriber processes' ids.
    pub fn subscriber_pids(&self) -> Vec<u32> {
        self.peers.iter().map(Peer::pid).collect()
    }

    /// Tells the peers to exit and waits for them.
    pub fn stop(self) -> Result<()> {
        publish_u8(&self.publisher, self.size, STOP, self.peers.len())?;
        for peer in self.peers {
            peer.finish()?;
        }
        Ok(())
    }
}

impl RoundTrip for PubSub {
    fn round(&mut self, first: u64, batch: usize) -> Result<()> {
        for seq in first..first + batch as u64 {
            publish_u8(&self.publisher, self.size, seq, self.peers.len())?;
        }
        for acks in &self.acks {
            for _ in 0..batch {
                let ack = receive::<u64>(acks, self.receive)?;
                let seq = ack[0];
                if seq < first || seq >= first + batch as u64 {
                    return Err(Error::Peer(format!(
                        "an acknowledgement of {seq} in round {first}"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The subscriber side: receive, check, drop, acknowledge on `SERVICE-ack-INDEX`, until
/// the STOP sample.
pub fn serve(receive_how: Receive, service: &str, index: &str) -> Result<()> {
    set_manager_mode(ManagerMode::Off);
    let ns = namespace()?;
    let acks = Publisher::create(&format!("{service}-ack-{index}"), options(1, SAMPLES)?)?;
    let subscriber = Subscriber::join_in(&ns, service)?;
    let mut control = control_socket()?;
    std::io::Write::write_all(&mut control, &[READY])?;
    // The publisher joins the ack service after READY: wait for it before the first ack.
    loop {
        let sample = receive::<u8>(&subscriber, receive_how)?;
        let seq = read_stamp(&sample)?;
        drop(sample);
        if seq == STOP {
            return Ok(());
        }
        let mut ack = acks.loan::<u64>(1)?;
        ack[0] = seq;
        let sent = acks
            .publish(ack)?
            .sent()
            .ok_or_else(|| Error::Peer(format!("ack {seq}: the publisher's ack queue is full")))?;
        if sent.delivered != 1 {
            return Err(Error::Peer(format!(
                "ack {seq} reached {} publishers",
                sent.delivered
            )));
        }
    }
}

/// The subscriber of a recovery trial: receives `count` samples, says so, and holds
/// them until it is killed.
pub fn serve_holding(service: &str, count: usize) -> Result<()> {
    set_manager_mode(ManagerMode::Off);
    let subscriber = Subscriber::join_in(&namespace()?, service)?;
    let mut control = control_socket()?;
    std::io::Write::write_all(&mut control, &[READY])?;
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        held.push(subscriber.recv_timeout::<u8>(PEER_TIMEOUT)?);
    }
    std::io::Write::write_all(&mut control, &[HOLDING])?;
    wait_for_close(&mut control);
    drop(held);
    Ok(())
}

/// One recovery trial: a subscriber holds `count` samples of `size` bytes (all the
/// service's pool) and is SIGKILLed; the time from the kill until the publisher holds
/// `count` loans again, or `None` past `deadline`. The publisher only loans: no
/// cleanup call, no `reclaim`, no manager.
pub fn recovery_trial(
    program: &Path,
    size: usize,
    count: usize,
    deadline: Duration,
) -> Result<Option<Duration>> {
    set_manager_mode(ManagerMode::Off);
    let service = format!("hold-{}", crate::iox::fresh_tag());
    let publisher = Publisher::create(&service, options(1, count)?)?;
    let mut peer = Peer::spawn(
        program,
        &["shmrc-pubsub-hold".into(), service, count.to_string()],
    )?;
    peer.expect(READY)?;
    for seq in 0..count as u64 {
        publish_u8(&publisher, size, seq, 1)?;
    }
    peer.expect(HOLDING)?;
    if publisher.loan::<u8>(size).is_ok() {
        return Err(Error::Peer(format!(
            "the publisher could loan while the subscriber held all {count} samples"
        )));
    }
    let start = Instant::now();
    peer.kill()?;
    let mut back = Vec::with_capacity(count);
    while back.len() < count {
        if start.elapsed() > deadline {
            return Ok(None);
        }
        match publisher.loan::<u8>(size) {
            Ok(loan) => back.push(loan),
            // All samples still held: not back yet.
            Err(shmrc::Error::InvalidArgument(_)) => spin(),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(start.elapsed()))
}
