//! The segment layout: the header every shmrc segment starts with, how a creator writes
//! and publishes it, and how an attacher validates it before touching anything else
//! (property P4: a bad segment is an [`Error`] that names the cause, never UB or SIGBUS).
//!
//! ```text
//! word  0  magic "SHMRCSEG"          published last, with Release
//! word  1  layout version
//! word  2  data offset (bytes, 64-aligned)
//! word  3  data length (bytes)
//! word  4  holder-slot capacity (0 for a plain file_descriptor segment)
//! word  5  creator token
//! word  6  creator uid
//! word  7  creator pid namespace
//! word  8  creation time (ns since the epoch)
//! word  9  nonce, low 64 bits
//! word 10  nonce, high 64 bits
//! word 11  checksum of words 1..=10
//! word 12  finalizer word     (holder protocol, see holders.rs)
//! word 13  pending-finalize flag (holder protocol)
//! word 14  generation            (bumped by each recycle, see holders.rs; 0 at creation)
//! word 15  share key: 64 random bits, in no name; a handle must carry it (handle.rs)
//! word 16  mark: slots at or above it are free; a claim raises it before taking a
//!          slot (holders.rs); 1 at creation with a holder
//! words 17.. holder slots, `capacity` of them
//! data at `data offset`
//! ```
//!
//! Every word is accessed atomically, so a peer writing the header concurrently (even a
//! hostile one) can make validation fail but never cause a data race.
//!
//! # Planted bug
//! Built with `SHMRC_PLANT=relaxed_publish` (`.ci/planted-bugs`),
//! [`initialize`] publishes the magic with `Relaxed` instead of `Release`, so an opener
//! may see the magic before the fields: loom's publish model must catch it.

use crate::error::{Error, Result};
use crate::local::SegmentKey;
use crate::namespace::Namespace;
use crate::os::{FileInfo, FileKind, Mapping, Os};
use crate::protocol::holders::Holders;
use crate::strategy::Strategy;
use crate::sync::{AtomicU64, Ordering};
use crate::token::Token;

/// `b"SHMRCSEG"` read as a big-endian word.
pub const MAGIC: u64 = u64::from_be_bytes(*b"SHMRCSEG");
/// The layout version this build writes and reads: 3 since the header holds the mark
/// (word 16) and the slots start one word later (2 before: a build of version 2 would
/// claim slots without raising the mark, and a finalize of version 3 would pass over
/// them; 2 since tombstones name the finalizer that turned them, 1 before that).
pub const LAYOUT_VERSION: u64 = 3;
/// Words before the first holder slot.
pub const HEADER_WORDS: usize = 17;
/// Bytes before the first holder slot.
pub const HEADER_BYTES: usize = HEADER_WORDS * 8;
/// The most holder slots a segment may have.
pub const MAX_CAPACITY: usize = 4096;
/// Holder slots of a file_system segment unless the caller asks otherwise.
pub const DEFAULT_CAPACITY: usize = 64;
/// Alignment of the data region.
pub const DATA_ALIGN: usize = 64;
/// The largest data length accepted (1 TiB): far beyond any `/dev/shm`, far below
/// `isize::MAX`, so offsets never overflow.
pub const MAX_DATA_LEN: u64 = 1 << 40;

const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_DATA_OFFSET: usize = 2;
const W_DATA_LEN: usize = 3;
const W_CAPACITY: usize = 4;
const W_CREATOR: usize = 5;
const W_UID: usize = 6;
const W_PIDNS: usize = 7;
const W_CREATED_AT: usize = 8;
const W_NONCE_LO: usize = 9;
const W_NONCE_HI: usize = 10;
const W_CHECKSUM: usize = 11;
const W_FINALIZER: usize = 12;
const W_PENDING: usize = 13;
const W_GENERATION: usize = 14;
const W_SHARE_KEY: usize = 15;
const W_MARK: usize = 16;
/// Byte offset of the generation word (for tools that read headers raw).
#[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
pub const GENERATION_OFFSET: usize = W_GENERATION * 8;
/// Byte offset of the finalizer word (for tools that read headers raw).
#[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
pub const FINALIZER_OFFSET: usize = W_FINALIZER * 8;
/// Byte offset of the mark word (for tools that read headers raw).
#[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
pub const MARK_OFFSET: usize = W_MARK * 8;

