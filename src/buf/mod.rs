//! The buffers room: every type a user holds shared memory through, with its
//! constructors beside it.
//! - this file: [`ShmBuf`] (a reference to a segment, on any OS); the default-OS
//!   constructors are beside the generic type, as std keeps `HashMap::new` beside
//!   `HashMap<K, V, S>`; attaching it is the protocol's `Attach`
//!   (`src/protocol/attach.rs`), this file keeping the glue (open, check, attach, map
//!   to [`Error`]);
//! - `options.rs`: [`CreateOptions`], how a buffer is created;
//! - `buf_mut.rs`: [`ShmBufMut`], the creator's exclusive, writable buffer;
//! - `frozen.rs`: [`FrozenBuf`], a sealed, read-only buffer (and [`FreezeError`]);
//! - `ext.rs` (feature `checkers`): `ShmBufExt`, the methods the checkers' seam adds;
//! - `view.rs`: typed views (`Pod` items) over a buffer's bytes, the range checks shared by
//!   all of the above;
//! - `array.rs` (feature `ndarray`): `FrozenArray`, an `ndarray` view of a frozen buffer;
//! - `map_cache.rs`: the mappings of pooled segments this process let go of, which the
//!   next attach of the same segment takes back (no `mmap`/`munmap`).
//!
//! The user docs are on the types (re-exported at the crate root).
//!
//! # Planted bugs
//! Built with `SHMRC_PLANT=NAME (shmrc's build.rs sets cfg(shmrc_plant = "NAME"))` (`docs/VERIFICATION.md`,
//! `.ci/planted-bugs`):
//! - `memfd_release_keeps_slot`: letting go of a pool's memfd (a release; a stale
//!   attach giving its slot back, the same plant in `src/protocol/attach.rs`) leaves
//!   the slot taken, so the pool never reuses it.
//! - `map_cache_skips_generation`: an attach through a cached mapping checks neither
//!   the handle against the header nor its generation, so a handle of an earlier use
//!   attaches the segment's newer use.

#[cfg(all(feature = "ndarray", not(any(shmrc_loom, shmrc_shuttle))))]
pub(crate) mod array;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub(crate) mod buf_mut;
#[cfg(feature = "checkers")]
pub(crate) mod ext;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub(crate) mod frozen;
pub mod map_cache;
pub(crate) mod options;
pub(crate) mod view;

#[cfg(all(feature = "ndarray", not(any(shmrc_loom, shmrc_shuttle))))]
pub use array::FrozenArray;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use buf_mut::ShmBufMut;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use frozen::{FreezeError, FrozenBuf};
pub use options::CreateOptions;

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::handle::{HandleMeta, InFlight, ShareHandle, Target};
use crate::local::SegmentKey;
use crate::manager::DefaultOs;
use crate::namespace::Namespace;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
use crate::os::posix::DataRegion;
use crate::os::{Mapping, Os};
use crate::protocol::attach::{AttachError, Expect, attach};
use crate::protocol::holders::{self, Finalized, Holders, Reclaim};
use crate::protocol::segment::{self, Backing, Fields, Header};
use crate::strategy::Strategy;
use crate::sync::process::{AtomicBool, AtomicU64, Ordering};
use crate::token::Token;

pub(crate) struct Inner<O: Os> {
    os: O,
    /// Shared so that a channel can watch an in-flight slot after the reference goes.
    map: Arc<O::Map>,
    fields: Fields,
    backing: Backing<O>,
    /// The process that holds the reference (differs from the current one after fork).
    holder: Token,
    released: AtomicBool,
    /// The use of the segment this reference is to (a [`crate::ShmPool`] bumps it when
    /// it recycles the segment; 0 otherwise).
    generation: AtomicU64,
}

impl<O: Os> Inner<O> {
    fn holders(&self) -> Option<Holders<'_>> {
        Header::of(&*self.map, self.fields.layout.capacity).map(|h| h.holders())
    }

    fn segment(&self) -> String {
        describe(&self.backing)
    }

    /// Releases this process's reference once; `None` if there was none to release here.
    fn release(&self) -> Result<Option<Finalized>> {
        if self.released.swap(true, Ordering::AcqRel) || self.os.current() != self.holder {
            return Ok(None);
        }
        let (Some(slot), Some(h)) = (own_slot(&self.backing), self.holders()) else {
            return Ok(None);
        };
        let_go(
            &self.os,
            &h,
            slot,
            holders::held_word(self.holder),
            name_of(&self.backing),
        )
    }
}

impl<O: Os> Drop for Inner<O> {
    fn drop(&mut self) {
        // A failure here (the sim killed us, the segment was damaged) leaves at worst a
        // reference that a sweep reclaims once this process is gone.
        let _ = self.release_keeping_mapping();
        self.os.local().unregister(self.holder, self.fields.key());
    }
}

