//! How a [`FrozenArray`] travels in a channel message: its numbers in the message, its
//! storage out of band like any [`FrozenBuf`](crate::buf::FrozenBuf); a received array
//! is checked as one made here (a bad one is the channel's [`Error::BadView`]).
//!
//! [`Error::BadView`]: crate::Error::BadView

use bytemuck::Pod;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::oob::fail_incoming;
use crate::buf::{FrozenArray, FrozenBuf};

/// What travels: the array's numbers and its storage (out of band).
#[derive(Serialize, Deserialize)]
struct Parts {
    storage: FrozenBuf,
    offset: usize,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<T> From<FrozenArray<T>> for Parts {
    fn from(a: FrozenArray<T>) -> Parts {
        Parts {
            storage: a.storage,
            offset: a.offset,
            shape: a.shape,
            strides: a.strides,
        }
    }
}

impl<T> Serialize for FrozenArray<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Parts::from(self.clone()).serialize(serializer)
    }
}

impl<'de, T: Pod> Deserialize<'de> for FrozenArray<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FrozenArray<T>, D::Error> {
        let p = Parts::deserialize(deserializer)?;
        // The error's text for serde; the `Error` itself is what the channel returns.
        FrozenArray::with_strides(p.storage, p.offset, &p.shape, &p.strides)
            .map_err(|error| serde::de::Error::custom(fail_incoming(error)))
    }
}