/// Where things are in a segment (the checkers' seam reads it; a user sees
/// [`SegmentHeader`](crate::protocol::sweep::SegmentHeader) in reports).
///
/// ```
/// # #[cfg(all(feature = "checkers", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::checkers::buf::ShmBufExt;
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-layout")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let layout = buf.fields().layout;
/// assert_eq!(layout.data_len, buf.len());
/// assert_eq!(layout.data_offset % 64, 0); // the data is cache-line aligned
/// assert!(layout.capacity > 0);
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Layout {
    /// Offset of the data region.
    pub data_offset: usize,
    /// Length of the data region.
    pub data_len: usize,
    /// Number of holder slots.
    pub capacity: usize,
}

impl Layout {
    /// The layout for `data_len` bytes and `capacity` slots, checked against the limits.
    pub fn new(data_len: usize, capacity: usize) -> Result<Layout> {
        if data_len == 0 || data_len as u64 > MAX_DATA_LEN {
            return Err(Error::InvalidArgument(format!(
                "buffer length {data_len} must be between 1 and {MAX_DATA_LEN}"
            )));
        }
        if capacity > MAX_CAPACITY {
            return Err(Error::InvalidArgument(format!(
                "holder capacity {capacity} exceeds the maximum {MAX_CAPACITY}"
            )));
        }
        Ok(Layout {
            data_offset: data_offset_for(capacity),
            data_len,
            capacity,
        })
    }

    /// Length of the whole segment.
    pub fn total_len(&self) -> usize {
        self.data_offset + self.data_len
    }
}

fn data_offset_for(capacity: usize) -> usize {
    (HEADER_BYTES + 8 * capacity).next_multiple_of(DATA_ALIGN)
}

/// The immutable header fields, as written by the creator (the checkers' seam reads
/// them; a report shows a user only
/// [`SegmentHeader`](crate::protocol::sweep::SegmentHeader), never the nonce or the
/// share key).
///
/// ```
/// # #[cfg(all(feature = "checkers", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::checkers::buf::ShmBufExt;
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-fields")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let fields = *buf.fields();
/// assert_eq!(fields.layout.data_len, 64);
/// assert_eq!(fields.creator.pid(), std::process::id());
/// assert!(fields.created_at_nanos > 0);
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Fields {
    /// Where the data and slots are.
    pub layout: Layout,
    /// The creating process.
    pub creator: Token,
    /// The creator's uid.
    pub uid: u32,
    /// The creator's pid namespace.
    pub pid_namespace: u64,
    /// Creation time, ns since the epoch.
    pub created_at_nanos: u64,
    /// The creator's random nonce.
    pub nonce: u128,
    /// The share key: 64 random bits that, unlike the rest, appear in no name or
    /// listing, so only a process that could read the header (the owner's) can make a
    /// handle that attaches (see [`crate::ShareHandle`]). Not covered by the checksum
    /// (a scribbled key makes attaches fail, nothing more); 0 in segments of shmrc
    /// builds before handle version 3.
    pub share_key: u64,
}

impl Fields {
    /// The segment's identity.
    pub fn key(&self) -> SegmentKey {
        SegmentKey {
            creator: self.creator,
            nonce: self.nonce,
        }
    }

    fn words(&self) -> [u64; 10] {
        [
            LAYOUT_VERSION,
            self.layout.data_offset as u64,
            self.layout.data_len as u64,
            self.layout.capacity as u64,
            self.creator.word(),
            u64::from(self.uid),
            self.pid_namespace,
            self.created_at_nanos,
            self.nonce as u64,
            (self.nonce >> 64) as u64,
        ]
    }
}

/// FNV-1a over the ten field words: catches a header scribbled over, not an attacker
/// (who could rewrite the checksum too, and is stopped by the other checks).
fn checksum(words: &[u64; 10]) -> u64 {
    words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// A typed view of a validated header: its protocol words and holder slots.
pub struct Header<'a> {
    words: &'a [AtomicU64],
}