impl<O: Os> Inner<O> {
    /// [`Inner::release`]; then, if another process still holds the segment (a pool,
    /// between uses), hands the mapping to the mapping cache for this process's next
    /// attach of it (`map_cache.rs`).
    fn release_keeping_mapping(&self) -> Result<Option<Finalized>> {
        let ours = !self.released.load(Ordering::Acquire) && self.os.current() == self.holder;
        let released = self.release();
        let lives = matches!(
            released,
            Ok(None)
                | Ok(Some(Finalized {
                    outcome: holders::Outcome::InUse,
                    ..
                }))
        );
        if ours && lives && self.is_pooled() {
            self.keep_mapping();
        }
        released
    }

    /// Whether the segment is known to be a pool's: a memfd with holder slots (only a
    /// pool makes those), or a named segment in a recycled use (generation 1 or more;
    /// the header says no more, so a pool's first use of a named segment is not cached,
    /// and a plain segment never is: its memory goes with its last holder, as ever).
    fn is_pooled(&self) -> bool {
        match &self.backing {
            Backing::Named { .. } => self.generation.load(Ordering::Acquire) > 0,
            Backing::Anonymous { slot, .. } => slot.is_some(),
        }
    }

    /// Hands this reference's mapping to the mapping cache (`map_cache.rs`).
    fn keep_mapping(&self) {
        let identity = match &self.backing {
            Backing::Named { name, .. } => map_cache::Identity::Named(name),
            Backing::Anonymous { file, .. } => match self.os.stat(file) {
                Ok(info) => map_cache::Identity::Memfd(info.identity, info.len),
                Err(_) => return,
            },
        };
        let map = Arc::clone(&self.map);
        map_cache::keep(&self.os, self.holder, identity, map, self.fields);
    }
}

fn describe<O: Os>(backing: &Backing<O>) -> String {
    match backing {
        Backing::Named { name, .. } => name.clone(),
        // Not the descriptor's debug form (`PosixFile(OwnedFd { fd: 7 })`): its number
        // means nothing to the reader of an error.
        Backing::Anonymous { .. } => "a memfd of this process".to_owned(),
    }
}

/// The holder slot this reference holds: always for a named segment, for a memfd only
/// if it has slots (a pool's).
fn own_slot<O: Os>(backing: &Backing<O>) -> Option<usize> {
    match backing {
        Backing::Named { slot, .. } => Some(*slot),
        Backing::Anonymous { slot, .. } => *slot,
    }
}

fn name_of<O: Os>(backing: &Backing<O>) -> Option<&str> {
    match backing {
        Backing::Named { name, .. } => Some(name),
        Backing::Anonymous { .. } => None,
    }
}

/// Gives back the reference `word` in slot `index`. A named segment is then finalized
/// (unlinked if nobody else holds it: [`holders::release`]); a memfd's slot is only
/// vacated, since the kernel frees a memfd once its last descriptor and mapping close
/// (`Ok(None)` either way).
fn let_go<O: Os>(
    os: &O,
    h: &Holders<'_>,
    index: usize,
    word: u64,
    name: Option<&str>,
) -> Result<Option<Finalized>> {
    match name {
        Some(name) => holders::release(os, h, index, word, name),
        // Planted bug (`docs/VERIFICATION.md`): the memfd's slot stays taken.
        None if cfg!(shmrc_plant = "memfd_release_keeps_slot") => Ok(None),
        None => holders::vacate(os, h, index, word).map(|_| None),
    }
}

/// A shared-memory buffer.
///
/// In a process a `ShmBuf` is an `Arc` over one held reference (one holder slot of a
/// file_system segment, or one open memfd): cloning is cheap, and the last clone's
/// drop releases the reference. The segment goes once no process holds it, whether
/// its holders released it or were killed. Create one with [`ShmBuf::new`] or
/// [`ShmBuf::with_options`]; give another process access with [`ShmBuf::share`] and
/// [`ShmBuf::attach`].
///
/// # Across `fork`
/// A child inherits the parent's mapping but not its reference: the holder slot
/// belongs to the parent. Dropping an inherited buffer in the child releases nothing
/// (the parent still holds it), [`ShmBuf::share`] refuses with [`Error::NotHolder`],
/// and [`ShmBuf::reattach`] makes the child a holder of its own. Reading inherited
/// memory is safe exactly as long as the parent keeps holding it.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, ShmBuf, Strategy};
/// let buf = ShmBuf::with_options(4096, &CreateOptions::new().strategy(Strategy::FileSystem))?;
/// buf.write_at(0, b"hello")?;
/// // In another process this handle would arrive over a socket or as bytes.
/// let bytes = buf.share()?.into_bytes()?;
/// let other = ShmBuf::attach(shmrc::ShareHandle::from_bytes(&bytes)?)?;
/// let mut out = [0u8; 5];
/// other.read_at(0, &mut out)?;
/// assert_eq!(&out, b"hello");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct ShmBuf<O: Os = DefaultOs> {
    inner: Arc<Inner<O>>,
}

