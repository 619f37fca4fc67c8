//! What can go wrong in a comparison run, each naming its cause.

use std::fmt;

/// A comparison run's failure.
#[derive(Debug)]
pub enum Error {
    /// A command-line argument the harness cannot use.
    BadArgument(String),
    /// A subscriber process that died, hung or said something unexpected.
    Peer(String),
    /// An iceoryx2 call failed (its error, as iceoryx2 prints it).
    Iceoryx2(String),
    /// A shmrc call failed.
    Shmrc(shmrc::Error),
    /// A system call of the harness itself failed.
    Io(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadArgument(why) => write!(f, "bad argument: {why}"),
            Error::Peer(why) => write!(f, "subscriber process: {why}"),
            Error::Iceoryx2(why) => write!(f, "iceoryx2: {why}"),
            Error::Shmrc(e) => write!(f, "shmrc: {e}"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<shmrc::Error> for Error {
    fn from(e: shmrc::Error) -> Error {
        Error::Shmrc(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e)
    }
}

/// An iceoryx2 result as ours, saying which call failed.
pub fn iox<T, E: fmt::Debug>(what: &str, r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::Iceoryx2(format!("{what}: {e:?}")))
}

/// A comparison run's result.
pub type Result<T> = std::result::Result<T, Error>;
