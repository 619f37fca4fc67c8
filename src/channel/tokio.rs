//! Async ends of a channel on tokio (feature `tokio`): [`AsyncReceiver::recv`] waits
//! for a message without holding a thread, [`AsyncSender::send`] writes on tokio's
//! blocking pool so that a full socket never stalls the runtime.
//!
//! # Safety
//! One `unsafe` call: registering a descriptor with tokio's reactor
//! (`AsyncFd::register_with_interest`), whose contract is that the descriptor stays open
//! and the same for the registration's life. It is an `OwnedFd` (a duplicate of the
//! receiver's socket) that the `AsyncFd` owns until it is dropped.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{Receiver, Sender};
use crate::error::{Error, Result};
use crate::manager::sys::poll_readable;

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

/// The async receiving end: waits for a message with tokio's reactor, then reads it
/// (a message is written in one go, so a begun one is read to its end).
///
/// `recv` is cancel-safe: dropping its future before it returns consumes nothing.
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
        })
    }

    /// The next message, with its buffers attached: [`Receiver::recv`] without
    /// holding a thread while waiting.
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
            // The reactor's readiness may be stale (a message already read): look now.
            let now = poll_readable(&[self.inner.stream.as_fd()], Some(Duration::ZERO))?;
            if now.first().is_some_and(|r| r.readable || r.hung_up) {
                return self.inner.recv();
            }
            guard.clear_ready();
        }
    }
}