impl<O: Os> Clone for ShmBuf<O> {
    fn clone(&self) -> ShmBuf<O> {
        ShmBuf {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<O: Os> ShmBuf<O> {
    /// Creates a buffer of `len` bytes (zero-filled) as process `os`.
    pub(crate) fn create_with(os: &O, len: usize, options: &CreateOptions) -> Result<ShmBuf<O>> {
        Self::create_slotted(os, len, options, false)
    }

    /// [`ShmBuf::create_with`] for a [`crate::ShmPool`]: a file_descriptor buffer gets
    /// the options' holder slots too, so that the pool can tell when no other process
    /// holds it and recycle it ([`ShmBuf::recycle`]).
    pub(crate) fn create_recyclable(
        os: &O,
        len: usize,
        options: &CreateOptions,
    ) -> Result<ShmBuf<O>> {
        Self::create_slotted(os, len, options, true)
    }

    fn create_slotted(
        os: &O,
        len: usize,
        options: &CreateOptions,
        recyclable: bool,
    ) -> Result<ShmBuf<O>> {
        let strategy = options.resolved_strategy()?;
        let capacity = match strategy {
            Strategy::FileSystem => {
                os.before_named_use(options.namespace.prefix(), None)?;
                options.capacity
            }
            // A plain memfd has no slots: the kernel counts its references.
            Strategy::FileDescriptor if !recyclable => 0,
            Strategy::FileDescriptor => {
                options.check_recyclable(strategy)?;
                options.capacity
            }
        };
        let created = segment::create(os, strategy, &options.namespace, len, capacity)?;
        Ok(ShmBuf {
            inner: register(
                os.clone(),
                Held {
                    map: created.map,
                    fields: created.fields,
                    backing: created.backing,
                    generation: 0,
                },
            ),
        })
    }

    /// A handle that lets one other process attach this buffer. For file_system
    /// buffers it holds an in-flight reference (a holder slot), so the buffer stays
    /// alive while the handle travels, even if this process drops its own reference.
    /// In a child that inherited the buffer across `fork`: [`Error::NotHolder`].
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-share")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// buf.write_at(0, b"kept alive")?;
    /// let handle = buf.share()?;
    /// drop(buf); // the handle's in-flight reference keeps the segment
    /// let received = ShmBuf::attach(handle)?;
    /// let mut out = [0u8; 10];
    /// received.read_at(0, &mut out)?;
    /// assert_eq!(&out, b"kept alive");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn share(&self) -> Result<ShareHandle<O>> {
        let inner = &self.inner;
        let os = &inner.os;
        if os.current() != inner.holder {
            return Err(Error::NotHolder {
                segment: inner.segment(),
            });
        }
        let meta = HandleMeta {
            strategy: self.strategy(),
            key: inner.fields.key(),
            data_len: inner.fields.layout.data_len,
            capacity: inner.fields.layout.capacity,
            generation: self.generation(),
            share_key: inner.fields.share_key,
        };
        let in_flight = || -> Result<InFlight> {
            let word = holders::in_flight_word(inner.holder);
            // Locked across the claim and the record's update, so that no ledger gives
            // back this reference as an older one of the same slot and word
            // (`local::InFlightShares`).
            let mut shares = os.local().in_flight_shares();
            let slot = claim(os, inner.holders(), word, meta.capacity, || inner.segment())?;
            shares.claimed(inner.holder, meta.key, slot);
            Ok(InFlight { slot, word })
        };
        let target = match &inner.backing {
            Backing::Named { name, .. } => Target::Named {
                name: name.clone(),
                in_flight: Some(in_flight()?),
            },
            Backing::Anonymous { file, slot } => {
                // The descriptor first: a claimed slot is then never left behind.
                let file = os.dup(file)?;
                let in_flight = match slot {
                    Some(_) => Some(in_flight()?),
                    None => None,
                };
                Target::Anonymous { file, in_flight }
            }
        };
        Ok(ShareHandle {
            os: os.clone(),
            meta,
            target,
        })
    }

    /// The bytes of a file_system handle that carries no in-flight reference: a
    /// *locator*, which can be kept (in a file, an index) and attached any number of
    /// times by this user's processes while the buffer lives. Each attach claims a
    /// slot of its own; once the last holder has released the buffer, attaching a
    /// locator gives [`Error::Gone`]. Unlike [`ShmBuf::share`], it keeps nothing alive.
    /// A file_descriptor buffer has no name to locate it by: [`Error::WrongStrategy`].
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
    ///
    /// let named = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-locator")?);
    /// let buf = ShmBuf::with_options(64, &named)?;
    /// let locator = buf.locator()?;
    /// let first = ShmBuf::attach(ShareHandle::from_bytes(&locator)?)?;
    /// assert_eq!(first.len(), 64);
    /// drop((buf, first));
    /// let gone = ShmBuf::attach(ShareHandle::from_bytes(&locator)?);
    /// assert!(matches!(gone, Err(Error::Gone { .. })), "{gone:?}");
    ///
    /// let anonymous = ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor))?;
    /// assert!(matches!(anonymous.locator(), Err(Error::WrongStrategy { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn locator(&self) -> Result<Vec<u8>> {
        let inner = &self.inner;
        let Backing::Named { name, .. } = &inner.backing else {
            return Err(Error::WrongStrategy {
                op: "making a locator (a buffer without a name)",
                strategy: self.strategy(),
            });
        };
        let meta = HandleMeta {
            strategy: Strategy::FileSystem,
            key: inner.fields.key(),
            data_len: inner.fields.layout.data_len,
            capacity: inner.fields.layout.capacity,
            generation: self.generation(),
            share_key: inner.fields.share_key,
        };
        Ok(crate::handle::encode(&crate::handle::Decoded {
            meta,
            name: Some(name.clone()),
            in_flight: None,
        }))
    }

    /// Attaches the buffer a handle points at, taking over its in-flight reference.
    /// In a process that already holds the buffer this returns another `Arc` of it
    /// (one slot per process) and gives the handle's reference back.
    ///
    /// A handle whose segment is gone gives [`Error::Gone`]; one of another user, pid
    /// namespace or layout version, or one that does not match its segment, is refused
    /// with the variant that says so. A failed attach leaves the handle's reference to
    /// be given back when the handle drops.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::{CreateOptions, ShmBuf, Strategy, transport};
    /// use std::os::unix::net::UnixStream;
    ///
    /// let (producer, consumer) = UnixStream::pair().unwrap();
    /// let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    /// let buf = ShmBuf::with_options(4096, &options)?;
    /// buf.write_at(0, &[7; 16])?;
    /// transport::send(&producer, b"", vec![buf.share()?])?;
    ///
    /// // In the consumer process:
    /// let handle = transport::recv(&consumer)?.handles.pop().unwrap();
    /// let attached = ShmBuf::attach(handle)?;
    /// let mut out = [0u8; 16];
    /// attached.read_at(0, &mut out)?;
    /// assert_eq!(out, [7; 16]);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn attach(mut handle: ShareHandle<O>) -> Result<ShmBuf<O>> {
        let os = handle.os.clone();
        let me = os.current();
        if let Some(inner) = os.local().lookup::<Inner<O>>(me, handle.meta.key) {
            // Before anything is given up: forged bytes must not vacate a slot.
            Expect::Handle(handle.meta.expected()).check(&inner.fields, &inner.segment())?;
            let generation = inner.generation.load(Ordering::Acquire);
            let current = inner
                .holders()
                .is_none_or(|h| holders::generation_is(&h, handle.meta.generation));
            if generation != handle.meta.generation || !current {
                // Dropping the handle leaves its slot alone (another use's now).
                return Err(Error::Stale {
                    segment: inner.segment(),
                    handle: handle.meta.generation,
                    segment_generation: generation,
                });
            }
            if let (Some(in_flight), Some(h)) = (handle.target.in_flight_mut(), inner.holders()) {
                if let Some(f) = in_flight.take() {
                    holders::vacate(&os, &h, f.slot, f.word)?;
                }
            }
            return Ok(ShmBuf { inner });
        }
        let held = match handle.take_target() {
            Target::Named { name, in_flight } => {
                let expect = Some(Expect::Handle(handle.meta.expected()));
                match hold_named(&os, &name, in_flight, expect) {
                    Ok(held) => held,
                    Err(e) => {
                        // The handle owns its in-flight reference again: dropping it
                        // gives the reference back (a no-op if it was taken over).
                        handle.target = Target::Named { name, in_flight };
                        return Err(e);
                    }
                }
            }
            Target::Anonymous { file, in_flight } => {
                let expect = Some(Expect::Handle(handle.meta.expected()));
                match hold_file(&os, &file, "received memfd", in_flight, expect) {
                    Ok(holding) => holding.anonymous(file),
                    Err(e) => {
                        // As above: dropping the handle gives its reference back.
                        handle.target = Target::Anonymous { file, in_flight };
                        return Err(e);
                    }
                }
            }
            Target::Taken => {
                return Err(Error::InvalidArgument(
                    "this handle was already attached".into(),
                ));
            }
        };
        Ok(ShmBuf {
            inner: register(os, held),
        })
    }

