//! The manager's wire format: the frames a client and the manager exchange over the
//! manager's Unix socket, their encoders, and decoders that refuse (never panic on) any
//! byte string that is not exactly one well-formed frame.
//!
//! ```text
//! frame   = magic "SHMm" (4) | version u8 | kind u8 | payload length u16 LE | payload
//! string  = length u8 | UTF-8 bytes                      (namespaces: Namespace::new)
//! text    = length u16 LE (at most MAX_TEXT) | UTF-8 bytes
//! Hello   (kind 1) = token u64 | pid u32 | count u8 | count × string
//! Watch   (kind 2) = string
//! Status  (kind 3) = (empty)
//! Created (kind 4) = string                                     (no reply)
//! Attached (kind 5) = segment name: length u8 | UTF-8 bytes     (no reply)
//! Welcome (kind 65) = manager pid u32
//! Refused (kind 66) = text
//! Status  (kind 67) = pid u32 | uptime_ms u64 | clients u32 | clients_ever u64
//!                     | sweeps u64 | reclaimed u64 | unlinked u64 | refused u64
//!                     | runtime_dir text | rows u16 | rows × (pid u32 | connected u8
//!                     | count u8 | count × string)
//! ```
//! All integers little-endian. A request's payload is at most [`MAX_REQUEST_PAYLOAD`]
//! bytes, a reply's at most [`MAX_REPLY_PAYLOAD`].

use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::token::Token;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"SHMm";
/// The version this build speaks (2: Created and Attached, told without a reply).
pub const VERSION: u8 = 2;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 8;
/// The largest request payload accepted.
pub const MAX_REQUEST_PAYLOAD: usize = 4096;
/// The reason a manager at its cap of connections refuses a newcomer with: a client
/// refused for it goes on unwatched (see `client::watch`).
pub const OVER_CAPACITY: &str = "too many connections: the manager is at its cap";
/// The largest reply payload.
pub const MAX_REPLY_PAYLOAD: usize = u16::MAX as usize;
/// The longest text (a refusal's reason, the runtime directory) in bytes.
pub const MAX_TEXT: usize = 4096;
/// The most namespaces one Hello may name.
pub const MAX_HELLO_NAMESPACES: usize = 64;

const KIND_HELLO: u8 = 1;
const KIND_WATCH: u8 = 2;
const KIND_STATUS: u8 = 3;
const KIND_CREATED: u8 = 4;
const KIND_ATTACHED: u8 = 5;
const KIND_WELCOME: u8 = 65;
const KIND_REFUSED: u8 = 66;
const KIND_STATUS_REPLY: u8 = 67;

/// What a client asks.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Request {
    /// Watch this process (`token`, which must be the connecting process) and sweep
    /// `namespaces` when it dies.
    Hello {
        /// The client's token.
        token: Token,
        /// The client's pid (must agree with the token and the socket's peer).
        pid: u32,
        /// The namespaces it uses.
        namespaces: Vec<Namespace>,
    },
    /// The client started using another namespace.
    Watch {
        /// The namespace.
        namespace: Namespace,
    },
    /// Report the manager's counters and clients.
    Status,
    /// The client is about to create segments in `namespace` (their names carry its
    /// token: its death sweeps them without the rest of the namespace). No reply.
    Created {
        /// The namespace.
        namespace: Namespace,
    },
    /// The client is about to attach the segment named `segment` (its death sweeps
    /// it). No reply: told before the attach, off its round trip.
    Attached {
        /// The segment's name (the manager parses it as a segment of its user).
        segment: String,
    },
}

impl Request {
    /// Whether the manager answers it (Created and Attached are told, not asked).
    pub fn wants_reply(&self) -> bool {
        !matches!(self, Request::Created { .. } | Request::Attached { .. })
    }
}

/// What the manager answers.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Reply {
    /// The Hello or Watch was accepted.
    Welcome {
        /// The manager's pid.
        manager_pid: u32,
    },
    /// The request was refused; the connection is then closed.
    Refused {
        /// Why.
        reason: String,
    },
    /// The answer to [`Request::Status`].
    Status(ManagerStatus),
}

