//! Many clients on one name: a [`Listener`] accepts any number of connections, each a
//! channel of its own ([`Connection`]: a [`Sender`], a [`Receiver`] and who the client
//! is). It is bound like a [`OneShotServer`](super::OneShotServer) (the naming and the
//! peer check are the bootstrap's [`Endpoint`]): a fresh abstract name, or a service
//! name in the user's private runtime directory; clients of this user only, each
//! checked by `SO_PEERCRED`. A client that dies is noticed on its channel: its
//! [`Receiver`] returns [`Error::Disconnected`], and a [`Select`](super::Select) over the
//! receivers reports it as [`Selection::Closed`](super::Selection::Closed).

use std::fmt;
use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::bootstrap::{Endpoint, pair};
use super::{Receiver, Sender};
use crate::error::{Error, Result};

/// A listener for any number of clients, each of which calls
/// [`connect`](super::connect) with [`Listener::name`] (or with
/// [`service_name`](super::service_name) of the service it was bound as). `T`s go to
/// the clients, `U`s come from them.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::channel::{Listener, connect};
/// use std::time::Duration;
///
/// let listener = Listener::<u32, String>::new()?;
/// let clients: Vec<_> = (0..3)
///     .map(|_| {
///         let name = listener.name().to_owned();
///         // in other processes (here threads):
///         std::thread::spawn(move || -> shmrc::Result<u32> {
///             let (to_server, from_server) = connect::<String, u32>(&name)?;
///             to_server.send(&"hello".to_owned())?;
///             from_server.recv()
///         })
///     })
///     .collect();
/// for _ in 0..3 {
///     let client = listener.accept_timeout(Duration::from_secs(10))?;
///     assert_eq!(client.uid, nix::unistd::geteuid().as_raw());
///     let hello = client.receiver.recv()?;
///     client.sender.send(&(hello.len() as u32))?;
/// }
/// for client in clients {
///     assert_eq!(client.join().unwrap()?, 5);
/// }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Listener<T, U> {
    endpoint: Endpoint,
    types: PhantomData<fn(T) -> U>,
}

/// One accepted client: the channel to it and who it is (from `SO_PEERCRED`, taken
/// when it connected).
pub struct Connection<T, U> {
    /// Sends `T`s to the client.
    pub sender: Sender<T>,
    /// Receives the client's `U`s; [`Error::Disconnected`] once it is gone.
    pub receiver: Receiver<U>,
    /// The client's pid (in this process's pid namespace; 0 when it has none here).
    pub pid: u32,
    /// The client's effective uid (always this process's: others are refused).
    pub uid: u32,
}

impl<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned> Listener<T, U> {
    /// Listens on a fresh abstract socket (like [`OneShotServer::new`]), gone with
    /// this process; pass [`Listener::name`] to the clients.
    ///
    /// [`OneShotServer::new`]: super::OneShotServer::new
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let listener = shmrc::channel::Listener::<u8, u8>::new()?;
    /// assert!(listener.name().starts_with("shmrc-channel."));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new() -> Result<Listener<T, U>> {
        Ok(Listener {
            endpoint: Endpoint::fresh()?,
            types: PhantomData,
        })
    }

    /// Listens as `service`: a socket file (mode `0600`) in this user's runtime
    /// directory, at [`service_name`](super::service_name)`(service)`, removed when the
    /// listener is dropped. A bad service name is [`Error::InvalidArgument`]; one a
    /// live listener already serves (it holds the `flock` of `channel.<service>.lock`
    /// beside the socket) is [`Error::Bootstrap`]; a socket file left by a dead one is
    /// replaced.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::channel::{Listener, connect, service_name};
    ///
    /// let service = format!("doc-jobs-{}", std::process::id());
    /// let listener = Listener::<u8, u8>::bind(&service)?;
    /// assert_eq!(listener.name(), service_name(&service)?);
    /// let (_tx, _rx) = connect::<u8, u8>(&service_name(&service)?)?;
    /// // One listener per service: a second is refused while the first lives.
    /// assert!(matches!(Listener::<u8, u8>::bind(&service), Err(shmrc::Error::Bootstrap { .. })));
    /// assert!(matches!(Listener::<u8, u8>::bind("a/b"), Err(shmrc::Error::InvalidArgument(_))));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn bind(service: &str) -> Result<Listener<T, U>> {
        Ok(Listener {
            endpoint: Endpoint::service(service)?,
            types: PhantomData,
        })
    }

    /// The name clients pass to [`connect`](super::connect).
    pub fn name(&self) -> &str {
        self.endpoint.name()
    }

    /// Waits, without limit, for the next client of this user (others are refused and
    /// waited past).
    pub fn accept(&self) -> Result<Connection<T, U>> {
        self.accept_within(None)
    }

    /// Waits up to `timeout` for the next client of this user: [`Error::Timeout`] if
    /// none came (nothing changed; call again).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::time::Duration;
    ///
    /// let listener = shmrc::channel::Listener::<u8, u8>::new()?;
    /// let nobody = listener.accept_timeout(Duration::from_millis(20));
    /// assert!(matches!(nobody, Err(shmrc::Error::Timeout { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Connection<T, U>> {
        self.accept_within(Some(timeout))
    }

    /// The clients as they come, without end: [`Listener::accept`] in a loop.
    ///
    /// ```no_run
    /// # fn main() -> shmrc::Result<()> {
    /// let listener = shmrc::channel::Listener::<String, String>::bind("echo")?;
    /// for client in listener.incoming() {
    ///     let client = client?;
    ///     std::thread::spawn(move || {
    ///         while let Ok(line) = client.receiver.recv() {
    ///             if client.sender.send(&line).is_err() {
    ///                 break;
    ///             }
    ///         }
    ///     });
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn incoming(&self) -> Incoming<'_, T, U> {
        Incoming { listener: self }
    }

    /// The listening socket: readable when a client waits to be accepted.
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.endpoint.as_fd()
    }

    fn accept_within(&self, timeout: Option<Duration>) -> Result<Connection<T, U>> {
        let (stream, peer) =
            self.endpoint
                .accept_peer(timeout, None, None)?
                .ok_or(Error::Timeout {
                    after: timeout.unwrap_or(Duration::MAX),
                })?;
        let (sender, receiver) = pair(stream)?;
        Ok(Connection {
            sender,
            receiver,
            pid: peer.pid,
            uid: peer.uid,
        })
    }
}

/// The clients of a [`Listener`], as they connect ([`Listener::incoming`]).
pub struct Incoming<'a, T, U> {
    listener: &'a Listener<T, U>,
}

impl<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned> Iterator
    for Incoming<'_, T, U>
{
    type Item = Result<Connection<T, U>>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.listener.accept())
    }
}

impl<T, U> fmt::Debug for Listener<T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.endpoint.name())
            .finish_non_exhaustive()
    }
}

impl<T, U> fmt::Debug for Connection<T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("pid", &self.pid)
            .field("uid", &self.uid)
            .finish_non_exhaustive()
    }
}

impl<T, U> fmt::Debug for Incoming<'_, T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("listener", self.listener)
            .finish()
    }
}