    /// Makes the current process a holder of this buffer: for a child that inherited
    /// it across `fork` (see [Across `fork`](ShmBuf#across-fork)). In the holding
    /// process it returns a clone. A buffer that is gone meanwhile (the parent released
    /// the last reference) is [`Error::Gone`].
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use nix::sys::wait::{WaitStatus, waitpid};
    /// use nix::unistd::{ForkResult, fork};
    /// use shmrc::{CreateOptions, Error, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-reattach")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// // SAFETY: this program runs no other thread that could hold a lock at the fork.
    /// match unsafe { fork() }.expect("fork") {
    ///     ForkResult::Child => {
    ///         // The inherited buffer is the parent's reference, not this process's.
    ///         let inherited = !buf.is_held() && matches!(buf.share(), Err(Error::NotHolder { .. }));
    ///         let mine = buf.reattach().expect("reattach");
    ///         let held = mine.is_held();
    ///         drop(mine); // releases the child's own slot
    ///         std::process::exit(if inherited && held { 0 } else { 1 });
    ///     }
    ///     ForkResult::Parent { child } => {
    ///         assert_eq!(waitpid(child, None).expect("waitpid"), WaitStatus::Exited(child, 0));
    ///     }
    /// }
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn reattach(&self) -> Result<ShmBuf<O>> {
        let inner = &self.inner;
        let os = &inner.os;
        let me = os.current();
        if me == inner.holder {
            return Ok(self.clone());
        }
        if let Some(existing) = os.local().lookup::<Inner<O>>(me, inner.fields.key()) {
            return Ok(ShmBuf { inner: existing });
        }
        let held = match &inner.backing {
            Backing::Named { name, .. } => {
                let generation = inner.generation.load(Ordering::Acquire);
                hold_named(os, name, None, Some(Expect::Generation(generation)))?
            }
            Backing::Anonymous { file, .. } => {
                let file = os.dup(file)?;
                let generation = inner.generation.load(Ordering::Acquire);
                let expect = Some(Expect::Generation(generation));
                hold_file(os, &file, "inherited memfd", None, expect)?.anonymous(file)
            }
        };
        Ok(ShmBuf {
            inner: register(os.clone(), held),
        })
    }