impl<'a> Header<'a> {
    /// The header of `map`, whose layout has `capacity` slots; `None` if the mapping is
    /// too short to hold them.
    pub fn of(map: &'a impl Mapping, capacity: usize) -> Option<Header<'a>> {
        map.words(HEADER_WORDS + capacity)
            .map(|words| Header { words })
    }

    /// The holder protocol's view of this header.
    pub fn holders(&self) -> Holders<'a> {
        Holders::new(
            &self.words[HEADER_WORDS..],
            &self.words[W_FINALIZER],
            &self.words[W_PENDING],
        )
        .with_generation(&self.words[W_GENERATION])
        .with_mark(&self.words[W_MARK])
    }
}

/// Writes a new header into `map` (zero-filled, at least `fields.layout.total_len()`
/// long), gives slot 0 to `first_holder` if any, then publishes the magic with Release.
pub fn initialize(map: &impl Mapping, fields: &Fields, first_holder: Option<Token>) -> Result<()> {
    let capacity = fields.layout.capacity;
    let words = map.words(HEADER_WORDS + capacity).ok_or_else(|| {
        Error::InvalidArgument("mapping shorter than the header it must hold".into())
    })?;
    let values = fields.words();
    for (i, value) in values.iter().enumerate() {
        // Relaxed: nobody reads these before the magic's Release below publishes them.
        words[W_VERSION + i].store(*value, Ordering::Relaxed);
    }
    // Relaxed: published by the magic's Release, as the fields.
    words[W_CHECKSUM].store(checksum(&values), Ordering::Relaxed);
    // Relaxed: as the fields.
    words[W_SHARE_KEY].store(fields.share_key, Ordering::Relaxed);
    if let (Some(token), true) = (first_holder, capacity > 0) {
        // Relaxed: slot 0 is published by the magic's Release; a claimer reads it after
        // its Acquire of the magic, so it never sees the slot free and takes it.
        words[HEADER_WORDS].store(token.word(), Ordering::Relaxed);
        // Relaxed: as slot 0. The mark covers slot 0: a finalize sees the creator's
        // word there, and claims raise it from 1.
        words[W_MARK].store(1, Ordering::Relaxed);
    }
    // Release: every word above is visible to whoever reads this magic with Acquire.
    let publish = if cfg!(shmrc_plant = "relaxed_publish") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };
    words[W_MAGIC].store(MAGIC, publish);
    Ok(())
}

