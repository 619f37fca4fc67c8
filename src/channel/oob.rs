//! The out-of-band half of a channel message: while a message is encoded, each
//! [`ShmBuf`] and [`FrozenBuf`] in it is shared and its [`ShareHandle`] set aside (the
//! encoding holds only its index); while one is decoded, each index takes its handle
//! back and attaches it. This is how torch's reductions carry storages next to a
//! pickle, and ipc-channel its shared memory next to bincode. The handles travel with
//! the encoded bytes in one [`transport`](crate::transport) message.
//!
//! The context is thread-local and exists only inside [`encode`] and [`decode`]:
//! serializing a buffer anywhere else is an error naming why.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::buf::FrozenBuf;
use crate::buf::ShmBuf;
use crate::error::{Error, Result};
use crate::handle::{ShareHandle, Target};
use crate::holders;
use crate::manager::DefaultOs;
use crate::os::Os;
use crate::segment::Header;

/// An in-flight reference sent in a message (a file_system buffer's, or a pool's
/// memfd's): what the sender needs to give it back if the message can never be
/// received ([`super::Sender`]'s ledger).
pub(crate) struct InFlightEntry {
    /// The buffer's mapping (not a reference: the sender's reference goes when its
    /// user drops it), to see whether the slot was taken over.
    pub(crate) map: Arc<<DefaultOs as Os>::Map>,
    pub(crate) capacity: usize,
    pub(crate) slot: usize,
    pub(crate) word: u64,
    pub(crate) give_back: GiveBack,
}

/// How an [`InFlightEntry`] is given back.
pub(crate) enum GiveBack {
    /// A named segment's: the handle's encoding, decoded and dropped, vacates the slot
    /// and finalizes (it may be the segment's last reference).
    Named { encoded: Vec<u8> },
    /// A pool's memfd's: the slot is vacated through the mapping, if the memfd is still
    /// in the use the handle was of (nothing is finalized: the kernel frees a memfd).
    Memfd { generation: u64 },
}

/// Every in-flight reference (file_system, or a pool's memfd) this process's channels
/// have in flight, by channel.
/// One ledger for the whole process, pruned before each message is encoded: a slot
/// taken over (and perhaps released) by its receiver leaves the ledger before this
/// process can share the same buffer into the same slot again, so a give-back never
/// mistakes a newer reference for the old one. (A buffer shared by hand, outside
/// channels, between a receiver's release and the next channel message is the one
/// case this cannot see.)
struct Ledger {
    next_channel: u64,
    entries: Vec<(u64, InFlightEntry)>,
}

static LEDGER: Mutex<Ledger> = Mutex::new(Ledger {
    next_channel: 0,
    entries: Vec::new(),
});

fn ledger() -> MutexGuard<'static, Ledger> {
    LEDGER.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ledger {
    fn prune(&mut self) {
        self.entries.retain(|(_, e)| e.still_in_flight());
    }
}

/// A fresh channel id for the ledger.
pub(crate) fn new_channel() -> u64 {
    let mut ledger = ledger();
    ledger.next_channel += 1;
    ledger.next_channel
}

/// Drops from the ledger every reference a receiver has taken over.
pub(crate) fn prune() {
    ledger().prune();
}

/// Records the references a sent message of `channel` put in flight.
pub(crate) fn record(channel: u64, entries: Vec<InFlightEntry>) {
    if !entries.is_empty() {
        ledger()
            .entries
            .extend(entries.into_iter().map(|e| (channel, e)));
    }
}

/// How many references of `channel` are in flight, not yet taken over.
pub(crate) fn pending(channel: u64) -> usize {
    let mut ledger = ledger();
    ledger.prune();
    ledger.entries.iter().filter(|(c, _)| *c == channel).count()
}

/// Gives back every reference of `channel` still in flight: its receiving end is gone,
/// so nobody can take them over any more. One already taken over is left alone.
pub(crate) fn give_back(channel: u64) {
    let mut ledger = ledger();
    ledger.prune();
    let (mine, others): (Vec<_>, Vec<_>) =
        ledger.entries.drain(..).partition(|(c, _)| *c == channel);
    ledger.entries = others;
    drop(ledger);
    for (_, entry) in mine {
        entry.give_back();
    }
}