    /// Releases this reference now and says what became of the segment: `Some` when it
    /// was the last in-process reference to a file_system buffer (the outcome tells
    /// whether this call unlinked it), `None` otherwise. Dropping the last clone does
    /// the same, silently; `release` reports what a drop would swallow (a damaged
    /// segment).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let ns = Namespace::new("shmrc-doc-release")?;
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let clone = buf.clone();
    /// assert!(clone.release()?.is_none()); // `buf` still holds the reference
    /// assert!(buf.release()?.is_some()); // the last one: the segment was finalized
    /// assert!(shmrc::inspect(&ns)?.segments.is_empty()); // and nobody held it: unlinked
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn release(self) -> Result<Option<Finalized>> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner.release_keeping_mapping(),
            Err(_) => Ok(None),
        }
    }

    /// Length of the data in bytes.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(1000)?;
    /// assert_eq!(buf.len(), 1000);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.fields.layout.data_len
    }

    /// Whether the buffer is empty (never: buffers have at least one byte, and a
    /// zero-length create is [`Error::InvalidArgument`]).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// assert!(!shmrc::ShmBuf::new(1)?.is_empty());
    /// assert!(matches!(shmrc::ShmBuf::new(0), Err(shmrc::Error::InvalidArgument(_))));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The strategy the buffer was created with (a buffer keeps it when the
    /// process-wide one changes).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::{ShmBuf, Strategy, set_sharing_strategy};
    ///
    /// set_sharing_strategy(Strategy::FileDescriptor);
    /// let buf = ShmBuf::new(64)?;
    /// set_sharing_strategy(Strategy::FileSystem);
    /// assert_eq!(buf.strategy(), Strategy::FileDescriptor);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn strategy(&self) -> Strategy {
        match self.inner.backing {
            Backing::Named { .. } => Strategy::FileSystem,
            Backing::Anonymous { .. } => Strategy::FileDescriptor,
        }
    }

    /// The segment's name in `/dev/shm` (file_system buffers; `None` for
    /// file_descriptor ones).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-name")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let name = buf.name().unwrap();
    /// assert!(name.starts_with("shmrc-doc-name."));
    /// assert!(std::path::Path::new("/dev/shm").join(name).exists());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        match &self.inner.backing {
            Backing::Named { name, .. } => Some(name),
            Backing::Anonymous { .. } => None,
        }
    }

    /// The segment's identity.
    pub(crate) fn key(&self) -> SegmentKey {
        self.inner.fields.key()
    }

    /// The header fields (creator, capacity, creation time).
    pub(crate) fn fields(&self) -> &Fields {
        &self.inner.fields
    }

    /// Which use of its segment this buffer is: 0 for a fresh segment, bumped each time
    /// a [`crate::ShmPool`] recycles it. Handles carry it; an attach of a handle from
    /// an earlier use is [`Error::Stale`].
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(64)?;
    /// assert_eq!(buf.generation(), 0); // never recycled
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Reuses the segment for a new use if no other process (nor a handle in flight)
    /// holds it: bumps its generation (the protocol's recycle step, docs/PROTOCOL.md) and returns `true`;
    /// `false` if it is still held (or is a plain file_descriptor buffer, without
    /// slots). The caller (a
    /// [`crate::ShmPool`]) makes sure no other reference of this process uses it.
    pub(crate) fn recycle(&self) -> Result<bool> {
        let inner = &self.inner;
        let (Some(slot), Some(h)) = (own_slot(&inner.backing), inner.holders()) else {
            return Ok(false);
        };
        if inner.os.current() != inner.holder {
            return Ok(false);
        }
        match holders::recycle(&inner.os, &h, slot)? {
            holders::Recycled::Reused { generation, .. } => {
                inner.generation.store(generation, Ordering::Release);
                Ok(true)
            }
            holders::Recycled::Held => Ok(false),
        }
    }

    /// How many `ShmBuf`s of this process share this reference (the pool's own included).
    pub(crate) fn local_references(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Whether a slot of the segment other than this reference's is taken: another
    /// process holds it, a handle is in flight, or a holder died without letting go
    /// (see [`holders::others_hold`]: a look at the slot words, no syscall). `false`
    /// for a plain file_descriptor buffer (it has no slots).
    pub(crate) fn others_hold(&self) -> bool {
        let inner = &self.inner;
        match (own_slot(&inner.backing), inner.holders()) {
            (Some(slot), Some(h)) => holders::others_hold(&h, slot),
            _ => false,
        }
    }

    /// Whether the current process holds this buffer (false in a forked child until it
    /// reattaches: see [`ShmBuf::reattach`]).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(64)?;
    /// assert!(buf.is_held()); // the creating process holds it
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_held(&self) -> bool {
        self.inner.os.current() == self.inner.holder
    }

    /// A look at the holder slots of this buffer's segment ([`Census`](crate::Census)):
    /// how many live processes hold it, how many references are in flight, how many
    /// holders died without letting go. A snapshot, read without a lock or a syscall:
    /// other processes may attach or let go while it is read. A plain file_descriptor
    /// buffer has no slots (the kernel counts its references): its census counts
    /// nothing. `None` only if the header's slots lay outside the mapping (a header
    /// shmrc made, or validated on attach, never does).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-buf-census")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let census = buf.census().expect("a validated header");
    /// assert_eq!((census.live, census.in_flight, census.dead), (1, 0, 0)); // this process
    /// let handle = buf.share()?;
    /// assert_eq!(buf.census().unwrap().in_flight, 1); // a reference on its way
    /// drop(handle); // never attached: the reference is given back
    /// assert_eq!(buf.census().unwrap().in_flight, 0);
    ///
    /// let plain = CreateOptions::new().strategy(Strategy::FileDescriptor);
    /// let census = ShmBuf::with_options(64, &plain)?.census().unwrap();
    /// assert_eq!(census.live + census.free, 0); // no slots
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn census(&self) -> Option<holders::Census> {
        self.inner
            .holders()
            .map(|h| holders::census(&self.inner.os, &h))
    }

    /// Copies `out.len()` bytes at `offset` into `out`. Safe while other processes
    /// write: a concurrent write gives a torn copy, never undefined behaviour. A range
    /// past the end is [`Error::OutOfBounds`] and copies nothing.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_at(4, b"abcd")?;
    /// let mut out = [0u8; 8];
    /// buf.read_at(0, &mut out)?;
    /// assert_eq!(&out, b"\0\0\0\0abcd");
    /// assert!(matches!(
    ///     buf.read_at(6, &mut [0u8; 4]),
    ///     Err(shmrc::Error::OutOfBounds { offset: 6, len: 4, size: 8 })
    /// ));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let at = self.data_range(offset, out.len())?;
        self.copy_checked(self.inner.map.read(at, out), offset, out.len())
    }

    /// Copies `data` to `offset`. Same concurrency rule as [`ShmBuf::read_at`]; a range
    /// past the end is [`Error::OutOfBounds`] and writes nothing.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4)?;
    /// buf.write_at(0, &42u32.to_le_bytes())?;
    /// let mut out = [0u8; 4];
    /// buf.read_at(0, &mut out)?;
    /// assert_eq!(u32::from_le_bytes(out), 42);
    /// assert!(buf.write_at(1, &[0u8; 4]).is_err());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        let at = self.data_range(offset, data.len())?;
        self.copy_checked(self.inner.map.write(at, data), offset, data.len())
    }

    /// Copies items `first..first + out.len()` of the buffer, seen as `[T]`, into
    /// `out`: a typed [`ShmBuf::read_at`] (same concurrency rule: torn, never UB). A
    /// range past the end is [`Error::BadView`] and copies nothing.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(16)?;
    /// buf.write_items(1, &[2.5f32, 3.5])?;
    /// let mut out = [0f32; 4];
    /// buf.read_items(0, &mut out)?;
    /// assert_eq!(out, [0.0, 2.5, 3.5, 0.0]);
    /// assert!(matches!(buf.read_items(3, &mut out), Err(shmrc::Error::BadView { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn read_items<T: bytemuck::Pod>(&self, first: usize, out: &mut [T]) -> Result<()> {
        let range = view::item_range::<T>(first, out.len(), self.len())?;
        self.read_at(range.start, bytemuck::cast_slice_mut(out))
    }

    /// Copies `items` into the buffer, seen as `[T]`, from item `first` on: a typed
    /// [`ShmBuf::write_at`]. A range past the end is [`Error::BadView`] and writes
    /// nothing.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_items(0, &[u64::MAX])?;
    /// assert!(buf.write_items(1, &[1u64]).is_err());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn write_items<T: bytemuck::Pod>(&self, first: usize, items: &[T]) -> Result<()> {
        let range = view::item_range::<T>(first, items.len(), self.len())?;
        self.write_at(range.start, bytemuck::cast_slice(items))
    }

    /// Offset in the mapping of `len` data bytes at `offset`, bounds-checked.
    fn data_range(&self, offset: usize, len: usize) -> Result<usize> {
        let size = self.len();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(self.inner.fields.layout.data_offset + offset),
            _ => Err(Error::OutOfBounds { offset, len, size }),
        }
    }

    fn copy_checked(&self, copied: bool, offset: usize, len: usize) -> Result<()> {
        if copied {
            Ok(())
        } else {
            Err(Error::OutOfBounds {
                offset,
                len,
                size: self.len(),
            })
        }
    }

    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn mapping(&self) -> &O::Map {
        &self.inner.map
    }

    /// The OS this buffer runs on.
    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn os(&self) -> &O {
        &self.inner.os
    }

    /// The memfd of a file_descriptor buffer (`None` for file_system ones).
    pub(crate) fn anonymous_file(&self) -> Option<&O::File> {
        match &self.inner.backing {
            Backing::Anonymous { file, .. } => Some(file),
            Backing::Named { .. } => None,
        }
    }

    /// The mapping and slot capacity, to watch the holder slots after this reference
    /// is gone (a channel's in-flight ledger).
    #[cfg_attr(not(feature = "channel"), allow(dead_code))]
    pub(crate) fn slot_watch(&self) -> (Arc<O::Map>, usize) {
        (
            Arc::clone(&self.inner.map),
            self.inner.fields.layout.capacity,
        )
    }

    /// Whether this value is the only live reference to the buffer in this process.
    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn is_only_clone(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Holds, as the current process, the memfd `file` of a file_descriptor segment
    /// (maps and validates it): what attaching a received memfd does.
    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn adopt_anonymous(os: &O, file: O::File, what: &str) -> Result<ShmBuf<O>> {
        let held = hold_file(os, &file, what, None, None)?.anonymous(file);
        Ok(ShmBuf {
            inner: register(os.clone(), held),
        })
    }
}

