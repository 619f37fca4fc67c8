//! iceoryx2's publish/subscribe (the crates.io version in this package's lock file):
//! a `[u8]` slice service from the publisher to the subscribers and a `u64`
//! acknowledgement service back, each with an event service that wakes the blocking
//! side (`Notifier::notify`, `Listener::timed_wait`); a polling side spins on
//! `receive` (yielding the CPU between tries, see [`spin`]) and nobody notifies.
//! Recovery: a subscriber that holds samples is SIGKILLed, and the publisher counts
//! what it can loan (after `update_connections`, what each `send` does first), without
//! and with `Node::try_cleanup_dead_nodes`.
//!
//! # Safety
//! One `unsafe` block: `SampleMutUninit::assume_init` after writing only the stamp
//! (the first 8 bytes and the last). The rest of the slice is memory of the
//! publisher's data segment, a shared mapping the kernel zero-filled and earlier
//! samples wrote: every byte of it holds a value and any value is a valid `u8`.
//! Writing the whole payload instead (`write_from_fill`) would time a memset that
//! shmrc's loan (which hands out the previous contents) does not pay.
#![allow(unsafe_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use iceoryx2::node::Node;
use iceoryx2::port::LoanError;
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;
use iceoryx2::service::ipc;

use crate::error::{Error, Result, iox};
use crate::peer::{HOLDING, PEER_TIMEOUT, Peer, READY, control_socket, domain, wait_for_close};
use crate::rounds::{Receive, RoundTrip, STOP, THROUGHPUT_BATCH, check_byte, read_stamp};

fn node() -> Result<Node<ipc::Service>> {
    set_log_level(LogLevel::Error);
    let domain = domain();
    let mut config = Config::default();
    config.global.prefix = iox("FileName::new", FileName::new(domain.as_bytes()))?;
    config.global.set_root_path(&iox(
        "Path::new",
        iceoryx2::prelude::Path::new(format!("/tmp/{domain}").as_bytes()),
    )?);
    iox(
        "NodeBuilder::create",
        NodeBuilder::new().config(&config).create::<ipc::Service>(),
    )
}

