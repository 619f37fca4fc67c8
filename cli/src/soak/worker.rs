//! The soak's worker process (the hidden `shmrc soak-worker` command): it connects to
//! the soak over a Unix socket and obeys one text command at a time; handles ride along
//! with the messages (`SCM_RIGHTS` for memfds, [`shmrc::transport`]) or, for
//! file_system buffers, as hex bytes in the text.
//!
//! ```text
//! worker → soak   hello <id> <pid>                   (on connect)
//! create <kind> <len> <seed> → created <key> <sum> <name|->   kind: fs, fd, pool-fs, pool-fd
//! share <key>                → shared <sum> + handle
//! share-bytes <key>          → shared <sum> <hex handle>      (file_system buffers)
//! hold <sum> + handle        → held <key>                     attach, check the sum
//! hold-bytes <sum> <hex>     → held <key>
//! verify                     → verified <n>                   re-check every buffer
//! release <key>              → released
//! exit                       → bye                            after releasing everything
//! ```
//! A failed command is answered `gone <why>`, `stale <why>`, `mismatch <why>` or
//! `error <why>`, so that the soak can tell a vanished buffer from a changed one.
//! Buffers are filled from a seeded generator and keep their key until released.

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::Path;

use shmrc::{
    CreateOptions, Error, Namespace, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy, transport,
};

use crate::worker::{checksum, fnv1a};

/// A failure of one command, as the soak classifies it.
enum Failure {
    /// The buffer a handle named was gone ([`Error::Gone`]).
    Gone(Error),
    /// The handle was of an earlier use of its segment ([`Error::Stale`]).
    Stale(Error),
    /// A buffer's bytes were not the ones its creator wrote.
    Mismatch(String),
    /// Anything else.
    Other(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Gone { .. } => Failure::Gone(e),
            Error::Stale { .. } => Failure::Stale(e),
            other => Failure::Other(other.to_string()),
        }
    }
}

impl Failure {
    fn reply(&self) -> String {
        match self {
            Failure::Gone(e) => format!("gone {e}"),
            Failure::Stale(e) => format!("stale {e}"),
            Failure::Mismatch(why) => format!("mismatch {why}"),
            Failure::Other(why) => format!("error {why}"),
        }
    }
}

/// What a worker holds: its buffers by key, and a pool of each strategy.
struct Holdings {
    buffers: BTreeMap<u64, (ShmBuf, u64)>,
    next_key: u64,
    pools: [ShmPool; 2],
    namespace: Namespace,
}

/// The bytes of a buffer of `len` filled from `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut data);
    data
}

/// Runs the worker until `exit` or until the soak goes away.
pub fn run(socket: &Path, id: u32, namespace: &str) -> shmrc::Result<()> {
    let namespace = Namespace::new(namespace)?;
    let stream = UnixStream::connect(socket).map_err(|e| Error::os("connect", e))?;
    let pool = |strategy| {
        let options = CreateOptions::new()
            .strategy(strategy)
            .namespace(namespace.clone());
        ShmPool::new(options, PoolLimits::default())
    };
    let mut holdings = Holdings {
        buffers: BTreeMap::new(),
        next_key: 0,
        pools: [pool(Strategy::FileSystem)?, pool(Strategy::FileDescriptor)?],
        namespace: namespace.clone(),
    };
    let hello = format!("hello {id} {}", std::process::id());
    transport::send(&stream, hello.as_bytes(), vec![])?;
    loop {
        let message = match transport::recv(&stream) {
            Ok(m) => m,
            Err(Error::Disconnected) => return Ok(()),
            Err(e) => return Err(e),
        };
        let command = String::from_utf8_lossy(&message.payload).into_owned();
        if command == "exit" {
            holdings.buffers.clear();
            transport::send(&stream, b"bye", vec![])?;
            return Ok(());
        }
        let (reply, handles) = match holdings.obey(&command, message.handles) {
            Ok(answer) => answer,
            Err(failure) => (failure.reply(), Vec::new()),
        };
        transport::send(&stream, reply.as_bytes(), handles)?;
    }
}