impl<O: Os> fmt::Debug for ShmBuf<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmBuf")
            .field("segment", &self.inner.segment())
            .field("len", &self.len())
            .field("strategy", &self.strategy())
            .finish()
    }
}

/// Builds the state of a reference the current process now holds and registers it,
/// or returns the one another thread of this process registered first (dropping ours
/// releases its slot).
fn register<O: Os>(os: O, held: Held<O>) -> Arc<Inner<O>> {
    let holder = os.current();
    let Held {
        map,
        fields,
        backing,
        generation,
    } = held;
    let inner = Arc::new(Inner {
        os,
        map: Arc::new(map),
        fields,
        backing,
        holder,
        released: AtomicBool::new(false),
        generation: AtomicU64::new(generation),
    });
    match inner.os.local().register(holder, fields.key(), &inner) {
        Ok(()) => inner,
        Err(existing) => existing,
    }
}

/// A reference this process now holds, before it is registered.
struct Held<O: Os> {
    map: O::Map,
    fields: Fields,
    backing: Backing<O>,
    generation: u64,
}

/// A segment this process opened and now holds (its slot taken, if it has slots),
/// before its backing is known to the reference.
struct Holding<O: Os> {
    opened: segment::Opened<O>,
    slot: Option<usize>,
    generation: u64,
}

