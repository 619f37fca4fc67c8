//! The segment layout: the header every shmrc segment starts with, how a creator writes
//! and publishes it, and how an attacher validates it before touching anything else
//! (property P4: a bad segment is an [`Error`] that names the cause, never UB or SIGBUS).
//!
//! ```text
//! word  0  magic "SHMRCSEG"          published last, with Release
//! word  1  layout version
//! word  2  data offset (bytes, 64-aligned)
//! word  3  data length (bytes)
//! word  4  holder-slot capacity (0 for file_descriptor segments)
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
//! word 15  reserved, 0
//! words 16.. holder slots, `capacity` of them
//! data at `data offset`
//! ```
//!
//! Every word is accessed atomically, so a peer writing the header concurrently (even a
//! hostile one) can make validation fail but never cause a data race.
//!
//! # Planted bug
//! Built with `RUSTFLAGS='--cfg shmrc_plant="relaxed_publish"'` (`.ci/planted-bugs`),
//! [`initialize`] publishes the magic with `Relaxed` instead of `Release`, so an opener
//! may see the magic before the fields: loom's publish model must catch it.

use crate::error::{Error, Result};
use crate::holders::Holders;
use crate::local::SegmentKey;
use crate::namespace::Namespace;
use crate::os::{FileInfo, Mapping, Os};
use crate::strategy::Strategy;
use crate::sync::{AtomicU64, Ordering};
use crate::token::Token;

/// `b"SHMRCSEG"` read as a big-endian word.
pub const MAGIC: u64 = u64::from_be_bytes(*b"SHMRCSEG");
/// The layout version this build writes and reads.
pub const LAYOUT_VERSION: u64 = 1;
/// Words before the first holder slot.
pub const HEADER_WORDS: usize = 16;
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
/// Byte offset of the generation word (for tools that read headers raw).
pub const GENERATION_OFFSET: usize = W_GENERATION * 8;

/// Where things are in a segment.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-layout")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// let layout = segment.fields.expect("a valid header").layout;
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
    #[doc(hidden)]
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

    #[doc(hidden)]
    /// Length of the whole segment.
    pub fn total_len(&self) -> usize {
        self.data_offset + self.data_len
    }
}

fn data_offset_for(capacity: usize) -> usize {
    (HEADER_BYTES + 8 * capacity).next_multiple_of(DATA_ALIGN)
}

/// The immutable header fields, as written by the creator.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-fields")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// let fields = segment.fields.expect("a valid header");
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
}

impl Fields {
    #[doc(hidden)]
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
    if let (Some(token), true) = (first_holder, capacity > 0) {
        // Relaxed: slot 0 is published by the magic's Release; a claimer reads it after
        // its Acquire of the magic, so it never sees the slot free and takes it.
        words[HEADER_WORDS].store(token.word(), Ordering::Relaxed);
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
/// returns its fields. `segment` names the segment in errors; `os` supplies this
/// process's uid and pid namespace.
pub fn validate<O: Os, M: Mapping>(
    os: &O,
    map: &M,
    info: &FileInfo,
    segment: &str,
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
    let me = os.uid();
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
    },
}

/// Creates a segment of `data_len` bytes with `strategy`. A file_system segment gets
/// `capacity` holder slots in namespace `ns`, and the creator holds slot 0 from the
/// moment the header is published. If sizing fails ([`Error::NoSpace`]) the name is
/// unlinked again: nothing is left behind.
pub fn create<O: Os>(
    os: &O,
    strategy: Strategy,
    ns: &Namespace,
    data_len: usize,
    capacity: usize,
) -> Result<Created<O>> {
    let capacity = match strategy {
        Strategy::FileSystem if capacity == 0 => {
            return Err(Error::InvalidArgument(
                "a file_system segment needs at least one holder slot".into(),
            ));
        }
        Strategy::FileSystem => capacity,
        Strategy::FileDescriptor => 0,
    };
    let layout = Layout::new(data_len, capacity)?;
    let me = os.current();
    let fields = Fields {
        layout,
        creator: me,
        uid: os.uid(),
        pid_namespace: os.pid_namespace(),
        created_at_nanos: os.now_unix_nanos(),
        nonce: os.random_u128()?,
    };
    match strategy {
        Strategy::FileSystem => {
            let name = ns.segment_name(fields.uid, fields.pid_namespace, me, fields.nonce);
            let file = os.shm_create(&name)?;
            let sized = os
                .crash_point()
                .and_then(|()| size_and_map(os, &file, &fields));
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
            let map = size_and_map(os, &file, &fields)?;
            Ok(Created {
                map,
                fields,
                backing: Backing::Anonymous { file },
            })
        }
    }
}

fn size_and_map<O: Os>(os: &O, file: &O::File, fields: &Fields) -> Result<O::Map> {
    let total = fields.layout.total_len();
    os.allocate(file, total as u64)?;
    if fields.layout.capacity == 0 {
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

/// Opens the named segment `name` of namespace `ns` and validates it.
pub fn open_named<O: Os>(os: &O, ns: &Namespace, name: &str) -> Result<Opened<O>> {
    ns.parse(name, os.uid())?;
    let file = os.shm_open(name)?;
    open_file(os, &file, name)
}

/// Maps and validates an open segment file (named or anonymous).
pub fn open_file<O: Os>(os: &O, file: &O::File, segment: &str) -> Result<Opened<O>> {
    let info = os.stat(file)?;
    // Another user's file is theirs whatever it holds: an empty one is not "half-created"
    // by us (a sweep would try to remove it), it is planted.
    if info.uid != os.uid() {
        return Err(Error::OtherUser {
            segment: segment.to_owned(),
            owner: info.uid,
            me: os.uid(),
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
    let fields = validate(os, &map, &info, segment)?;
    Ok(Opened { map, fields })
}
