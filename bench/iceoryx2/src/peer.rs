//! The subscriber processes: this program re-executed as `child ARGS...`, its stdin
//! one end of a Unix socket pair whose other end the publisher keeps (the control
//! socket: readiness, "holding", and for the floor and shmrc's pooled hand-off the
//! data path itself). A peer that dies or says nothing for [`PEER_TIMEOUT`] is an
//! [`Error::Peer`] naming which and how it ended; a peer still running when its
//! [`Peer`] is dropped is killed (by its pid) and reaped. The run's iceoryx2 domain and
//! shmrc namespace reach the peers through the environment ([`DOMAIN_ENV`],
//! [`NAMESPACE_ENV`]).

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};

/// How long a peer may take to answer before the run fails.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(20);

/// What a peer writes once it is set up.
pub const READY: u8 = b'R';
/// What a peer writes once it holds the samples of a recovery trial.
pub const HOLDING: u8 = b'H';

/// The variable that names the run's iceoryx2 domain to its subscriber processes.
pub const DOMAIN_ENV: &str = "SHMRC_COMPARE_IOX2_DOMAIN";

/// The run's own iceoryx2 domain (the file prefix in `/dev/shm` and the root directory
/// `/tmp/DOMAIN`): the publisher's process id, so that nothing of another iceoryx2 user
/// is touched and `iox::remove_domain` can remove everything the run left.
pub fn domain() -> String {
    std::env::var(DOMAIN_ENV).unwrap_or_else(|_| format!("shmrc_compare_{}_", std::process::id()))
}

/// The variable that names the run's shmrc namespace to its subscriber processes.
pub const NAMESPACE_ENV: &str = "SHMRC_COMPARE_NAMESPACE";

/// The name of the run's shmrc namespace (the publisher's process id).
pub fn namespace_name() -> String {
    std::env::var(NAMESPACE_ENV).unwrap_or_else(|_| format!("shmrc-compare-{}", std::process::id()))
}

/// One subscriber process and the publisher's end of its control socket.
pub struct Peer {
    child: Child,
    /// The control socket (reads time out after [`PEER_TIMEOUT`]).
    pub control: UnixStream,
    name: String,
}

impl Peer {
    /// Starts `program child ARGS...` with the other end of a fresh control socket as
    /// its stdin.
    pub fn spawn(program: &std::path::Path, args: &[String]) -> Result<Peer> {
        let (mine, theirs) = UnixStream::pair()?;
        mine.set_read_timeout(Some(PEER_TIMEOUT))?;
        let child = Command::new(program)
            .arg("child")
            .env(DOMAIN_ENV, domain())
            .env(NAMESPACE_ENV, namespace_name())
            .args(args)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Peer {
            child,
            control: mine,
            name: format!("child {}", args.join(" ")),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the byte `what` on the control socket.
    pub fn expect(&mut self, what: u8) -> Result<()> {
        let mut byte = [0u8];
        match self.control.read(&mut byte) {
            Ok(1) if byte[0] == what => Ok(()),
            Ok(1) => Err(Error::Peer(format!(
                "{} said {:?}, expected {:?}",
                self.name, byte[0] as char, what as char
            ))),
            Ok(_) => Err(self.died("closed its control socket")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(Error::Peer(format!(
                "{} said nothing for {PEER_TIMEOUT:?}",
                self.name
            ))),
            Err(e) => Err(self.died(&format!("control socket failed ({e})"))),
        }
    }

    /// Writes `bytes` on the control socket.
    pub fn tell(&mut self, bytes: &[u8]) -> Result<()> {
        self.control
            .write_all(bytes)
            .map_err(|e| self.died(&format!("could not be written to ({e})")))
    }

    fn died(&mut self, how: &str) -> Error {
        let status = match self.child.wait() {
            Ok(status) => format!("{status}"),
            Err(e) => format!("unknown status ({e})"),
        };
        Error::Peer(format!("{} {how}; it exited: {status}", self.name))
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Waits (at most [`PEER_TIMEOUT`]) for the process to exit by itself; an error
    /// naming its status if it failed or had to be killed.
    pub fn finish(mut self) -> Result<()> {
        let deadline = std::time::Instant::now() + PEER_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(Error::Peer(format!("{} failed: {status}", self.name)))
                };
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::Peer(format!("{} did not exit", self.name)));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// In a peer: the control socket (its stdin).
pub fn control_socket() -> Result<UnixStream> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned()?;
    Ok(UnixStream::from(fd))
}

/// In a peer: blocks until the publisher closes the control socket (or kills us).
pub fn wait_for_close(control: &mut UnixStream) {
    let mut rest = Vec::new();
    let _ = control.read_to_end(&mut rest);
}
