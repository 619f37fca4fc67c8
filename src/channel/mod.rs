//! Typed channels between processes (feature `channel`): [`channel`] makes a connected
//! [`Sender`]/[`Receiver`] pair, [`spawn`] starts a child `Command` with a channel to
//! it, and [`OneShotServer`]/[`connect`] join any two processes of this user.
//! A [`Listener`] accepts any number of clients (each a channel), a [`Select`] waits
//! on many receivers at once, and [`request`] answers calls on top of both.
//!
//! A message is any `T: Serialize + DeserializeOwned`, encoded with
//! [postcard](https://docs.rs/postcard) (compact, not self-describing). [`ShmBuf`]s and
//! [`FrozenBuf`]s inside it travel *out of band*: the encoding holds an index, and the
//! buffer goes as a share handle in the same [`transport`] message:
//! file_descriptor memfds batched over `SCM_RIGHTS` (253 per frame), file_system
//! handles as bytes. Receiving attaches them, so the receiver gets working buffers of
//! its own, zero-copy.
//!
//! ```
//! # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
//! use serde::{Deserialize, Serialize};
//! use shmrc::{FrozenBuf, ShmBufMut};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Batch {
//!     step: u64,
//!     shape: Vec<usize>,
//!     features: FrozenBuf,
//! }
//!
//! let (tx, rx) = shmrc::channel::channel::<Batch>()?;
//! let mut data = ShmBufMut::new(2 * 3 * 4)?;
//! data.cast_mut::<f32>()?.copy_from_slice(&[1., 2., 3., 4., 5., 6.]);
//! tx.send(&Batch { step: 7, shape: vec![2, 3], features: data.freeze()? })?;
//!
//! // in the receiving process (here the same one):
//! let batch = rx.recv()?;
//! assert_eq!((batch.step, batch.shape[1]), (7, 3));
//! assert_eq!(batch.features.cast::<f32>()?[5], 6.0);
//! # Ok::<(), shmrc::Error>(())
//! ```
//!
//! # What is guaranteed
//! - A message arrives whole or not at all; its buffers are attached before
//!   [`Receiver::recv`] returns. A message that cannot be decoded is an error, its
//!   buffers released, and the channel stays in step.
//! - A receiver that dies mid-message loses nothing for the others: each channel is
//!   its own socket, and the kernel closes the descriptors that were on their way to
//!   the dead process.
//! - References sent but never received are given back once the receiving end is
//!   gone, not when the sender exits: file_descriptor ones by the kernel (the socket's
//!   queue is freed with it), file_system ones by the [`Sender`], which remembers its
//!   in-flight slots until they are taken over and gives them back when it sees the
//!   receiving end closed (at its next `send`, or when it is dropped). A receiver that
//!   lives on but never reads holds them, as a queue would.
//! - No receive waits on a sender inside a message. A receiver reads what the socket
//!   has (its socket is non-blocking) and keeps a partly received message (bytes and
//!   the descriptors that came with them) between calls: [`Receiver::recv_timeout`]
//!   bounds the *whole* message, and a sender that stops half-way gives
//!   [`Error::Timeout`] after the timeout with what arrived kept, so a later call
//!   continues in step when the sender resumes; `AsyncReceiver::recv` (feature `tokio`)
//!   never holds a runtime thread on a stalled message. A sender killed half-way is an
//!   error, not a hang. A receiver dropped mid-message closes the descriptors it held
//!   and the references come back as for a message never received.

#[cfg(feature = "ndarray")]
mod array;
mod bootstrap;
mod listener;
pub(crate) mod oob;
pub mod request;
mod select;
#[cfg(feature = "tokio")]
mod tokio;

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

#[cfg(doc)]
use crate::buf::{FrozenBuf, ShmBuf};
use crate::error::{Error, Result};
use crate::in_flight::Ledger;
use crate::manager::DefaultOs;
use crate::manager::sys::poll_readable;
use crate::transport::{self, MessageReader};

#[cfg(feature = "tokio")]
pub use self::tokio::{AsyncReceiver, AsyncSender};
pub use bootstrap::{CHANNEL_ENV, OneShotServer, connect, from_parent, service_name, spawn};
pub use listener::{Connection, Incoming, Listener};
pub use select::{Select, Selection};

/// A connected pair in this process: send on one end, receive on the other. Give one
/// end to another process by `fork`, or use [`spawn`] / [`OneShotServer`] to connect a
/// fresh one.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// let (tx, rx) = shmrc::channel::channel::<(String, u32)>()?;
/// tx.send(&("ready".to_owned(), 3))?;
/// assert_eq!(rx.recv()?, ("ready".to_owned(), 3));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn channel<T: Serialize + DeserializeOwned>() -> Result<(Sender<T>, Receiver<T>)> {
    let (a, b) = UnixStream::pair().map_err(|e| Error::os("socketpair", e))?;
    Ok((Sender::from_stream(a), Receiver::from_stream(b)))
}