/// The manager's state as `shmrc status` shows it: what
/// [`manager::status`](crate::manager::status) returns.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::{self, ManagerMode, ManagerStatus};
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// manager::set_manager_mode(ManagerMode::Auto);
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-manager-status")?);
/// let buf = ShmBuf::with_options(64, &options)?;
/// let status: ManagerStatus = manager::status()?;
/// assert!(status.clients >= 1 && status.clients_ever >= u64::from(status.clients));
/// println!(
///     "manager {} up {} ms: {} sweeps, {} slots reclaimed, {} segments unlinked",
///     status.pid, status.uptime_ms, status.sweeps, status.reclaimed, status.unlinked
/// );
/// # drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ManagerStatus {
    /// The manager's pid.
    pub pid: u32,
    /// Milliseconds since it started.
    pub uptime_ms: u64,
    /// Live clients now.
    pub clients: u32,
    /// Clients ever welcomed.
    pub clients_ever: u64,
    /// Namespace sweeps done.
    pub sweeps: u64,
    /// Dead holders' slots those sweeps reclaimed.
    pub reclaimed: u64,
    /// Segments those sweeps unlinked.
    pub unlinked: u64,
    /// Requests refused.
    pub refused: u64,
    /// The manager's runtime directory.
    pub runtime_dir: String,
    /// One row per live client (as many as fit in a reply).
    #[cfg_attr(feature = "serde", serde(rename = "client_list"))]
    pub rows: Vec<ClientRow>,
}

/// One live client of the manager: a row of [`ManagerStatus::rows`].
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::{self, ClientRow, ManagerMode};
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// manager::set_manager_mode(ManagerMode::Auto);
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-client-row")?);
/// let buf = ShmBuf::with_options(64, &options)?;
/// let status = manager::status()?;
/// let me: &ClientRow = status
///     .rows
///     .iter()
///     .find(|row| row.pid == std::process::id())
///     .expect("this process is watched");
/// assert!(me.connected);
/// assert!(me.namespaces.iter().any(|ns| ns == "shmrc-doc-client-row"));
/// # drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClientRow {
    /// Its pid.
    pub pid: u32,
    /// Whether its connection is still open (a client that closed it stays watched
    /// until it dies).
    pub connected: bool,
    /// The namespaces it registered.
    pub namespaces: Vec<String>,
}

/// Encodes a request as one frame.
pub fn encode_request(request: &Request) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match request {
        Request::Hello {
            token,
            pid,
            namespaces,
        } => {
            p.extend_from_slice(&token.word().to_le_bytes());
            p.extend_from_slice(&pid.to_le_bytes());
            let names = &namespaces[..namespaces.len().min(MAX_HELLO_NAMESPACES)];
            p.push(names.len() as u8);
            for ns in names {
                put_short(&mut p, ns.prefix());
            }
            KIND_HELLO
        }
        Request::Watch { namespace } => {
            put_short(&mut p, namespace.prefix());
            KIND_WATCH
        }
        Request::Status => KIND_STATUS,
        Request::Created { namespace } => {
            put_short(&mut p, namespace.prefix());
            KIND_CREATED
        }
        Request::Attached { segment } => {
            put_short(&mut p, segment);
            KIND_ATTACHED
        }
    };
    frame(kind, p)
}

/// Encodes a reply as one frame (a status reply lists as many client rows as fit).
pub fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match reply {
        Reply::Welcome { manager_pid } => {
            p.extend_from_slice(&manager_pid.to_le_bytes());
            KIND_WELCOME
        }
        Reply::Refused { reason } => {
            put_text(&mut p, reason);
            KIND_REFUSED
        }
        Reply::Status(s) => {
            p.extend_from_slice(&s.pid.to_le_bytes());
            p.extend_from_slice(&s.uptime_ms.to_le_bytes());
            p.extend_from_slice(&s.clients.to_le_bytes());
            for n in [s.clients_ever, s.sweeps, s.reclaimed, s.unlinked, s.refused] {
                p.extend_from_slice(&n.to_le_bytes());
            }
            put_text(&mut p, &s.runtime_dir);
            let count_at = p.len();
            p.extend_from_slice(&0u16.to_le_bytes());
            let mut rows = 0u16;
            for row in &s.rows {
                let mut r = Vec::new();
                r.extend_from_slice(&row.pid.to_le_bytes());
                r.push(u8::from(row.connected));
                let names = &row.namespaces[..row.namespaces.len().min(u8::MAX as usize)];
                r.push(names.len() as u8);
                for ns in names {
                    put_short(&mut r, ns);
                }
                if p.len() + r.len() > MAX_REPLY_PAYLOAD || rows == u16::MAX {
                    break;
                }
                p.extend_from_slice(&r);
                rows += 1;
            }
            p[count_at..count_at + 2].copy_from_slice(&rows.to_le_bytes());
            KIND_STATUS_REPLY
        }
    };
    frame(kind, p)
}