impl InFlightEntry {
    /// Whether the slot still holds the in-flight reference (nobody took it over).
    fn still_in_flight(&self) -> bool {
        Header::of(&*self.map, self.capacity).and_then(|h| h.holders().slot_word(self.slot))
            == Some(self.word)
    }

    /// Gives the reference back if its slot still holds it (best effort: the sending
    /// process's exit releases it otherwise).
    fn give_back(self) {
        match self.give_back {
            // Decoding gives a handle that owns the in-flight reference; dropping it
            // vacates the slot if (and only if) it still holds that reference.
            GiveBack::Named { encoded } => drop(ShareHandle::from_bytes(&encoded)),
            GiveBack::Memfd { generation } => {
                if let Some(header) = Header::of(&*self.map, self.capacity) {
                    let (os, h) = (DefaultOs::default(), header.holders());
                    let _ = holders::give_back_in_flight(&os, &h, self.slot, self.word, generation);
                }
            }
        }
    }
}

#[derive(Default)]
struct Outgoing {
    handles: Vec<ShareHandle>,
    in_flight: Vec<InFlightEntry>,
    error: Option<Error>,
}

#[derive(Default)]
struct Incoming {
    handles: Vec<Option<ShareHandle>>,
    error: Option<Error>,
}

thread_local! {
    static OUTGOING: RefCell<Option<Outgoing>> = const { RefCell::new(None) };
    static INCOMING: RefCell<Option<Incoming>> = const { RefCell::new(None) };
}

/// An encoded message: its bytes, the handles to send with them, and the file_system
/// references they put in flight.
pub(crate) struct Encoded {
    pub(crate) bytes: Vec<u8>,
    pub(crate) handles: Vec<ShareHandle>,
    pub(crate) in_flight: Vec<InFlightEntry>,
}

/// Encodes `msg` with postcard, sharing every buffer in it. On error the handles made
/// so far are dropped, giving their references back.
pub(crate) fn encode<T: Serialize>(msg: &T) -> Result<Encoded> {
    let outer = OUTGOING.with(|c| c.replace(Some(Outgoing::default())));
    let bytes = postcard::to_stdvec(msg);
    let ctx = OUTGOING.with(|c| c.replace(outer)).unwrap_or_default();
    match (bytes, ctx.error) {
        (Ok(bytes), None) => Ok(Encoded {
            bytes,
            handles: ctx.handles,
            in_flight: ctx.in_flight,
        }),
        (_, Some(error)) => Err(error),
        (Err(e), None) => Err(Error::Codec {
            during: "encode",
            why: e.to_string(),
        }),
    }
}

/// Decodes a `T` from `bytes`, attaching `handles` where the message has buffers.
/// Handles the message does not use are dropped (their references given back).
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], handles: Vec<ShareHandle>) -> Result<T> {
    let ctx = Incoming {
        handles: handles.into_iter().map(Some).collect(),
        error: None,
    };
    let outer = INCOMING.with(|c| c.replace(Some(ctx)));
    let value = postcard::from_bytes::<T>(bytes);
    let ctx = INCOMING.with(|c| c.replace(outer)).unwrap_or_default();
    match (value, ctx.error) {
        (Ok(value), None) => Ok(value),
        (_, Some(error)) => Err(error),
        (Err(e), None) => Err(Error::Codec {
            during: "decode",
            why: e.to_string(),
        }),
    }
}

/// Sets `handle` aside in the current message and returns its index; `entry` is the
/// record of the in-flight reference it carries, if any. Outside a message: an error.
fn set_aside(handle: ShareHandle, entry: Option<InFlightEntry>) -> Result<u32, String> {
    OUTGOING.with(|c| match c.borrow_mut().as_mut() {
        None => Err("a buffer serializes only inside a shmrc::channel message".to_owned()),
        Some(ctx) => {
            let index = u32::try_from(ctx.handles.len()).map_err(|_| "too many buffers")?;
            if let Some(entry) = entry {
                ctx.in_flight.push(entry);
            }
            ctx.handles.push(handle);
            Ok(index)
        }
    })
}