impl<O: Os> Holding<O> {
    /// The reference to a memfd kept open by `file`.
    fn anonymous(self, file: O::File) -> Held<O> {
        Held {
            map: self.opened.map,
            fields: self.opened.fields,
            backing: Backing::Anonymous {
                file,
                slot: self.slot,
            },
            generation: self.generation,
        }
    }
}

/// Opens the named segment `name` and holds it for this process (see [`hold`]).
fn hold_named<O: Os>(
    os: &O,
    name: &str,
    in_flight: Option<InFlight>,
    expect: Option<Expect>,
) -> Result<Held<O>> {
    // Asked once for the name and the file (`geteuid` is a system call).
    let me = os.uid();
    let (ns, _) = Namespace::of_segment(name, me)?;
    os.before_named_use(ns.prefix(), Some(name))?;
    let cached = match expect {
        Some(Expect::Handle(expected)) => map_cache::take(
            os,
            os.current(),
            expected.key,
            map_cache::Identity::Named(name),
        )?,
        _ => None,
    };
    let (opened, expect) = match cached {
        Some(opened) => (opened, expect_of_cached(expect)),
        None => (segment::open_named(os, &ns, name, me)?, expect),
    };
    let holding = hold(os, opened, name, Some(name), in_flight, expect)?;
    // A named segment always has slots: `hold` took one or failed.
    let slot = holding.slot.ok_or_else(|| Error::Corrupted {
        segment: name.to_owned(),
        what: "a named segment without holder slots".into(),
    })?;
    Ok(Held {
        map: holding.opened.map,
        fields: holding.opened.fields,
        backing: Backing::Named {
            name: name.to_owned(),
            slot,
        },
        generation: holding.generation,
    })
}

/// Maps and validates the memfd `file` (`what` names it in errors) and holds it for
/// this process (see [`hold`]): a pool's memfd has slots, a plain one none.
fn hold_file<O: Os>(
    os: &O,
    file: &O::File,
    what: &str,
    in_flight: Option<InFlight>,
    expect: Option<Expect>,
) -> Result<Holding<O>> {
    let cached = match expect {
        Some(Expect::Handle(expected)) if expected.capacity > 0 => {
            let info = os.stat(file)?;
            let identity = map_cache::Identity::Memfd(info.identity, info.len);
            map_cache::take(os, os.current(), expected.key, identity)?
        }
        _ => None,
    };
    let (opened, expect) = match cached {
        Some(opened) => (opened, expect_of_cached(expect)),
        None => (segment::open_file(os, file, what, os.uid())?, expect),
    };
    hold(os, opened, what, None, in_flight, expect)
}

