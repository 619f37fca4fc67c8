//! Request/response on top of [`Listener`] and [`Select`]: a [`Client`] `call`s and
//! waits for the answer to that call; a [`Server`] accepts any number of clients and
//! answers each request with a handler. Each request carries a call number that its
//! answer repeats, so an answer that comes after its [`Client::call_timeout`] gave up
//! is recognised and skipped, never taken for the next call's. Requests and answers
//! are channel messages: their [`ShmBuf`](crate::ShmBuf)s and
//! [`FrozenBuf`](crate::FrozenBuf)s travel zero-copy.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Listener, Receiver, Select, Selection, Sender, connect};
use crate::error::{Error, Result};

/// A request or an answer on the wire: the call number, then the message.
type Numbered<M> = (u64, M);

/// The calling side: one connection to a [`Server`].
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::channel::request::{Client, Server};
/// use std::time::Duration;
///
/// let mut server = Server::<String, usize>::new()?;
/// let name = server.name().to_owned();
/// // in another process (here a thread):
/// let caller = std::thread::spawn(move || -> shmrc::Result<usize> {
///     let mut client = Client::<String, usize>::connect(&name)?;
///     client.call("four".to_owned())
/// });
/// while !caller.is_finished() {
///     server.serve_timeout(Duration::from_millis(50), |text| text.len())?;
/// }
/// assert_eq!(caller.join().unwrap()?, 4);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Client<Req, Resp> {
    requests: Sender<Numbered<Req>>,
    answers: Receiver<Numbered<Resp>>,
    last_call: u64,
}

impl<Req: Serialize + DeserializeOwned, Resp: Serialize + DeserializeOwned> Client<Req, Resp> {
    /// Connects to the server named `name` (its [`Server::name`], or
    /// [`service_name`](super::service_name) of the service it was bound as).
    /// [`Error::Bootstrap`] if nobody serves it.
    pub fn connect(name: &str) -> Result<Client<Req, Resp>> {
        let (requests, answers) = connect(name)?;
        Ok(Client {
            requests,
            answers,
            last_call: 0,
        })
    }

    /// Sends `request` and waits, without limit, for its answer.
    /// [`Error::Disconnected`] when the server is gone (before or during the call).
    pub fn call(&mut self, request: Req) -> Result<Resp> {
        self.call_within(request, None)
    }

    /// [`Client::call`], waiting at most `timeout` for the answer: [`Error::Timeout`]
    /// if it did not come (a late one is skipped by the next call).
    pub fn call_timeout(&mut self, request: Req, timeout: Duration) -> Result<Resp> {
        self.call_within(request, Some(timeout))
    }

    fn call_within(&mut self, request: Req, timeout: Option<Duration>) -> Result<Resp> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.last_call += 1;
        let call = self.last_call;
        self.requests.send(&(call, request))?;
        loop {
            let (answered, answer) = match deadline {
                None => self.answers.recv()?,
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.answers.recv_timeout(left).map_err(|e| match e {
                        Error::Timeout { .. } => Error::Timeout {
                            after: timeout.unwrap_or_default(),
                        },
                        other => other,
                    })?
                }
            };
            if answered == call {
                return Ok(answer);
            }
            // The answer to an earlier call that timed out: skip it.
        }
    }
}

/// The answering side: a [`Listener`] whose clients' requests are answered by a
/// handler, all of them waited on by one [`Select`].
pub struct Server<Req, Resp> {
    listener: Listener<Numbered<Resp>, Numbered<Req>>,
    requests: Select<Numbered<Req>>,
    answer_to: HashMap<u64, Sender<Numbered<Resp>>>,
}

impl<Req: Serialize + DeserializeOwned, Resp: Serialize + DeserializeOwned> Server<Req, Resp> {
    /// Serves on a fresh abstract name ([`Listener::new`]).
    pub fn new() -> Result<Server<Req, Resp>> {
        Ok(Server::over(Listener::new()?))
    }

    /// Serves as `service` ([`Listener::bind`]).
    pub fn bind(service: &str) -> Result<Server<Req, Resp>> {
        Ok(Server::over(Listener::bind(service)?))
    }

    fn over(listener: Listener<Numbered<Resp>, Numbered<Req>>) -> Server<Req, Resp> {
        Server {
            listener,
            requests: Select::new(),
            answer_to: HashMap::new(),
        }
    }

    /// The name clients pass to [`Client::connect`].
    pub fn name(&self) -> &str {
        self.listener.name()
    }

    /// How many clients are connected (a client that is gone is counted until a
    /// `serve` call notices it).
    pub fn clients(&self) -> usize {
        self.answer_to.len()
    }

    /// Answers requests with `handler`, without end: returns only with an error of the
    /// listener or the poll (a client that fails or goes away is dropped, not an error).
    pub fn serve(&mut self, mut handler: impl FnMut(Req) -> Resp) -> Result<()> {
        loop {
            self.serve_within(None, &mut handler)?;
        }
    }

    /// Waits up to `timeout` for something to do, then does all of it: accepts the
    /// clients that connected, answers every request that arrived with `handler`, and
    /// drops the clients that are gone. Returns how many requests it answered (0 when
    /// the time ran out with nothing to do: not an error).
    pub fn serve_timeout(
        &mut self,
        timeout: Duration,
        mut handler: impl FnMut(Req) -> Resp,
    ) -> Result<usize> {
        self.serve_within(Some(timeout), &mut handler)
    }

    fn serve_within(
        &mut self,
        timeout: Option<Duration>,
        handler: &mut impl FnMut(Req) -> Resp,
    ) -> Result<usize> {
        let (selected, connecting) = self.requests.wait(Some(self.listener.as_fd()), timeout)?;
        if connecting {
            // Accepts the client waiting (a refused other user leaves nothing).
            match self.listener.accept_timeout(Duration::ZERO) {
                Ok(client) => {
                    let id = self.requests.add(client.receiver);
                    self.answer_to.insert(id, client.sender);
                }
                Err(Error::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut answered = 0;
        for selection in selected {
            match selection {
                Selection::Message(id, (call, request)) => {
                    let answer = handler(request);
                    let sent = self.answer_to.get(&id).map(|to| to.send(&(call, answer)));
                    match sent {
                        Some(Ok(())) => answered += 1,
                        // Gone, or an answer that cannot be encoded: drop the client.
                        Some(Err(_)) | None => self.drop_client(id),
                    }
                }
                Selection::Closed(id) => self.drop_client(id),
                // A request that is not a `Req`: the client is out of step with us.
                Selection::Failed(id, _) => self.drop_client(id),
            }
        }
        Ok(answered)
    }

    fn drop_client(&mut self, id: u64) {
        self.requests.remove(id);
        // Dropping the sender gives back what it had in flight to a dead client.
        self.answer_to.remove(&id);
    }
}

impl<Req, Resp> fmt::Debug for Client<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("last_call", &self.last_call)
            .finish_non_exhaustive()
    }
}

impl<Req, Resp> fmt::Debug for Server<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("clients", &self.answer_to.len())
            .finish_non_exhaustive()
    }
}