/// Removes what the run's iceoryx2 domain left: its root directory and its files in
/// `/dev/shm` (iceoryx2 keeps a node counter there on purpose). Call it once every node
/// of the run is gone.
pub fn remove_domain() -> Result<()> {
    let domain = domain();
    match std::fs::remove_dir_all(format!("/tmp/{domain}")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    for entry in std::fs::read_dir("/dev/shm")? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&domain) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn service_name(tag: &str, what: &str) -> Result<ServiceName> {
    iox(
        "ServiceName::new",
        ServiceName::new(&format!("{tag}/{what}")),
    )
}

/// A fresh tag for one configuration's services.
pub fn fresh_tag() -> String {
    static NEXT: std::sync::Mutex<u32> = std::sync::Mutex::new(0);
    let mut next = NEXT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *next += 1;
    format!("shmrc-compare-{}-{}", std::process::id(), *next)
}

/// Loans a sample of `size` bytes stamped with `seq`.
fn loan_stamped(
    publisher: &Publisher<ipc::Service, [u8], ()>,
    size: usize,
    seq: u64,
) -> std::result::Result<iceoryx2::sample_mut::SampleMut<ipc::Service, [u8], ()>, LoanError> {
    let mut sample = publisher.loan_slice_uninit(size)?;
    let payload = sample.payload_mut();
    for (byte, value) in payload[..8].iter_mut().zip(seq.to_le_bytes()) {
        byte.write(value);
    }
    payload[size - 1].write(check_byte(seq));
    // SAFETY: see the module's `# Safety`: the bytes not written above are shared
    // memory that holds values already, and every value is a valid `u8`.
    Ok(unsafe { sample.assume_init() })
}

/// One turn of a polling loop: `sched_yield`, so that on a machine with fewer free
/// cores than spinning processes the peer being waited for gets to run (with cores to
/// spare it returns at once).
pub fn spin() {
    std::thread::yield_now();
}

/// The publisher side of the round trip.
pub struct IoxPublisher {
    _node: Node<ipc::Service>,
    publisher: Publisher<ipc::Service, [u8], ()>,
    notifier: Notifier<ipc::Service>,
    acks: Subscriber<ipc::Service, u64, ()>,
    ack_listener: Listener<ipc::Service>,
    receive: Receive,
    size: usize,
    peers: Vec<Peer>,
}

impl IoxPublisher {
    /// The four services and `subscribers` peers of `program`.
    pub fn start(
        program: &Path,
        receive: Receive,
        size: usize,
        subscribers: usize,
    ) -> Result<IoxPublisher> {
        let node = node()?;
        let tag = fresh_tag();
        let data = iox(
            "data service",
            node.service_builder(&service_name(&tag, "data")?)
                .publish_subscribe::<[u8]>()
                .max_publishers(1)
                .max_subscribers(subscribers)
                .subscriber_max_buffer_size(THROUGHPUT_BATCH)
                .subscriber_max_borrowed_samples(2)
                .history_size(0)
                .create(),
        )?;
        let publisher = iox(
            "publisher",
            data.publisher_builder()
                .initial_max_slice_len(size)
                .max_loaned_samples(2)
                .create(),
        )?;
        let data_event = iox(
            "data event service",
            node.service_builder(&service_name(&tag, "data-event")?)
                .event()
                .max_notifiers(1)
                .max_listeners(subscribers)
                .create(),
        )?;
        let notifier = iox("notifier", data_event.notifier_builder().create())?;
        let ack = iox(
            "ack service",
            node.service_builder(&service_name(&tag, "ack")?)
                .publish_subscribe::<u64>()
                .max_publishers(subscribers)
                .max_subscribers(1)
                .subscriber_max_buffer_size(THROUGHPUT_BATCH)
                .history_size(0)
                .create(),
        )?;
        let acks = iox("ack subscriber", ack.subscriber_builder().create())?;
        let ack_event = iox(
            "ack event service",
            node.service_builder(&service_name(&tag, "ack-event")?)
                .event()
                .max_notifiers(subscribers)
                .max_listeners(1)
                .create(),
        )?;
        let ack_listener = iox("ack listener", ack_event.listener_builder().create())?;
        let mut peers = Vec::with_capacity(subscribers);
        for _ in 0..subscribers {
            peers.push(Peer::spawn(
                program,
                &["iceoryx2".into(), receive.name().into(), tag.clone()],
            )?);
        }
        for peer in &mut peers {
            peer.expect(READY)?;
        }
        Ok(IoxPublisher {
            _node: node,
            publisher,
            notifier,
            acks,
            ack_listener,
            receive,
            size,
            peers,
        })
    }

    fn publish(&self, seq: u64) -> Result<()> {
        let sample = iox(
            "loan_slice_uninit",
            loan_stamped(&self.publisher, self.size, seq),
        )?;
        let delivered = iox("send", sample.send())?;
        if delivered != self.peers.len() {
            return Err(Error::Peer(format!(
                "sample {seq} reached {delivered} of {} subscribers",
                self.peers.len()
            )));
        }
        if self.receive == Receive::Blocking {
            iox("notify", self.notifier.notify())?;
        }
        Ok(())
    }

    /// Tells the peers to exit and waits for them.
    pub fn stop(self) -> Result<()> {
        self.publish(STOP)?;
        for peer in self.peers {
            peer.finish()?;
        }
        Ok(())
    }
}

impl RoundTrip for IoxPublisher {
    fn round(&mut self, first: u64, batch: usize) -> Result<()> {
        for seq in first..first + batch as u64 {
            self.publish(seq)?;
        }
        let wanted = batch * self.peers.len();
        let mut got = 0;
        let start = Instant::now();
        let mut spins = 0u32;
        while got < wanted {
            if self.receive == Receive::Blocking {
                iox(
                    "timed_wait",
                    self.ack_listener.timed_wait(|_| {}, PEER_TIMEOUT),
                )?;
            }
            while let Some(ack) = iox("receive ack", self.acks.receive())? {
                let seq = *ack.payload();
                if seq < first || seq >= first + batch as u64 {
                    return Err(Error::Peer(format!(
                        "an acknowledgement of {seq} in round {first}"
                    )));
                }
                got += 1;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > PEER_TIMEOUT {
                return Err(Error::Peer(format!(
                    "{got} of {wanted} acknowledgements in {PEER_TIMEOUT:?}"
                )));
            }
            if self.receive == Receive::Polling {
                spin();
            }
        }
        Ok(())
    }
}

/// The subscriber side: receive, check, drop, acknowledge, until the STOP sample.
pub fn serve(receive: Receive, tag: &str) -> Result<()> {
    let node = node()?;
    let data = iox(
        "open data service",
        node.service_builder(&service_name(tag, "data")?)
            .publish_subscribe::<[u8]>()
            .open(),
    )?;
    let subscriber = iox("subscriber", data.subscriber_builder().create())?;
    let data_event = iox(
        "open data event service",
        node.service_builder(&service_name(tag, "data-event")?)
            .event()
            .open(),
    )?;
    let listener = iox("listener", data_event.listener_builder().create())?;
    let ack = iox(
        "open ack service",
        node.service_builder(&service_name(tag, "ack")?)
            .publish_subscribe::<u64>()
            .open(),
    )?;
    let ack_publisher = iox("ack publisher", ack.publisher_builder().create())?;
    let ack_event = iox(
        "open ack event service",
        node.service_builder(&service_name(tag, "ack-event")?)
            .event()
            .open(),
    )?;
    let ack_notifier = iox("ack notifier", ack_event.notifier_builder().create())?;
    let mut control = control_socket()?;
    std::io::Write::write_all(&mut control, &[READY])?;
    loop {
        if receive == Receive::Blocking {
            iox("blocking_wait", listener.blocking_wait(|_| {}))?;
        }
        let mut acked = false;
        while let Some(sample) = iox("receive", subscriber.receive())? {
            let seq = read_stamp(sample.payload())?;
            if seq == STOP {
                return Ok(());
            }
            drop(sample);
            iox("send ack", ack_publisher.send_copy(seq))?;
            acked = true;
        }
        if acked && receive == Receive::Blocking {
            iox("notify ack", ack_notifier.notify())?;
        }
        if receive == Receive::Polling {
            spin();
        }
    }
}

/// The subscriber of a recovery trial: receives `count` samples, says so, and holds
/// them until it is killed.
pub fn serve_holding(tag: &str, count: usize) -> Result<()> {
    let node = node()?;
    let data = iox(
        "open data service",
        node.service_builder(&service_name(tag, "data")?)
            .publish_subscribe::<[u8]>()
            .open(),
    )?;
    let subscriber = iox("subscriber", data.subscriber_builder().create())?;
    let mut control = control_socket()?;
    std::io::Write::write_all(&mut control, &[READY])?;
    let mut held = Vec::with_capacity(count);
    let start = Instant::now();
    while held.len() < count {
        match iox("receive", subscriber.receive())? {
            Some(sample) => held.push(sample),
            None if start.elapsed() > PEER_TIMEOUT => {
                return Err(Error::Peer(format!(
                    "{} of {count} samples arrived",
                    held.len()
                )));
            }
            None => std::thread::sleep(Duration::from_micros(50)),
        }
    }
    std::io::Write::write_all(&mut control, &[HOLDING])?;
    wait_for_close(&mut control);
    drop(held);
    Ok(())
}

/// How many samples the publisher can loan at once now (at most `cap`).
fn loanable(
    publisher: &Publisher<ipc::Service, [u8], ()>,
    size: usize,
    cap: usize,
) -> Result<usize> {
    let mut loans = Vec::with_capacity(cap);
    while loans.len() < cap {
        match publisher.loan_slice_uninit(size) {
            Ok(loan) => loans.push(loan),
            Err(LoanError::OutOfMemory | LoanError::ExceedsMaxLoans) => break,
            Err(e) => return Err(Error::Iceoryx2(format!("loan_slice_uninit: {e:?}"))),
        }
    }
    Ok(loans.len())
}

/// One recovery trial: a subscriber holds `count` samples of `size` bytes and is
/// SIGKILLed; the time from the kill until the publisher can loan its whole pool
/// again, or `None` past `deadline`. With `cleanup`, the publisher's node calls
/// `try_cleanup_dead_nodes` before each look; without, it only loans. Stale
/// resources of the dead node are cleaned up after the trial either way.
pub fn recovery_trial(
    program: &Path,
    size: usize,
    count: usize,
    cleanup: bool,
    deadline: Duration,
) -> Result<Option<Duration>> {
    let node = node()?;
    let tag = fresh_tag();
    let data = iox(
        "data service",
        node.service_builder(&service_name(&tag, "data")?)
            .publish_subscribe::<[u8]>()
            .max_publishers(1)
            .max_subscribers(1)
            .subscriber_max_buffer_size(count)
            .subscriber_max_borrowed_samples(count)
            .history_size(0)
            .create(),
    )?;
    // A pool of `count + spare` samples, so that what the dead subscriber holds shows
    // in what the publisher can loan (the default pool is sized for the worst case
    // plus `max_loaned_samples`, which would hide it).
    let spare = 2;
    let pool = count + spare;
    let publisher = iox(
        "publisher",
        data.publisher_builder()
            .initial_max_slice_len(size)
            .max_loaned_samples(pool)
            .override_sample_preallocation(move |_| pool)
            .create(),
    )?;
    let full = loanable(&publisher, size, pool)?;
    let mut peer = Peer::spawn(
        program,
        &["iceoryx2-hold".into(), tag.clone(), count.to_string()],
    )?;
    peer.expect(READY)?;
    for seq in 0..count as u64 {
        let sample = iox("loan_slice_uninit", loan_stamped(&publisher, size, seq))?;
        iox("send", sample.send())?;
    }
    peer.expect(HOLDING)?;
    let held = full - loanable(&publisher, size, pool)?;
    if held != count {
        return Err(Error::Peer(format!(
            "the subscriber holds {held} samples by the publisher's count, expected {count}"
        )));
    }
    let start = Instant::now();
    peer.kill()?;
    let recovered = loop {
        if cleanup {
            node.try_cleanup_dead_nodes();
        }
        // What every `send` does first: drop the connections of subscribers that left
        // the service (and take back what they borrowed).
        iox("update_connections", publisher.update_connections())?;
        if loanable(&publisher, size, pool)? == full {
            break Some(start.elapsed());
        }
        if start.elapsed() > deadline {
            break None;
        }
    };
    node.try_cleanup_dead_nodes();
    Ok(recovered)
}
