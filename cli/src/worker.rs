//! The worker process that `shmrc demo` and the integration tests start. It connects
//! to a Unix socket and obeys text commands; handles ride along with `hold`.
//!
//! ```text
//! worker → parent   hello <id> <pid>                (on connect)
//! hold <sum>...  + handles → held <n>               attach each, check its FNV-1a sum
//! create <len> <seed> <ns> → created <i> <sum> <name>
//!                                                  a file_system buffer of namespace
//!                                                  <ns>, filled from <seed>, held
//! share <index>            → shared <sum> + handle  a handle to a held buffer
//! drop <index>             → dropped <unlinked>     release one held buffer
//! verify                   → verified <n>           re-check every held buffer
//! fill <index> <byte>      → filled                 write the byte over a whole buffer
//! sums                     → sums <sum>...          the current sum of each buffer
//! release                  → released <unlinked>    drop every buffer
//! exit                     → bye                    and exit 0
//! ```
//! Any failure is answered `error <message>`. Buffers are numbered in the order they
//! were held; `drop` renumbers the ones after it, as `Vec::remove` does.

use std::os::unix::net::UnixStream;
use std::path::Path;

use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy, transport};

/// FNV-1a over the whole buffer.
pub fn checksum(buf: &ShmBuf) -> shmrc::Result<u64> {
    let mut data = vec![0u8; buf.len()];
    buf.read_at(0, &mut data)?;
    Ok(fnv1a(&data))
}

/// FNV-1a 64.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Runs the worker until `exit` or until the parent goes away.
pub fn run(socket: &Path, id: u32) -> shmrc::Result<()> {
    let stream = UnixStream::connect(socket).map_err(|e| shmrc::Error::os("connect", e))?;
    let hello = format!("hello {id} {}", std::process::id());
    transport::send(&stream, hello.as_bytes(), vec![])?;
    let mut held: Vec<(ShmBuf, u64)> = Vec::new();
    loop {
        let message = match transport::recv(&stream) {
            Ok(m) => m,
            Err(shmrc::Error::Disconnected) => return Ok(()),
            Err(e) => return Err(e),
        };
        let command = String::from_utf8_lossy(&message.payload).into_owned();
        let (reply, handles) = match obey(&command, message.handles, &mut held) {
            Ok(Some(reply)) => reply,
            Ok(None) => {
                transport::send(&stream, b"bye", vec![])?;
                return Ok(());
            }
            Err(e) => (format!("error {e}"), Vec::new()),
        };
        transport::send(&stream, reply.as_bytes(), handles)?;
    }
}

fn obey(
    command: &str,
    handles: Vec<ShareHandle>,
    held: &mut Vec<(ShmBuf, u64)>,
) -> shmrc::Result<Option<(String, Vec<ShareHandle>)>> {
    let mut words = command.split_whitespace();
    let mut out = Vec::new();
    let reply = match words.next().unwrap_or_default() {
        "create" => {
            let len: usize = parse(words.next())?;
            let seed: u8 = parse(words.next())?;
            let namespace = Namespace::new(words.next().unwrap_or_default())?;
            let options = CreateOptions::new()
                .strategy(Strategy::FileSystem)
                .namespace(namespace);
            let buf = ShmBuf::with_options(len, &options)?;
            let data: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
                .collect();
            buf.write_at(0, &data)?;
            let sum = fnv1a(&data);
            let name = buf.name().unwrap_or_default().to_owned();
            held.push((buf, sum));
            format!("created {} {sum} {name}", held.len() - 1)
        }
        "share" => {
            let (buf, sum) = held_buffer(held, words.next())?;
            out.push(buf.share()?);
            format!("shared {sum}")
        }
        "drop" => {
            let index: usize = parse(words.next())?;
            if index >= held.len() {
                return Err(invalid(format!("no buffer {index}")));
            }
            let (buf, _) = held.remove(index);
            let unlinked = buf
                .release()?
                .is_some_and(|f| f.outcome == shmrc::Outcome::Unlinked);
            format!("dropped {}", u8::from(unlinked))
        }
        "hold" => {
            let sums: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
            if sums.len() != handles.len() {
                return Err(invalid(format!(
                    "{} sums for {} handles",
                    sums.len(),
                    handles.len()
                )));
            }
            for (handle, expected) in handles.into_iter().zip(sums) {
                let buf = ShmBuf::attach(handle)?;
                let found = checksum(&buf)?;
                if found != expected {
                    return Err(invalid(format!(
                        "checksum {found:#x}, expected {expected:#x}"
                    )));
                }
                held.push((buf, expected));
            }
            format!("held {}", held.len())
        }
        "verify" => {
            for (index, (buf, expected)) in held.iter().enumerate() {
                let found = checksum(buf)?;
                if found != *expected {
                    return Err(invalid(format!(
                        "buffer {index}: checksum {found:#x}, expected {expected:#x}"
                    )));
                }
            }
            format!("verified {}", held.len())
        }
        "fill" => {
            let index: usize = parse(words.next())?;
            let byte: u8 = parse(words.next())?;
            let (buf, sum) = held
                .get_mut(index)
                .ok_or_else(|| invalid(format!("no buffer {index}")))?;
            buf.write_at(0, &vec![byte; buf.len()])?;
            *sum = checksum(buf)?;
            "filled".into()
        }
        "sums" => {
            let sums: shmrc::Result<Vec<String>> = held
                .iter()
                .map(|(buf, _)| checksum(buf).map(|s| s.to_string()))
                .collect();
            format!("sums {}", sums?.join(" "))
        }
        "release" => {
            let mut unlinked = 0;
            for (buf, _) in held.drain(..) {
                if let Some(f) = buf.release()? {
                    unlinked += u32::from(f.outcome == shmrc::Outcome::Unlinked);
                }
            }
            format!("released {unlinked}")
        }
        "exit" => return Ok(None),
        other => return Err(invalid(format!("unknown command {other:?}"))),
    };
    Ok(Some((reply, out)))
}

/// The held buffer numbered by `word`, and its checksum.
fn held_buffer<'h>(
    held: &'h [(ShmBuf, u64)],
    word: Option<&str>,
) -> shmrc::Result<&'h (ShmBuf, u64)> {
    let index: usize = parse(word)?;
    held.get(index)
        .ok_or_else(|| invalid(format!("no buffer {index}")))
}

fn parse<T: std::str::FromStr>(word: Option<&str>) -> shmrc::Result<T> {
    word.and_then(|w| w.parse().ok())
        .ok_or_else(|| invalid(format!("bad argument {word:?}")))
}

fn invalid(why: String) -> shmrc::Error {
    shmrc::Error::InvalidArgument(why)
}
