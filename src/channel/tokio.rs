//! Async ends of a channel on tokio (feature `tokio`): [`AsyncReceiver::recv`] (and
//! its [`Stream`]) waits for and reads a message without holding a thread, keeping a
//! partly received one in the receiver across polls; [`AsyncSender::send`] writes on
//! tokio's blocking pool so that a full socket never stalls the runtime.
//!
//! # Safety
//! One `unsafe` call: registering a descriptor with tokio's reactor
//! (`AsyncFd::register_with_interest`), whose contract is that the descriptor stays open
//! and the same for the registration's life. It is an `OwnedFd` (a duplicate of the
//! receiver's socket) that the `AsyncFd` owns until it is dropped.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{Receiver, Sender};
use crate::error::{Error, Result};

/// The async sending end: a [`Sender`] whose `send` runs on tokio's blocking pool.
/// Cloning is cheap; messages from clones never interleave.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use shmrc::channel::{AsyncReceiver, AsyncSender, channel};
///
/// let (tx, rx) = channel::<String>()?;
/// let (tx, rx) = (AsyncSender::new(tx), AsyncReceiver::new(rx)?);
/// tx.send("hello".to_owned()).await?;
/// assert_eq!(rx.recv().await?, "hello");
/// # Ok::<(), shmrc::Error>(())
/// # }).unwrap();
/// ```
pub struct AsyncSender<T> {
    inner: Arc<Sender<T>>,
}

impl<T> Clone for AsyncSender<T> {
    fn clone(&self) -> AsyncSender<T> {
        AsyncSender {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: Serialize + Send + 'static> AsyncSender<T> {
    /// Wraps a [`Sender`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let (tx, _rx) = shmrc::channel::channel::<u8>()?;
    /// let _async_tx = shmrc::channel::AsyncSender::new(tx);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(sender: Sender<T>) -> AsyncSender<T> {
        AsyncSender {
            inner: Arc::new(sender),
        }
    }

    /// [`Sender::send`] on tokio's blocking pool. Once called, the message is sent
    /// even if this future is dropped before it completes.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (tx, rx) = shmrc::channel::channel::<shmrc::ShmBuf>()?;
    /// let tx = shmrc::channel::AsyncSender::new(tx);
    /// tx.send(shmrc::ShmBuf::new(64)?).await?;
    /// assert_eq!(rx.recv()?.len(), 64);
    /// # Ok::<(), shmrc::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn send(&self, msg: T) -> Result<()> {
        let sender = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || sender.send(&msg))
            .await
            .map_err(|e| Error::os("spawn_blocking", std::io::Error::other(e.to_string())))?
    }
}

/// The async receiving end: reads each message as its bytes arrive, waiting with
/// tokio's reactor between them, so no runtime thread ever waits on a sender (one that
/// stops half-way included). Also a [`Stream`] of messages.
///
/// `recv` is cancel-safe: dropping its future before it returns consumes nothing (what
/// arrived of a message stays in the receiver).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
///
/// let (tx, rx) = shmrc::channel::channel::<u32>()?;
/// let rx = shmrc::channel::AsyncReceiver::new(rx)?;
/// let waited = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
/// assert!(waited.is_err()); // nothing sent yet; nothing consumed
/// tx.send(&7)?;
/// assert_eq!(rx.recv().await?, 7);
/// # Ok::<(), shmrc::Error>(())
/// # }).unwrap();
/// ```
pub struct AsyncReceiver<T> {
    inner: Receiver<T>,
    readiness: AsyncFd<OwnedFd>,
    /// Whether the stream has ended (the sending end gone): it stays ended.
    ended: bool,
}