/// The length of the first frame in `buf` when it is complete (`Ok(None)`: more bytes
/// needed), or why the bytes can never start a frame whose payload is at most
/// `max_payload` bytes. A stream reader calls this before decoding.
pub fn frame_len(buf: &[u8], max_payload: usize) -> Result<Option<usize>> {
    let seen = buf.len().min(HEADER_LEN);
    if buf[..seen.min(4)] != MAGIC[..seen.min(4)] {
        return Err(malformed("manager frame", "bad magic"));
    }
    if seen < HEADER_LEN {
        return Ok(None);
    }
    if buf[4] != VERSION {
        return Err(malformed(
            "frame",
            format!("version {} (this build speaks {VERSION})", buf[4]),
        ));
    }
    let len = usize::from(u16::from_le_bytes([buf[6], buf[7]]));
    if len > max_payload {
        return Err(malformed(
            "frame",
            format!("payload of {len} bytes exceeds {max_payload}"),
        ));
    }
    Ok((buf.len() >= HEADER_LEN + len).then_some(HEADER_LEN + len))
}

/// Decodes exactly one request frame.
pub fn decode_request(bytes: &[u8]) -> Result<Request> {
    let (kind, payload) = open_frame(bytes, MAX_REQUEST_PAYLOAD)?;
    let mut r = Reader::new(payload);
    let request = match kind {
        KIND_HELLO => {
            let word = r.u64()?;
            let token = Token::from_word(word).ok_or_else(|| {
                malformed("manager hello", format!("{word:#x} is not a process token"))
            })?;
            let pid = r.u32()?;
            let count = usize::from(r.u8()?);
            if count > MAX_HELLO_NAMESPACES {
                return Err(malformed(
                    "hello",
                    format!("{count} namespaces (at most {MAX_HELLO_NAMESPACES})"),
                ));
            }
            let namespaces = (0..count)
                .map(|_| r.namespace())
                .collect::<Result<Vec<_>>>()?;
            Request::Hello {
                token,
                pid,
                namespaces,
            }
        }
        KIND_WATCH => Request::Watch {
            namespace: r.namespace()?,
        },
        KIND_STATUS => Request::Status,
        KIND_CREATED => Request::Created {
            namespace: r.namespace()?,
        },
        KIND_ATTACHED => {
            let segment = r.short()?;
            if segment.is_empty() || segment.contains('/') {
                return Err(malformed(
                    "attached",
                    format!("{segment:?} is not a segment name"),
                ));
            }
            Request::Attached { segment }
        }
        other => {
            return Err(malformed(
                "manager request",
                format!("unknown kind {other}"),
            ));
        }
    };
    r.finish()?;
    Ok(request)
}

/// Decodes exactly one reply frame.
pub fn decode_reply(bytes: &[u8]) -> Result<Reply> {
    let (kind, payload) = open_frame(bytes, MAX_REPLY_PAYLOAD)?;
    let mut r = Reader::new(payload);
    let reply = match kind {
        KIND_WELCOME => Reply::Welcome {
            manager_pid: r.u32()?,
        },
        KIND_REFUSED => Reply::Refused { reason: r.text()? },
        KIND_STATUS_REPLY => {
            let mut s = ManagerStatus {
                pid: r.u32()?,
                uptime_ms: r.u64()?,
                clients: r.u32()?,
                clients_ever: r.u64()?,
                sweeps: r.u64()?,
                reclaimed: r.u64()?,
                unlinked: r.u64()?,
                refused: r.u64()?,
                runtime_dir: r.text()?,
                rows: Vec::new(),
            };
            for _ in 0..r.u16()? {
                let pid = r.u32()?;
                let connected = match r.u8()? {
                    0 => false,
                    1 => true,
                    b => {
                        return Err(malformed(
                            "manager status reply",
                            format!("connected flag {b}"),
                        ));
                    }
                };
                let namespaces = (0..r.u8()?)
                    .map(|_| r.short())
                    .collect::<Result<Vec<_>>>()?;
                s.rows.push(ClientRow {
                    pid,
                    connected,
                    namespaces,
                });
            }
            Reply::Status(s)
        }
        other => return Err(malformed("manager reply", format!("unknown kind {other}"))),
    };
    r.finish()?;
    Ok(reply)
}

fn frame(kind: u8, payload: Vec<u8>) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_LEN + payload.len());
    f.extend_from_slice(&MAGIC);
    f.push(VERSION);
    f.push(kind);
    f.extend_from_slice(&(payload.len().min(MAX_REPLY_PAYLOAD) as u16).to_le_bytes());
    f.extend_from_slice(&payload[..payload.len().min(MAX_REPLY_PAYLOAD)]);
    f
}