/// Validates the header of `map` (a mapping of the whole file described by `info`) and
/// returns its fields. `segment` names the segment in errors; `me` is this process's
/// effective uid (asked by the caller once per open: `geteuid` is a system call), `os`
/// supplies its pid namespace.
pub fn validate<O: Os, M: Mapping>(
    os: &O,
    map: &M,
    info: &FileInfo,
    segment: &str,
    me: u32,
) -> Result<Fields> {
    let seg = || segment.to_owned();
    if info.len == 0 {
        return Err(Error::HalfCreated { segment: seg() });
    }
    let truncated = || Error::Truncated {
        segment: seg(),
        need: HEADER_BYTES as u64,
        have: info.len,
    };
    if info.len < HEADER_BYTES as u64 {
        return Err(truncated());
    }
    let header = map.words(HEADER_WORDS).ok_or_else(truncated)?;
    // Acquire: pairs with initialize's Release, so the fields and slot 0 read below are
    // the creator's.
    match header[W_MAGIC].load(Ordering::Acquire) {
        MAGIC => {}
        0 => return Err(Error::HalfCreated { segment: seg() }),
        found => {
            return Err(Error::BadMagic {
                segment: seg(),
                found,
            });
        }
    }
    // Relaxed: ordered after the magic's Acquire above; written once, before it.
    let load = |w: usize| header[w].load(Ordering::Relaxed);
    let version = load(W_VERSION);
    if version != LAYOUT_VERSION {
        return Err(Error::WrongVersion {
            segment: seg(),
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    let mut values = [0u64; 10];
    for (i, value) in values.iter_mut().enumerate() {
        *value = load(W_VERSION + i);
    }
    if checksum(&values) != load(W_CHECKSUM) {
        return Err(corrupted(
            segment,
            "header checksum does not match its fields",
        ));
    }
    let capacity = load(W_CAPACITY);
    if capacity > MAX_CAPACITY as u64 {
        return Err(corrupted(
            segment,
            format!("slot capacity {capacity} exceeds {MAX_CAPACITY}"),
        ));
    }
    let capacity = capacity as usize;
    let data_offset = load(W_DATA_OFFSET);
    if data_offset != data_offset_for(capacity) as u64 {
        return Err(corrupted(
            segment,
            format!("data offset {data_offset} does not follow capacity {capacity}"),
        ));
    }
    let data_len = load(W_DATA_LEN);
    if data_len == 0 || data_len > MAX_DATA_LEN {
        return Err(corrupted(
            segment,
            format!("data length {data_len} out of range"),
        ));
    }
    let need = data_offset + data_len;
    if need > info.len || need > map.len() as u64 {
        return Err(Error::Truncated {
            segment: seg(),
            need,
            have: info.len.min(map.len() as u64),
        });
    }
    let creator = Token::from_word(load(W_CREATOR))
        .ok_or_else(|| corrupted(segment, "creator token is not a valid token"))?;
    let uid = load(W_UID);
    if info.uid != me || uid != u64::from(me) {
        let owner = if info.uid != me {
            info.uid
        } else {
            uid.min(u64::from(u32::MAX)) as u32
        };
        return Err(Error::OtherUser {
            segment: seg(),
            owner,
            me,
        });
    }
    let pid_namespace = load(W_PIDNS);
    if capacity > 0 {
        os.check_time_namespace()?;
    }
    if capacity > 0 && pid_namespace != os.pid_namespace() {
        return Err(Error::OtherPidNamespace {
            segment: seg(),
            theirs: pid_namespace,
            ours: os.pid_namespace(),
        });
    }
    Ok(Fields {
        layout: Layout {
            data_offset: data_offset as usize,
            data_len: data_len as usize,
            capacity,
        },
        creator,
        uid: me,
        pid_namespace,
        created_at_nanos: load(W_CREATED_AT),
        nonce: u128::from(load(W_NONCE_LO)) | (u128::from(load(W_NONCE_HI)) << 64),
        share_key: load(W_SHARE_KEY),
    })
}

fn corrupted(segment: &str, what: impl Into<String>) -> Error {
    Error::Corrupted {
        segment: segment.to_owned(),
        what: what.into(),
    }
}

/// A segment this process just created: mapped, header published.
#[derive(Debug)]
pub struct Created<O: Os> {
    /// The mapping.
    pub map: O::Map,
    /// What the header says.
    pub fields: Fields,
    /// The name (file_system) or the open memfd (file_descriptor).
    pub backing: Backing<O>,
}

/// What keeps a segment reachable for sharing.
#[derive(Debug)]
pub enum Backing<O: Os> {
    /// A named segment; the creator holds slot `slot` of it (slot 0 at creation).
    Named {
        /// Its name.
        name: String,
        /// The slot this process holds.
        slot: usize,
    },
    /// An anonymous segment kept open by this descriptor.
    Anonymous {
        /// The memfd.
        file: O::File,
        /// The slot this process holds, if the memfd has holder slots (a pool's: slot
        /// 0 at creation).
        slot: Option<usize>,
    },
}

/// Creates a segment of `data_len` bytes with `strategy` and `capacity` holder slots;
/// the creator holds slot 0 from the moment the header is published. A file_system
/// segment is named in namespace `ns` and needs at least one slot; if sizing fails
/// ([`Error::NoSpace`]) the name is unlinked again: nothing is left behind. A
/// file_descriptor segment (a memfd, size-sealed) has none unless it is recycled by a
/// pool ([`crate::ShmPool`]), whose slots tell it when no other process holds it.
pub fn create<O: Os>(
    os: &O,
    strategy: Strategy,
    ns: &Namespace,
    data_len: usize,
    capacity: usize,
) -> Result<Created<O>> {
    if strategy == Strategy::FileSystem && capacity == 0 {
        return Err(Error::InvalidArgument(
            "a file_system segment needs at least one holder slot".into(),
        ));
    }
    let layout = Layout::new(data_len, capacity)?;
    if capacity > 0 {
        os.check_time_namespace()?;
    }
    let me = os.current();
    // One draw for both (one `getrandom` on the real kernel).
    let (nonce, share_key) = os.random_u128_and_u64()?;
    let fields = Fields {
        layout,
        creator: me,
        uid: os.uid(),
        pid_namespace: os.pid_namespace(),
        created_at_nanos: os.now_unix_nanos(),
        nonce,
        share_key,
    };
    match strategy {
        Strategy::FileSystem => {
            let name = ns.segment_name(fields.uid, fields.pid_namespace, me, fields.nonce);
            let file = os.shm_create(&name)?;
            let sized = os
                .crash_point()
                .and_then(|()| size_and_map(os, &file, &fields, Seal::No));
            drop(file);
            match sized {
                Ok(map) => Ok(Created {
                    map,
                    fields,
                    backing: Backing::Named { name, slot: 0 },
                }),
                Err(e) => {
                    // Best effort: the name is ours, fresh and unpublished.
                    let _ = os.shm_unlink(&name);
                    Err(e)
                }
            }
        }
        Strategy::FileDescriptor => {
            let file = os.memfd_create("shmrc")?;
            let map = size_and_map(os, &file, &fields, Seal::Size)?;
            Ok(Created {
                map,
                fields,
                backing: Backing::Anonymous {
                    file,
                    slot: (capacity > 0).then_some(0),
                },
            })
        }
    }
}

/// Whether [`size_and_map`] seals the file's size (memfds only: a named file cannot be
/// sealed).
#[derive(Copy, Clone, PartialEq, Eq)]
enum Seal {
    Size,
    No,
}

fn size_and_map<O: Os>(os: &O, file: &O::File, fields: &Fields, seal: Seal) -> Result<O::Map> {
    let total = fields.layout.total_len();
    os.allocate(file, total as u64)?;
    if seal == Seal::Size {
        os.seal_size(file)?;
    }
    os.crash_point()?;
    // Sized just above: no second fstat.
    let map = os.map_stated(file, total, total as u64)?;
    os.crash_point()?;
    initialize(&map, fields, Some(fields.creator))?;
    os.crash_point()?;
    Ok(map)
}

/// A segment this process opened and validated.
#[derive(Debug)]
pub struct Opened<O: Os> {
    /// The mapping of the whole file.
    pub map: O::Map,
    /// What the header says.
    pub fields: Fields,
}

/// Opens the named segment `name` of namespace `ns` and validates it, for user `me`
/// (this process's effective uid, `os.uid()`: a caller that opens many segments, or
/// has already asked, passes its answer and saves the system call).
pub fn open_named<O: Os>(os: &O, ns: &Namespace, name: &str, me: u32) -> Result<Opened<O>> {
    ns.parse(name, me)?;
    let file = os.shm_open(name)?;
    let info = os.stat(&file)?;
    open_stated(os, &file, info, name, me)
}

/// Maps and validates a received or inherited descriptor (`segment` says which, in
/// errors) as a segment, for user `me` (as [`open_named`]): one that is not shared
/// memory (a pipe, a socket, `/dev/null`, a file on a disk) is
/// [`Error::NotSharedMemory`] naming what it is, before anything else is checked.
pub fn open_file<O: Os>(os: &O, file: &O::File, segment: &str, me: u32) -> Result<Opened<O>> {
    let info = os.stat(file)?;
    let what = if info.kind != FileKind::Regular {
        Some(info.kind.describe())
    } else if !os.is_in_memory(file)? {
        Some("a regular file outside shared memory (not on tmpfs or hugetlbfs)")
    } else {
        None
    };
    if let Some(what) = what {
        return Err(Error::NotSharedMemory {
            segment: segment.to_owned(),
            what,
        });
    }
    open_stated(os, file, info, segment, me)
}

/// Maps and validates the open segment file `file`, which `fstat` described as `info`.
fn open_stated<O: Os>(
    os: &O,
    file: &O::File,
    info: FileInfo,
    segment: &str,
    me: u32,
) -> Result<Opened<O>> {
    // Another user's file is theirs whatever it holds: an empty one is not "half-created"
    // by us (a sweep would try to remove it), it is planted.
    if info.uid != me {
        return Err(Error::OtherUser {
            segment: segment.to_owned(),
            owner: info.uid,
            me,
        });
    }
    if info.len == 0 {
        return Err(Error::HalfCreated {
            segment: segment.to_owned(),
        });
    }
    let len = usize::try_from(info.len)
        .ok()
        .filter(|len| *len as u64 <= MAX_DATA_LEN + data_offset_for(MAX_CAPACITY) as u64)
        .ok_or_else(|| {
            corrupted(
                segment,
                format!("file length {} beyond any layout", info.len),
            )
        })?;
    let map = os.map_stated(file, len, info.len)?;
    let fields = validate(os, &map, &info, segment, me)?;
    Ok(Opened { map, fields })
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    //! `validate` at each bound's edge, with the checksum recomputed (a scribbled header
    //! fails the checksum first, so a hostile-header test that leaves the checksum stale
    //! never reaches the bounds behind it); `create`'s and `open_file`'s refusals.

    use std::os::fd::OwnedFd;

    use super::*;
    use crate::os::posix::{PosixFile, PosixOs};
    use crate::os::sim::{SimKernel, SimOs};

    const UID: u32 = 1000;
    const STRANGER: u32 = 1001;

    /// A mapping that says it is `len` bytes long but holds only a header (all that
    /// `validate` reads), so that bounds near `MAX_DATA_LEN` need no memory.
    struct HeaderOnly {
        words: Vec<AtomicU64>,
        len: usize,
    }

    impl Mapping for HeaderOnly {
        fn len(&self) -> usize {
            self.len
        }

        fn words(&self, n: usize) -> Option<&[AtomicU64]> {
            self.words.get(..n)
        }

        fn read(&self, _: usize, _: &mut [u8]) -> bool {
            false
        }

        fn write(&self, _: usize, _: &[u8]) -> bool {
            false
        }
    }

    /// The field words (as `Fields::words` lays them out) of a header `os` wrote for
    /// `data_len` bytes and `capacity` slots.
    fn fields(os: &SimOs, data_len: u64, capacity: u64) -> [u64; 10] {
        [
            LAYOUT_VERSION,
            data_offset_for(capacity as usize) as u64,
            data_len,
            capacity,
            os.current().word(),
            u64::from(UID),
            os.pid_namespace(),
            1_700_000_000_000_000_000,
            0x0123_4567_89ab_cdef,
            0xfedc_ba98_7654_3210,
        ]
    }

    /// `os` validates a published header holding `values` under their true checksum,
    /// in a file of `file_len` bytes owned by `file_uid`, mapped `map_len` bytes long.
    fn validate_header(
        os: &SimOs,
        values: [u64; 10],
        file_len: u64,
        file_uid: u32,
        map_len: u64,
    ) -> Result<Fields> {
        let words: Vec<AtomicU64> = (0..HEADER_WORDS).map(|_| AtomicU64::new(0)).collect();
        for (i, value) in values.iter().enumerate() {
            words[W_VERSION + i].store(*value, Ordering::Relaxed);
        }
        words[W_CHECKSUM].store(checksum(&values), Ordering::Relaxed);
        words[W_MAGIC].store(MAGIC, Ordering::Release);
        let map = HeaderOnly {
            words,
            len: usize::try_from(map_len).unwrap(),
        };
        let info = FileInfo {
            len: file_len,
            uid: file_uid,
            mode: 0o600,
            kind: crate::os::FileKind::Regular,
            identity: (0, 0),
        };
        validate(os, &map, &info, "edge", os.uid())
    }

    /// The bytes a header of `values` says its segment needs.
    fn need(values: &[u64; 10]) -> u64 {
        values[W_DATA_OFFSET - W_VERSION] + values[W_DATA_LEN - W_VERSION]
    }

    /// `validate_header` of a file and a mapping of exactly the length needed.
    fn validate_exact(os: &SimOs, values: [u64; 10]) -> Result<Fields> {
        let need = need(&values);
        validate_header(os, values, need, UID, need)
    }

    fn process() -> SimOs {
        SimKernel::new(15).spawn(UID)
    }

    fn assert_corrupted(result: Result<Fields>, about: &str) {
        match result {
            Err(Error::Corrupted { what, .. }) => assert!(what.contains(about), "{what}"),
            other => panic!("expected a corrupted {about}, got {other:?}"),
        }
    }

    /// A header published by `initialize` while another thread validates it is seen
    /// half-created (no magic yet) or whole, never torn: the magic's Release pairs with
    /// validate's Acquire. On x86 and with a normal build this holds whatever the
    /// orderings; the test earns its keep under Miri, whose weak-memory emulation lets a
    /// load unordered by happens-before return an older store (`.ci/miri`: with the
    /// plant `relaxed_publish` it reads a field as 0 behind a visible magic and fails,
    /// as loom's publish model does).
    #[test]
    fn a_header_being_published_is_never_seen_torn() {
        const ROUNDS: usize = if cfg!(miri) { 24 } else { 200 };
        let os = process();
        let values = fields(&os, 64, 2);
        let fields = validate_exact(&os, values).unwrap();
        let need = need(&values);
        let info = FileInfo {
            len: need,
            uid: UID,
            mode: 0o600,
            kind: crate::os::FileKind::Regular,
            identity: (0, 0),
        };
        let mut whole = 0;
        for _ in 0..ROUNDS {
            let map = std::sync::Arc::new(HeaderOnly {
                words: (0..HEADER_WORDS + 2).map(|_| AtomicU64::new(0)).collect(),
                len: usize::try_from(need).unwrap(),
            });
            let creator = {
                let map = map.clone();
                std::thread::spawn(move || initialize(&*map, &fields, None))
            };
            loop {
                match validate(&os, &*map, &info, "publish", UID) {
                    Ok(seen) => {
                        assert_eq!(seen, fields, "a published header read other fields");
                        whole += 1;
                        break;
                    }
                    Err(Error::HalfCreated { .. }) => std::thread::yield_now(),
                    Err(e) => panic!("publish ordering violated: a torn header: {e}"),
                }
            }
            creator.join().unwrap().unwrap();
        }
        assert_eq!(whole, ROUNDS);
    }

    #[test]
    fn a_header_at_each_bound_is_valid() {
        let os = process();
        let most_slots = validate_exact(&os, fields(&os, 1, MAX_CAPACITY as u64)).unwrap();
        assert_eq!(most_slots.layout.capacity, MAX_CAPACITY);
        let largest = validate_exact(&os, fields(&os, MAX_DATA_LEN, 1)).unwrap();
        assert_eq!(largest.layout.data_len as u64, MAX_DATA_LEN);
        let smallest = validate_exact(&os, fields(&os, 1, 1)).unwrap();
        assert_eq!(smallest.layout.data_len, 1);
        assert_eq!(smallest.nonce, 0xfedc_ba98_7654_3210_0123_4567_89ab_cdef);
        // A file, or a mapping, longer than the header needs is fine (the file may have
        // been grown; the mapping is page-rounded).
        let values = fields(&os, 64, 4);
        let longer = need(&values) + 4096;
        validate_header(&os, values, longer, UID, need(&values)).unwrap();
        validate_header(&os, values, need(&values), UID, longer).unwrap();
        // A segment without slots (file_descriptor) is not judged by pid namespace.
        let mut foreign = fields(&os, 64, 0);
        foreign[W_PIDNS - W_VERSION] = os.pid_namespace() + 1;
        validate_exact(&os, foreign).unwrap();
    }

    #[test]
    fn a_header_one_past_each_bound_is_refused() {
        let os = process();
        let too_many = fields(&os, 1, MAX_CAPACITY as u64 + 1);
        assert_corrupted(validate_exact(&os, too_many), "slot capacity");
        assert_corrupted(validate_exact(&os, fields(&os, 0, 1)), "data length");
        let mut too_long = fields(&os, MAX_DATA_LEN, 1);
        too_long[W_DATA_LEN - W_VERSION] += 1;
        assert_corrupted(validate_exact(&os, too_long), "data length");
        let mut foreign = fields(&os, 64, 1);
        foreign[W_PIDNS - W_VERSION] = os.pid_namespace() + 1;
        assert!(matches!(
            validate_exact(&os, foreign),
            Err(Error::OtherPidNamespace { .. })
        ));
    }

    #[test]
    fn a_file_or_mapping_one_byte_short_is_truncated() {
        let os = process();
        let values = fields(&os, 64, 4);
        let need = need(&values);
        let short = |file_len: u64, map_len: u64| match validate_header(
            &os, values, file_len, UID, map_len,
        ) {
            Err(Error::Truncated {
                need: said, have, ..
            }) => (said, have),
            other => panic!("expected truncated, got {other:?}"),
        };
        assert_eq!(short(need - 1, need + 4096), (need, need - 1));
        assert_eq!(short(need + 4096, need - 1), (need, need - 1));
        // A file that holds the whole header but no data: what it lacks is the data.
        assert_eq!(
            short(HEADER_BYTES as u64, HEADER_BYTES as u64),
            (need, HEADER_BYTES as u64)
        );
        // One shorter than the header: the header itself is what is missing.
        assert_eq!(
            short(HEADER_BYTES as u64 - 1, need),
            (HEADER_BYTES as u64, HEADER_BYTES as u64 - 1)
        );
    }

    #[test]
    fn another_users_segment_names_that_user_as_its_owner() {
        let os = process();
        let values = fields(&os, 64, 4);
        let need = need(&values);
        let owner = |result: Result<Fields>| match result {
            Err(Error::OtherUser { owner, me, .. }) => {
                assert_eq!(me, UID);
                owner
            }
            other => panic!("expected another user's segment, got {other:?}"),
        };
        // The file is theirs (whatever the header says)...
        assert_eq!(
            owner(validate_header(&os, values, need, STRANGER, need)),
            STRANGER
        );
        // ...or the header says so in a file of ours.
        let mut theirs = values;
        theirs[W_UID - W_VERSION] = u64::from(STRANGER);
        assert_eq!(
            owner(validate_header(&os, theirs, need, UID, need)),
            STRANGER
        );
    }

    #[test]
    fn a_file_system_segment_without_slots_is_refused_and_leaves_nothing() {
        let kernel = SimKernel::new(16);
        let os = kernel.spawn(UID);
        let ns = Namespace::new("shmrc-test-segment").unwrap();
        let err = create(&os, Strategy::FileSystem, &ns, 64, 0).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(kernel.names().is_empty());
        assert_eq!(kernel.objects_alive(), 0);
    }

    /// A memfd of this process, `len` bytes long and sparse (nothing allocated).
    fn sparse_memfd(os: &PosixOs, len: u64) -> PosixFile {
        let file = std::fs::File::from(os.memfd_create("shmrc-test").unwrap().into_inner());
        file.set_len(len).unwrap();
        PosixFile::from(OwnedFd::from(file))
    }

    #[test]
    fn a_file_longer_than_any_layout_is_refused_before_it_is_mapped() {
        let os = PosixOs::new();
        let limit = MAX_DATA_LEN + data_offset_for(MAX_CAPACITY) as u64;
        let err = open_file(&os, &sparse_memfd(&os, limit + 1), "huge", os.uid()).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupted { what, .. } if what.contains("beyond any layout")),
            "{err}"
        );
        // At the limit it is mapped (sparse, so nothing is touched but its header) and
        // judged by its header, all zeros here.
        let err = open_file(&os, &sparse_memfd(&os, limit), "huge", os.uid()).unwrap_err();
        assert!(matches!(err, Error::HalfCreated { .. }), "{err}");
    }
}
