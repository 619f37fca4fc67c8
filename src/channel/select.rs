//! Waiting on many channels at once: a [`Select`] holds any number of [`Receiver`]s
//! of one message type, like ipc-channel's `IpcReceiverSet`, and one `poll(2)` over all
//! their sockets says which have a message or were closed: no busy polling, no
//! per-receiver timeouts. What it reports is a [`Selection`] per receiver that woke:
//! the message, received with its buffers attached, or the news that the other end is
//! gone (a client that exited or was SIGKILLed, even half-way through a message), after
//! which the receiver leaves the set.
//!
//! A receiver is read only once `poll` said it has something. Until the resumable
//! receive lands in [`Receiver`], a message a sender began but stopped writing half
//! way (without dying) holds the whole `select` until it ends: [`receive_ready`] is
//! the one place that will take the resumable step instead.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::Receiver;
use crate::error::{Error, Result};
use crate::manager::sys::poll_readable;

/// A set of receivers of `T`s to wait on together.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::channel::{Select, Selection, channel};
///
/// let mut set = Select::new();
/// let (tx_a, rx_a) = channel::<String>()?;
/// let (tx_b, rx_b) = channel::<String>()?;
/// let a = set.add(rx_a);
/// let b = set.add(rx_b);
/// tx_b.send(&"to b".to_owned())?;
/// drop(tx_a);
/// let mut got = set.select()?;
/// got.sort_by_key(Selection::id);
/// assert!(matches!(&got[..], [Selection::Closed(x), Selection::Message(y, m)]
///     if *x == a && *y == b && m == "to b"));
/// assert_eq!(set.len(), 1); // a closed receiver leaves the set
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Select<T> {
    receivers: BTreeMap<u64, Receiver<T>>,
    next_id: u64,
}

/// What a [`Select`] saw on one of its receivers.
#[derive(Debug)]
pub enum Selection<T> {
    /// The receiver with this id had a message: here it is, its buffers attached.
    Message(u64, T),
    /// The receiver left the set: the other end is gone and every message was read
    /// (the sender was dropped, or its process exited or was killed), or its stream is
    /// out of step (a [`Selection::Failed`] just before says why). Every receiver that
    /// leaves the set other than by [`Select::remove`] is reported so, once.
    Closed(u64),
    /// Receiving on this receiver failed. After an [`Error::Codec`] (a message that is
    /// not a `T`, dropped with its buffers) the receiver stays in the set, in step; any
    /// other error (a sender killed half-way through a message: [`Error::Malformed`])
    /// is followed by [`Selection::Closed`] for it.
    Failed(u64, Error),
}

impl<T> Selection<T> {
    /// The id of the receiver this is about (as [`Select::add`] gave it).
    pub fn id(&self) -> u64 {
        match self {
            Selection::Message(id, _) | Selection::Closed(id) | Selection::Failed(id, _) => *id,
        }
    }
}

impl<T: DeserializeOwned> Select<T> {
    /// An empty set.
    pub fn new() -> Select<T> {
        Select {
            receivers: BTreeMap::new(),
            next_id: 0,
        }
    }

    /// Adds `receiver`; returns the id that [`Selection`]s about it carry (never
    /// reused by this set).
    pub fn add(&mut self, receiver: Receiver<T>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.receivers.insert(id, receiver);
        id
    }

    /// Takes the receiver `id` out of the set (`None` if it is not there: never added,
    /// removed, or closed).
    pub fn remove(&mut self, id: u64) -> Option<Receiver<T>> {
        self.receivers.remove(&id)
    }

    /// How many receivers the set holds.
    pub fn len(&self) -> usize {
        self.receivers.len()
    }

    /// Whether the set holds no receiver.
    pub fn is_empty(&self) -> bool {
        self.receivers.is_empty()
    }

    /// Waits, without limit, until at least one receiver has a message or is closed;
    /// returns what each one that woke had (one message per receiver per call: call
    /// again for the next). [`Error::InvalidArgument`] on an empty set, which would
    /// wait forever.
    pub fn select(&mut self) -> Result<Vec<Selection<T>>> {
        self.select_within(None)
    }