impl<T: DeserializeOwned> AsyncReceiver<T> {
    /// Wraps a [`Receiver`]; must be called inside a tokio runtime (with IO enabled),
    /// else [`Error::Os`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let (_tx, rx) = shmrc::channel::channel::<u8>()?;
    /// // Outside a runtime there is no reactor to wait with.
    /// assert!(shmrc::channel::AsyncReceiver::new(rx).is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(receiver: Receiver<T>) -> Result<AsyncReceiver<T>> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::os(
                "AsyncReceiver::new",
                std::io::Error::other("not inside a tokio runtime"),
            ));
        }
        let fd = receiver
            .stream
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::os("dup", e))?;
        // SAFETY: `fd` is an `OwnedFd` moved into the `AsyncFd`, which owns it until it
        // is dropped: it stays open, and `as_raw_fd` returns the same number throughout.
        let readiness = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| Error::os("epoll_ctl", e.into_parts().1))?;
        Ok(AsyncReceiver {
            inner: receiver,
            readiness,
            ended: false,
        })
    }

    /// The next message, with its buffers attached: [`Receiver::recv`] without
    /// holding a thread, neither while waiting for a message nor inside one. Each
    /// readiness event reads what the socket has without blocking; a sender that stops
    /// half-way leaves what arrived in this receiver (bytes and descriptors) and the
    /// runtime thread free.
    ///
    /// Cancel-safe: the partial message lives in the receiver, not in the future, so
    /// dropping the future (a `select!` branch that lost, a `timeout`) consumes nothing,
    /// and the next `recv` continues where it stopped.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (tx, rx) = shmrc::channel::channel::<u8>()?;
    /// let rx = shmrc::channel::AsyncReceiver::new(rx)?;
    /// drop(tx);
    /// assert!(matches!(rx.recv().await, Err(shmrc::Error::Disconnected)));
    /// # Ok::<(), shmrc::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn recv(&self) -> Result<T> {
        loop {
            let mut guard = self
                .readiness
                .readable()
                .await
                .map_err(|e| Error::os("epoll_wait", e))?;
            if let Ok(outcome) = guard.try_io(|_| self.read_available()) {
                return outcome.map_err(|e| Error::os("recvmsg", e))?;
            }
        }
    }

    /// One non-blocking step: `Err(WouldBlock)` (which clears the reactor's readiness
    /// in `try_io`) when the message is still to come, else its outcome.
    fn read_available(&self) -> std::io::Result<Result<T>> {
        match self.inner.read_available() {
            Ok(Some(message)) => Ok(Ok(message)),
            Ok(None) => Err(std::io::ErrorKind::WouldBlock.into()),
            Err(e) => Ok(Err(e)),
        }
    }
}

/// The messages as a [`Stream`] (`futures_core`'s, which `tokio_stream::StreamExt`
/// and `futures::StreamExt` extend): each item is what [`AsyncReceiver::recv`] would
/// return, and the stream ends (`None`, for good) when the sending end is gone and
/// every message was read. Other errors are items; after one that leaves the
/// connection out of step (anything but [`Error::Codec`]) the next items are likely
/// errors too: stop there.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::future::poll_fn;
/// use std::pin::Pin;
/// use futures_core::Stream;
///
/// let (tx, rx) = shmrc::channel::channel::<u32>()?;
/// let mut rx = shmrc::channel::AsyncReceiver::new(rx)?;
/// tx.send(&1)?;
/// tx.send(&2)?;
/// drop(tx);
/// let mut got = Vec::new();
/// while let Some(item) = poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)).await {
///     got.push(item?);
/// }
/// assert_eq!(got, [1, 2]);
/// # Ok::<(), shmrc::Error>(())
/// # }).unwrap();
/// ```
impl<T: DeserializeOwned> Stream for AsyncReceiver<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<T>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            let mut guard = match self.readiness.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(Error::os("epoll_wait", e)))),
            };
            if let Ok(outcome) = guard.try_io(|_| self.read_available()) {
                let item = outcome.unwrap_or_else(|e| Err(Error::os("recvmsg", e)));
                if matches!(item, Err(Error::Disconnected)) {
                    self.ended = true;
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(item));
            }
        }
    }
}
