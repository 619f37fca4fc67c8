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

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::buf::FrozenBuf;
use crate::buf::ShmBuf;
use crate::error::{Error, Result};
use crate::handle::ShareHandle;
use crate::in_flight::{InFlightEntry, Ledger};
use crate::manager::DefaultOs;

/// Encodes `msg` ([`encode`]) for the sender that owns `ledger`, recording the
/// references it puts in flight ([`Ledger::encode_and_record`]): its bytes and the
/// handles to send with them.
pub(crate) fn encode_recorded<T: Serialize>(
    ledger: &mut Ledger<DefaultOs>,
    msg: &T,
) -> Result<(Vec<u8>, Vec<ShareHandle>)> {
    ledger.encode_and_record(|| {
        let encoded = encode(msg)?;
        Ok(((encoded.bytes, encoded.handles), encoded.in_flight))
    })
}

#[derive(Default)]
struct Outgoing {
    handles: Vec<ShareHandle>,
    in_flight: Vec<InFlightEntry<DefaultOs>>,
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
    pub(crate) in_flight: Vec<InFlightEntry<DefaultOs>>,
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
fn set_aside(handle: ShareHandle, entry: Option<InFlightEntry<DefaultOs>>) -> Result<u32, String> {
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
        let entry = InFlightEntry::of(self, &handle);
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