/// The sending end of a channel of `T`s. `send` takes `&self`: a `Sender` can be
/// shared between threads (messages never interleave).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::ShmBuf;
///
/// let (tx, rx) = shmrc::channel::channel::<Vec<ShmBuf>>()?;
/// let bufs = vec![ShmBuf::new(64)?, ShmBuf::new(128)?];
/// bufs[1].write_at(0, b"second")?;
/// tx.send(&bufs)?; // shares each buffer; this process keeps its own references
/// let got = rx.recv()?;
/// let mut out = [0u8; 6];
/// got[1].read_at(0, &mut out)?;
/// assert_eq!(&out, b"second");
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Sender<T> {
    stream: UnixStream,
    /// The references this sender has in flight (`in_flight.rs`), locked across each
    /// message's encoding: a message's own `Serialize` that sent on this same sender,
    /// or asked its `in_flight`, would wait for it forever.
    ledger: Mutex<Ledger<DefaultOs>>,
    message: PhantomData<fn(T)>,
}

impl<T: Serialize> Sender<T> {
    /// The sending end over a connected Unix stream (its peer must be a [`Receiver`]
    /// of the same `T`).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::channel::{Receiver, Sender};
    /// use std::os::unix::net::UnixStream;
    ///
    /// let (a, b) = UnixStream::pair().unwrap();
    /// let (tx, rx) = (Sender::<u8>::from_stream(a), Receiver::<u8>::from_stream(b));
    /// tx.send(&9)?;
    /// assert_eq!(rx.recv()?, 9);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn from_stream(stream: UnixStream) -> Sender<T> {
        Sender {
            stream,
            ledger: Mutex::new(Ledger::new()),
            message: PhantomData,
        }
    }

    /// Sends `msg`: its plain data encoded, every buffer in it shared (the sender keeps
    /// its own references). [`Error::Disconnected`] when the receiving end is gone
    /// (then the references this channel had in flight are given back); an encoding
    /// error sends nothing.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::Error;
    ///
    /// let (tx, rx) = shmrc::channel::channel::<u64>()?;
    /// tx.send(&1)?;
    /// drop(rx);
    /// assert!(matches!(tx.send(&2), Err(Error::Disconnected)));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn send(&self, msg: &T) -> Result<()> {
        let (bytes, handles) = oob::encode_recorded(&mut self.ledger(), msg)?;
        match transport::send(&self.stream, &bytes, handles) {
            Ok(()) => Ok(()),
            Err(e) => {
                // This message's handles were given back when `send` dropped them.
                if matches!(e, Error::Disconnected) {
                    self.ledger().give_back_all();
                }
                Err(e)
            }
        }
    }

    /// How many file_system (or pooled memfd) references this sender has in flight that
    /// no receiver has taken over yet.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-in-flight")?);
    /// let (tx, rx) = shmrc::channel::channel::<ShmBuf>()?;
    /// tx.send(&ShmBuf::with_options(64, &options)?)?;
    /// assert_eq!(tx.in_flight(), 1);
    /// let _received = rx.recv()?;
    /// assert_eq!(tx.in_flight(), 0);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn in_flight(&self) -> usize {
        self.ledger().pending()
    }
}