    /// [`Select::select`], waiting at most `timeout`: [`Error::Timeout`] if no
    /// receiver woke (nothing was read).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::time::Duration;
    ///
    /// let mut set = shmrc::channel::Select::<u8>::new();
    /// assert!(matches!(set.select(), Err(shmrc::Error::InvalidArgument(_))));
    /// let (_tx, rx) = shmrc::channel::channel::<u8>()?;
    /// set.add(rx);
    /// let quiet = set.select_timeout(Duration::from_millis(10));
    /// assert!(matches!(quiet, Err(shmrc::Error::Timeout { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn select_timeout(&mut self, timeout: Duration) -> Result<Vec<Selection<T>>> {
        self.select_within(Some(timeout))
    }

    fn select_within(&mut self, timeout: Option<Duration>) -> Result<Vec<Selection<T>>> {
        if self.is_empty() {
            return Err(Error::InvalidArgument(
                "select over an empty set of receivers would wait forever".to_owned(),
            ));
        }
        let (selected, _) = self.wait(None, timeout)?;
        if selected.is_empty() {
            return Err(Error::Timeout {
                after: timeout.unwrap_or(Duration::MAX),
            });
        }
        Ok(selected)
    }

    /// Waits up to `timeout` (`None`: no limit) until a receiver wakes or `extra` (a
    /// listening socket, say) is readable; returns what the receivers had and whether
    /// `extra` is ready. Empty-handed (and `false`) only when the time ran out.
    pub(crate) fn wait(
        &mut self,
        extra: Option<BorrowedFd<'_>>,
        timeout: Option<Duration>,
    ) -> Result<(Vec<Selection<T>>, bool)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ids: Vec<u64> = self.receivers.keys().copied().collect();
            let mut fds: Vec<BorrowedFd<'_>> =
                self.receivers.values().map(|r| r.stream.as_fd()).collect();
            fds.extend(extra);
            let ready = poll_readable(&fds, left)?;
            drop(fds);
            let extra_ready = extra.is_some() && ready.last().is_some_and(|r| r.readable);
            let mut selected = Vec::new();
            for (id, readiness) in ids.into_iter().zip(&ready) {
                if readiness.readable || readiness.hung_up {
                    self.receive(id, &mut selected);
                }
            }
            if !selected.is_empty() || extra_ready || left.is_some_and(|l| l.is_zero()) {
                return Ok((selected, extra_ready));
            }
            // Interrupted, or a wake-up with nothing whole to read: wait again.
        }
    }

    /// Reads the receiver `id`, which `poll` said has something, into `selected`.
    fn receive(&mut self, id: u64, selected: &mut Vec<Selection<T>>) {
        let Some(receiver) = self.receivers.get(&id) else {
            return;
        };
        match receive_ready(receiver) {
            Ok(message) => selected.push(Selection::Message(id, message)),
            Err(Error::Timeout { .. }) => {} // nothing after all
            Err(Error::Disconnected) => {
                self.receivers.remove(&id);
                selected.push(Selection::Closed(id));
            }
            Err(error @ Error::Codec { .. }) => selected.push(Selection::Failed(id, error)),
            Err(error) => {
                // Out of step (a sender killed half-way through a message, a frame that
                // is not ours): why, then that the receiver is gone.
                self.receivers.remove(&id);
                selected.push(Selection::Failed(id, error));
                selected.push(Selection::Closed(id));
            }
        }
    }
}

/// Receives from a receiver whose socket `poll` reported readable or hung up: what has
/// arrived, without waiting; a message begun but not finished stays in the receiver
/// (`Timeout` here) and the select waits on, so a stopped sender holds up no other.
fn receive_ready<T: DeserializeOwned>(receiver: &Receiver<T>) -> Result<T> {
    receiver.try_recv()
}

impl<T: DeserializeOwned> Default for Select<T> {
    fn default() -> Select<T> {
        Select::new()
    }
}

impl<T> fmt::Debug for Select<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Select")
            .field("ids", &self.receivers.keys().collect::<Vec<_>>())
            .finish()
    }
}