/// Records `error` as the reason the current message failed (kept whole, not as text).
fn fail_outgoing(error: Error) -> String {
    let text = error.to_string();
    OUTGOING.with(|c| {
        if let Some(ctx) = c.borrow_mut().as_mut() {
            ctx.error.get_or_insert(error);
        }
    });
    text
}

/// Records `error` as the reason the message being decoded failed (kept whole: the
/// channel returns it), and gives its text for serde.
pub(crate) fn fail_incoming(error: Error) -> String {
    let text = error.to_string();
    INCOMING.with(|c| {
        if let Some(ctx) = c.borrow_mut().as_mut() {
            ctx.error.get_or_insert(error);
        }
    });
    text
}

/// Records a message that names a buffer it does not carry (the `Error` kept whole).
fn missing(why: String) -> String {
    fail_incoming(Error::Codec {
        during: "decode",
        why,
    })
}

/// Takes the handle at `index` of the message being decoded.
fn take_handle(index: u32) -> Result<ShareHandle, String> {
    INCOMING.with(|c| match c.borrow_mut().as_mut() {
        None => Err("a buffer deserializes only inside a shmrc::channel message".to_owned()),
        Some(ctx) => ctx
            .handles
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("the message has no unused buffer #{index}")),
    })
}

/// Channel messages carry a `ShmBuf` out of band: the encoding is the index of its
/// handle. Serializing one outside a `shmrc::channel` message is an error.
impl Serialize for ShmBuf {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let handle = self
            .share()
            .map_err(|e| S::Error::custom(fail_outgoing(e)))?;
        let entry = match &handle.target {
            Target::Named {
                in_flight: Some(f), ..
            } => Some((
                f,
                GiveBack::Named {
                    encoded: handle.encoded(),
                },
            )),
            Target::Anonymous {
                in_flight: Some(f), ..
            } => Some((
                f,
                GiveBack::Memfd {
                    generation: self.generation(),
                },
            )),
            _ => None,
        };
        let entry = entry.map(|(f, give_back)| {
            let (map, capacity) = self.slot_watch();
            InFlightEntry {
                map,
                capacity,
                slot: f.slot,
                word: f.word,
                give_back,
            }
        });
        let index = set_aside(handle, entry).map_err(S::Error::custom)?;
        serializer.serialize_u32(index)
    }
}

/// The receiving end of [`ShmBuf`]'s `Serialize`: attaches the handle the message
/// carried (only inside a `shmrc::channel` message).
impl<'de> Deserialize<'de> for ShmBuf {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<ShmBuf, D::Error> {
        let index = u32::deserialize(deserializer)?;
        let handle = take_handle(index).map_err(|why| D::Error::custom(missing(why)))?;
        ShmBuf::attach(handle).map_err(|e| D::Error::custom(fail_incoming(e)))
    }
}

/// A `FrozenBuf` travels like a [`ShmBuf`]: its memfd out of band.
impl Serialize for FrozenBuf {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let handle = self
            .share()
            .map_err(|e| S::Error::custom(fail_outgoing(e)))?;
        let index = set_aside(handle, None).map_err(S::Error::custom)?;
        serializer.serialize_u32(index)
    }
}

/// The receiving end of [`FrozenBuf`]'s `Serialize`: checks the seals and maps it.
impl<'de> Deserialize<'de> for FrozenBuf {
    fn deserialize<D: Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<FrozenBuf, D::Error> {
        let index = u32::deserialize(deserializer)?;
        let handle = take_handle(index).map_err(|why| D::Error::custom(missing(why)))?;
        FrozenBuf::attach(handle).map_err(|e| D::Error::custom(fail_incoming(e)))
    }
}