impl<T> Sender<T> {
    fn ledger(&self) -> MutexGuard<'_, Ledger<DefaultOs>> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // A receiving end still open may yet read what is in flight: it stays (and goes
        // when this process exits). One that is closed never will: give it back.
        if receiving_end_gone(&self.stream) {
            self.ledger().give_back_all();
        }
        // The peer's `recv` sees the end of the stream even while this process keeps a
        // `Receiver` on the same connection.
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

/// Whether the other end of `stream` can no longer receive (closed, or its receiving
/// half shut down): a zero-byte `send` then fails with `EPIPE` and changes nothing.
fn receiving_end_gone(stream: &UnixStream) -> bool {
    use nix::sys::socket::{MsgFlags, send};
    matches!(
        send(
            stream.as_raw_fd(),
            &[],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT
        ),
        Err(nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET)
    )
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// The receiving end of a channel of `T`s.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::Error;
///
/// let (tx, rx) = shmrc::channel::channel::<u32>()?;
/// tx.send(&5)?;
/// drop(tx);
/// assert_eq!(rx.recv()?, 5);
/// assert!(matches!(rx.recv(), Err(Error::Disconnected))); // the sender is gone
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Receiver<T> {
    stream: UnixStream,
    /// The message being received: what arrived of it so far stays here between calls
    /// (a receive that gave up, an async `recv` dropped, another thread's turn).
    partial: Mutex<MessageReader>,
    /// Why the stream could not be made non-blocking, if it could not: every receive
    /// then fails with it rather than risk blocking on a stalled sender.
    not_nonblocking: Option<io::ErrorKind>,
    message: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Receiver<T> {
    /// The receiving end over a connected Unix stream (its peer must be a [`Sender`]
    /// of the same `T`).
    ///
    /// The stream is switched to non-blocking mode (the flag belongs to the open socket,
    /// so every duplicate of this descriptor shares it; a [`Sender`] on the same
    /// connection waits for room itself): receives wait with `poll`, never inside a read.
    /// If that fails, every receive fails with the cause ([`Error::Os`]).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::channel::{Receiver, Sender};
    /// use std::os::unix::net::UnixStream;
    ///
    /// let (a, b) = UnixStream::pair().unwrap();
    /// let rx = Receiver::<String>::from_stream(b);
    /// Sender::<String>::from_stream(a).send(&"hi".to_owned())?;
    /// assert_eq!(rx.recv()?, "hi");
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn from_stream(stream: UnixStream) -> Receiver<T> {
        let not_nonblocking = stream.set_nonblocking(true).err().map(|e| e.kind());
        Receiver {
            stream,
            partial: Mutex::new(MessageReader::new()),
            not_nonblocking,
            message: PhantomData,
        }
    }

    /// Waits for the next message and returns it with its buffers attached.
    /// [`Error::Disconnected`] once the sending end is gone and every message was read;
    /// [`Error::Codec`] for a message that is not a `T` (dropped, buffers released, the
    /// channel still in step); the transport's errors otherwise
    /// ([`transport::recv`]).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::channel::{Receiver, Sender};
    /// use std::os::unix::net::UnixStream;
    ///
    /// let (a, b) = UnixStream::pair().unwrap();
    /// Sender::<u8>::from_stream(a).send(&200)?;
    /// // The receiving end expects another type: the message is refused, not misread.
    /// assert!(matches!(Receiver::<bool>::from_stream(b).recv(), Err(shmrc::Error::Codec { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn recv(&self) -> Result<T> {
        self.recv_until(None, Duration::MAX)
    }

    /// [`Receiver::recv`], waiting at most `timeout` for the whole message:
    /// [`Error::Timeout`] if it did not arrive in time. What did arrive of a message
    /// (bytes and descriptors) stays in the receiver, and the next receive continues it:
    /// a sender that stops half-way costs a caller `timeout`, never more, and a sender
    /// that resumes is read in step.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::time::Duration;
    ///
    /// let (tx, rx) = shmrc::channel::channel::<u8>()?;
    /// assert!(matches!(rx.recv_timeout(Duration::from_millis(10)), Err(shmrc::Error::Timeout { .. })));
    /// tx.send(&1)?;
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(5))?, 1);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T> {
        // A timeout too long to add to now is no deadline.
        self.recv_until(Instant::now().checked_add(timeout), timeout)
    }

    /// Reads on until a message is whole, waiting with `poll` while the socket is dry,
    /// until `deadline` if there is one (then [`Error::Timeout`] after `timeout`).
    fn recv_until(&self, deadline: Option<Instant>, timeout: Duration) -> Result<T> {
        loop {
            if let Some(message) = self.read_available()? {
                return Ok(message);
            }
            let left = match deadline {
                None => None,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::Timeout { after: timeout });
                    }
                    Some(left)
                }
            };
            poll_readable(&[self.stream.as_fd()], left)?;
        }
    }

    /// Reads what the socket has without waiting: the next message if that made it
    /// whole, `None` if it is still to come (what arrived is kept for the next call).
    /// The lock is held only for the non-blocking reads, never while waiting.
    pub(crate) fn read_available(&self) -> Result<Option<T>> {
        if let Some(kind) = self.not_nonblocking {
            return Err(Error::os("set_nonblocking", kind));
        }
        let message = {
            let mut partial = self.partial.lock().unwrap_or_else(PoisonError::into_inner);
            partial.read_on(&DefaultOs::default(), &self.stream)?
        };
        match message {
            Some(message) => oob::decode(&message.payload, message.handles).map(Some),
            None => Ok(None),
        }
    }

    /// A message if it has arrived whole, else [`Error::Timeout`] at once (what arrived
    /// of one is read and kept for the next call).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let (tx, rx) = shmrc::channel::channel::<u8>()?;
    /// assert!(rx.try_recv().is_err());
    /// tx.send(&4)?;
    /// assert_eq!(rx.try_recv()?, 4);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn try_recv(&self) -> Result<T> {
        self.recv_timeout(Duration::ZERO)
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // The peer's next `send` fails with `Disconnected` (and gives back what it had
        // in flight) even while this process keeps a `Sender` on the same connection.
        let _ = self.stream.shutdown(Shutdown::Read);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}