impl Holdings {
    fn obey(
        &mut self,
        command: &str,
        mut handles: Vec<ShareHandle>,
    ) -> Result<(String, Vec<ShareHandle>), Failure> {
        let mut words = command.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let reply = match verb {
            "create" => {
                let kind = words.next().unwrap_or_default().to_owned();
                let len: usize = parse(words.next())?;
                let seed: u64 = parse(words.next())?;
                let buf = self.create(&kind, len)?;
                let data = pattern(len, seed);
                buf.write_at(0, &data)?;
                let sum = fnv1a(&data);
                let name = buf.name().unwrap_or("-").to_owned();
                format!("created {} {sum} {name}", self.keep(buf, sum))
            }
            "share" | "share-bytes" => {
                let key: u64 = parse(words.next())?;
                let (buf, sum) = self
                    .buffers
                    .get(&key)
                    .ok_or_else(|| Failure::Other(format!("no buffer {key}")))?;
                let handle = buf.share()?;
                if verb == "share" {
                    return Ok((format!("shared {sum}"), vec![handle]));
                }
                format!("shared {sum} {}", hex::encode(handle.into_bytes()?))
            }
            "hold" | "hold-bytes" => {
                let expected: u64 = parse(words.next())?;
                let handle = if verb == "hold" {
                    handles
                        .pop()
                        .ok_or_else(|| Failure::Other("hold without a handle".into()))?
                } else {
                    let text = words.next().unwrap_or_default();
                    let bytes =
                        hex::decode(text).map_err(|e| Failure::Other(format!("not hex ({e})")))?;
                    ShareHandle::from_bytes(&bytes)?
                };
                let buf = ShmBuf::attach(handle)?;
                let found = checksum(&buf)?;
                if found != expected {
                    return Err(Failure::Mismatch(format!(
                        "attached {}: checksum {found:#x}, expected {expected:#x}",
                        buf.name().unwrap_or("a memfd")
                    )));
                }
                format!("held {}", self.keep(buf, expected))
            }
            "verify" => {
                for (key, (buf, expected)) in &self.buffers {
                    let found = checksum(buf)?;
                    if found != *expected {
                        return Err(Failure::Mismatch(format!(
                            "buffer {key} ({}): checksum {found:#x}, expected {expected:#x}",
                            buf.name().unwrap_or("a memfd")
                        )));
                    }
                }
                format!("verified {}", self.buffers.len())
            }
            "release" => {
                let key: u64 = parse(words.next())?;
                let (buf, _) = self
                    .buffers
                    .remove(&key)
                    .ok_or_else(|| Failure::Other(format!("no buffer {key}")))?;
                buf.release()?;
                "released".into()
            }
            other => return Err(Failure::Other(format!("unknown command {other:?}"))),
        };
        Ok((reply, Vec::new()))
    }

    /// A new buffer of `kind` (`fs`, `fd`, `pool-fs`, `pool-fd`).
    fn create(&self, kind: &str, len: usize) -> Result<ShmBuf, Failure> {
        let plain = |strategy| {
            let options = CreateOptions::new()
                .strategy(strategy)
                .namespace(self.namespace.clone());
            ShmBuf::with_options(len, &options)
        };
        Ok(match kind {
            "fs" => plain(Strategy::FileSystem)?,
            "fd" => plain(Strategy::FileDescriptor)?,
            "pool-fs" => self.pools[0].get(len)?,
            "pool-fd" => self.pools[1].get(len)?,
            other => return Err(Failure::Other(format!("unknown kind {other:?}"))),
        })
    }

    fn keep(&mut self, buf: ShmBuf, sum: u64) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        self.buffers.insert(key, (buf, sum));
        key
    }
}

fn parse<T: std::str::FromStr>(word: Option<&str>) -> Result<T, Failure> {
    word.and_then(|w| w.parse().ok())
        .ok_or_else(|| Failure::Other(format!("bad argument {word:?}")))
}