fn put_short(p: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(u8::MAX as usize)];
    p.push(b.len() as u8);
    p.extend_from_slice(b);
}

/// Appends `s` as text, cut at a character boundary to fit a `u16` length.
fn put_text(p: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&(end as u16).to_le_bytes());
    p.extend_from_slice(&s.as_bytes()[..end]);
}

/// Checks that `bytes` is exactly one frame and returns its kind and payload.
fn open_frame(bytes: &[u8], max_payload: usize) -> Result<(u8, &[u8])> {
    match frame_len(bytes, max_payload)? {
        Some(n) if n == bytes.len() => Ok((bytes[5], &bytes[HEADER_LEN..])),
        Some(n) => Err(malformed(
            "frame",
            format!("{} bytes after the {n}-byte frame", bytes.len() - n),
        )),
        None => Err(malformed("manager frame", "truncated")),
    }
}

fn malformed(what: &'static str, why: impl Into<String>) -> Error {
    Error::Malformed {
        what,
        why: why.into(),
    }
}

/// Reads fields off a payload, refusing to read past its end.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(payload: &'a [u8]) -> Reader<'a> {
        Reader { rest: payload }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(malformed("manager frame", "payload ends inside a field"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn utf8(bytes: &[u8]) -> Result<String> {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| malformed("manager frame", "a string is not UTF-8"))
    }

    fn short(&mut self) -> Result<String> {
        let n = usize::from(self.u8()?);
        Self::utf8(self.take(n)?)
    }

    fn text(&mut self) -> Result<String> {
        let n = usize::from(self.u16()?);
        if n > MAX_TEXT {
            return Err(malformed(
                "manager frame",
                format!("a text of {n} bytes (at most {MAX_TEXT})"),
            ));
        }
        Self::utf8(self.take(n)?)
    }

    fn namespace(&mut self) -> Result<Namespace> {
        Namespace::new(self.short()?)
    }

    fn finish(&self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(malformed(
                "frame",
                format!("{} bytes left after the last field", self.rest.len()),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(p: &str) -> Namespace {
        Namespace::new(p).unwrap()
    }

    fn sample_requests() -> Vec<Request> {
        vec![
            Request::Hello {
                token: Token::new(42, 7).unwrap(),
                pid: 42,
                namespaces: vec![ns("shmrc"), ns("shmrc-a")],
            },
            Request::Watch {
                namespace: ns("shmrc-b"),
            },
            Request::Status,
            Request::Created {
                namespace: ns("shmrc-c"),
            },
            Request::Attached {
                segment: "shmrc-c.1000.1a2b.3c4d.5e6f".into(),
            },
        ]
    }

    fn sample_status() -> ManagerStatus {
        ManagerStatus {
            pid: 9,
            uptime_ms: 1234,
            clients: 1,
            clients_ever: 3,
            sweeps: 4,
            reclaimed: 5,
            unlinked: 6,
            refused: 7,
            runtime_dir: "/run/user/1000/shmrc".into(),
            rows: vec![ClientRow {
                pid: 77,
                connected: true,
                namespaces: vec!["shmrc".into()],
            }],
        }
    }

    #[test]
    fn requests_and_replies_round_trip() {
        for request in sample_requests() {
            assert_eq!(decode_request(&encode_request(&request)).unwrap(), request);
        }
        for reply in [
            Reply::Welcome { manager_pid: 5 },
            Reply::Refused {
                reason: "pid 3 is not the peer".into(),
            },
            Reply::Status(sample_status()),
        ] {
            assert_eq!(decode_reply(&encode_reply(&reply)).unwrap(), reply);
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for request in sample_requests() {
            let bytes = encode_request(&request);
            for n in 0..bytes.len() {
                assert!(
                    decode_request(&bytes[..n]).is_err(),
                    "{request:?} cut at {n}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_request(&longer).is_err());
        }
    }

    #[test]
    fn oversized_garbage_and_foreign_frames_are_refused_with_a_reason() {
        let mut big = encode_request(&Request::Status);
        big[6..8].copy_from_slice(&5000u16.to_le_bytes());
        big.resize(HEADER_LEN + 5000, 0);
        let why = decode_request(&big).unwrap_err().to_string();
        assert!(why.contains("exceeds 4096"), "{why}");
        assert!(decode_request(b"GET / HTTP/1.1\r\n").is_err());
        let mut v1 = encode_request(&Request::Status);
        v1[4] = 1;
        assert!(
            decode_request(&v1)
                .unwrap_err()
                .to_string()
                .contains("version 1")
        );
        for bad in ["", "shmrc/../etc"] {
            let bytes = encode_request(&Request::Attached {
                segment: bad.into(),
            });
            let why = decode_request(&bytes).unwrap_err().to_string();
            assert!(why.contains("not a segment name"), "{why}");
        }
        assert!(
            !Request::Attached {
                segment: "s".into()
            }
            .wants_reply()
        );
        assert!(
            !Request::Created {
                namespace: ns("shmrc")
            }
            .wants_reply()
        );
        assert!(Request::Status.wants_reply());
        let mut kind = encode_request(&Request::Status);
        kind[5] = 99;
        assert!(decode_request(&kind).is_err());
        // A reply is not a request, and the other way round.
        assert!(decode_request(&encode_reply(&Reply::Welcome { manager_pid: 1 })).is_err());
        assert!(decode_reply(&encode_request(&Request::Status)).is_err());
    }

    #[test]
    fn a_namespace_outside_shmrc_or_a_bad_token_is_refused() {
        let mut bytes = encode_request(&Request::Watch {
            namespace: ns("shmrc-x"),
        });
        bytes[HEADER_LEN + 1..HEADER_LEN + 6].copy_from_slice(b"torch");
        assert!(matches!(
            decode_request(&bytes),
            Err(Error::BadNamespace { .. })
        ));
        let mut hello = encode_request(&sample_requests()[0]);
        hello[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&0u64.to_le_bytes());
        assert!(
            decode_request(&hello)
                .unwrap_err()
                .to_string()
                .contains("token")
        );
    }

    #[test]
    fn frame_len_waits_for_the_whole_frame_and_refuses_bad_starts_early() {
        let bytes = encode_request(&sample_requests()[1]);
        assert_eq!(frame_len(&bytes[..3], MAX_REQUEST_PAYLOAD).unwrap(), None);
        assert_eq!(frame_len(&bytes[..9], MAX_REQUEST_PAYLOAD).unwrap(), None);
        assert_eq!(
            frame_len(&bytes, MAX_REQUEST_PAYLOAD).unwrap(),
            Some(bytes.len())
        );
        assert!(frame_len(b"SHX", MAX_REQUEST_PAYLOAD).is_err());
    }

    #[test]
    fn a_status_with_too_many_rows_keeps_the_rows_that_fit() {
        let mut s = sample_status();
        s.rows = vec![
            ClientRow {
                pid: 1,
                connected: false,
                namespaces: vec!["shmrc-".to_owned() + &"x".repeat(42); 200],
            };
            100
        ];
        let Reply::Status(back) = decode_reply(&encode_reply(&Reply::Status(s.clone()))).unwrap()
        else {
            panic!("not a status reply")
        };
        assert!(!back.rows.is_empty() && back.rows.len() < 100);
        assert_eq!(back.rows[0], s.rows[0]);
    }

    /// The committed seeds of the `manager_wire` fuzz target are today's encodings
    /// (`SHMRC_WRITE_FUZZ_SEEDS=1` rewrites them after a format change).
    #[test]
    fn committed_fuzz_seeds_are_todays_encodings() {
        let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        if !fuzz.join("Cargo.toml").exists() {
            // The published tarball: cargo leaves the nested fuzz package out, and the
            // seeds with it. In the repository the fuzz package is always there.
            eprintln!("no fuzz package beside the crate (a published tarball): nothing to compare");
            return;
        }
        let dir = fuzz.join("seeds/manager_wire");
        let mut seeds: Vec<(&str, Vec<u8>)> = vec![
            ("hello", encode_request(&sample_requests()[0])),
            ("watch", encode_request(&sample_requests()[1])),
            ("status", encode_request(&Request::Status)),
            ("created", encode_request(&sample_requests()[3])),
            ("attached", encode_request(&sample_requests()[4])),
            ("welcome", encode_reply(&Reply::Welcome { manager_pid: 5 })),
            (
                "refused",
                encode_reply(&Reply::Refused {
                    reason: "no".into(),
                }),
            ),
        ];
        seeds.push((
            "status-reply",
            encode_reply(&Reply::Status(sample_status())),
        ));
        for (name, bytes) in seeds {
            let path = dir.join(name);
            if std::env::var_os("SHMRC_WRITE_FUZZ_SEEDS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            }
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "{} is stale",
                path.display()
            );
        }
    }
}