/// What an attach through a cached mapping expects of it: the same as of a fresh one,
/// since the cached mapping may be of an earlier use. (Planted bug
/// `map_cache_skips_generation`: nothing.)
fn expect_of_cached(expect: Option<Expect>) -> Option<Expect> {
    if cfg!(shmrc_plant = "map_cache_skips_generation") {
        return None;
    }
    expect
}

/// Holds the opened segment (`segment` names it in errors; `name` is a named
/// segment's name, `None` for a memfd) for this process: the glue around the protocol's
/// [`attach`] (`src/protocol/attach.rs`), which takes over the in-flight reference
/// `in_flight` if its slot still has it, else claims a slot. With `expect`, the segment
/// must be the one the handle describes ([`Expect::check`]), in the use (generation) it
/// describes: a recycled segment is [`Error::Stale`] and keeps no slot of ours (a named
/// one is finalized after the give-back, as a release is). A memfd without slots is
/// held by its descriptor alone: nothing to take.
fn hold<O: Os>(
    os: &O,
    opened: segment::Opened<O>,
    segment: &str,
    name: Option<&str>,
    in_flight: Option<InFlight>,
    expect: Option<Expect>,
) -> Result<Holding<O>> {
    if let Some(expect) = expect {
        expect.check(&opened.fields, segment)?;
    }
    let capacity = opened.fields.layout.capacity;
    if name.is_none() && capacity == 0 {
        return Ok(Holding {
            opened,
            slot: None,
            generation: 0,
        });
    }
    let h = Header::of(&opened.map, capacity)
        .map(|h| h.holders())
        .ok_or_else(|| Error::Corrupted {
            segment: segment.to_owned(),
            what: "holder slots lie outside the mapping".into(),
        })?;
    let expected = expect.and_then(|e| e.generation());
    let in_flight = in_flight.map(|f| (f.slot, f.word));
    let slot = match attach(os, &h, expected, in_flight, name.is_none())? {
        Ok(slot) => slot,
        Err(AttachError::Claim(e)) => return Err(e.into_error(segment.to_owned(), capacity)),
        Err(AttachError::Stale { gave_back }) => {
            let error = Error::Stale {
                segment: segment.to_owned(),
                handle: expected.unwrap_or_default(),
                segment_generation: h.generation(),
            };
            if let (true, Some(name)) = (gave_back, name) {
                holders::finalize(os, &h, name, Reclaim::UntilLive)?;
            }
            return Err(error);
        }
    };
    let generation = expected.unwrap_or_else(|| h.generation());
    Ok(Holding {
        opened,
        slot: Some(slot),
        generation,
    })
}

/// Claims a slot of `h` for `word`; the errors name the segment `describe` gives (made
/// only on failure: a share claims on the data path).
fn claim<O: Os>(
    os: &O,
    h: Option<Holders<'_>>,
    word: u64,
    capacity: usize,
    describe: impl Fn() -> String,
) -> Result<usize> {
    let h = h.ok_or_else(|| Error::Corrupted {
        segment: describe(),
        what: "holder slots lie outside the mapping".into(),
    })?;
    holders::claim(os, &h, word)?.map_err(|e| e.into_error(describe(), capacity))
}

// The default OS's constructors and the raw data region, beside the generic type.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
impl ShmBuf {
    /// Creates a zero-filled buffer of `len` bytes with the process-wide strategy
    /// ([`sharing_strategy`](crate::sharing_strategy)), in the namespace `shmrc`. A
    /// `len` of 0 or beyond the largest segment is [`Error::InvalidArgument`]; a full
    /// `/dev/shm` is [`Error::NoSpace`], before any byte is handed out.
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    /// [`Error::NoSpace`]: crate::Error::NoSpace
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// assert_eq!(buf.strategy(), shmrc::sharing_strategy());
    /// let mut out = [1u8; 16];
    /// buf.read_at(0, &mut out)?;
    /// assert_eq!(out, [0; 16]); // zero-filled
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(len: usize) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, &CreateOptions::default())
    }

    /// Creates a zero-filled buffer of `len` bytes as `options` say (strategy, holder
    /// slots, namespace).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-with-options")?);
    /// let buf = ShmBuf::with_options(1 << 20, &options)?;
    /// assert_eq!((buf.len(), buf.strategy()), (1 << 20, Strategy::FileSystem));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn with_options(len: usize, options: &CreateOptions) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, options)
    }
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
impl ShmBuf {
    /// The data as a raw region, for zero-copy access (`unsafe` slices with a stated
    /// contract, or a raw pointer).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_at(0, b"zerocopy")?;
    /// let region = buf.region();
    /// assert_eq!(region.len(), 8);
    /// // SAFETY: no process writes the buffer while the slice lives.
    /// let bytes = unsafe { region.as_slice() };
    /// assert_eq!(bytes, b"zerocopy");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn region(&self) -> DataRegion<'_> {
        let layout = self.fields().layout;
        self.mapping()
            .region(layout.data_offset, layout.data_len)
            .expect("validated layout lies inside the mapping")
    }
}
