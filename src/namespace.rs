//! Segment names and the namespace that owns them (property P2: shmrc never touches a
//! name outside its own namespace).
//!
//! A file_system segment is named `<prefix>.<uid>.<pidns>.<pid>.<start>.<nonce>`: the
//! namespace prefix (which starts with `shmrc`), the creator's uid, pid namespace, pid
//! and start time (so a sweeper knows who created it, and whether it can judge that
//! process's liveness, even when the header was never written) and 128 random bits in
//! hex (so nobody can guess it). The name is what `/dev/shm` lists; the
//! posix backend adds the leading `/` that `shm_open` wants.

use std::fmt;

use crate::error::{Error, Result};
use crate::token::Token;

/// The longest prefix accepted, so names stay far below `NAME_MAX`.
pub const MAX_PREFIX_LEN: usize = 48;
/// The prefix of the default namespace.
pub const DEFAULT_PREFIX: &str = "shmrc";

/// A namespace: every name with this prefix and the calling user's uid belongs to it.
///
/// shmrc never opens, unlinks or trusts a name outside the namespaces of its user. A
/// file_system segment is named `<prefix>.<uid>.<pidns>.<pid>.<start>.<nonce>`: the
/// prefix (which starts with `shmrc`), the creator's uid, pid namespace, pid and start
/// time (so that a sweep knows who created it even when its header was never written)
/// and 128 random bits in hex (so that nobody can guess it). The default namespace is
/// `shmrc`; a job of its own namespace can sweep and list just its segments.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-ns")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// assert!(buf.name().unwrap().starts_with("shmrc-doc-ns."));
/// assert_eq!(shmrc::inspect(&ns)?.segments.len(), 1);
/// assert_eq!(Namespace::default().prefix(), "shmrc");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Namespace {
    prefix: String,
}

/// What a segment name says about its creation.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-nameparts")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// assert_eq!(segment.parts.creator.pid(), std::process::id());
/// assert_eq!(segment.parts.uid, nix::unistd::geteuid().as_raw());
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct NameParts {
    /// The uid in the name.
    pub uid: u32,
    /// The creator's pid namespace (the inode of its `/proc/self/ns/pid`).
    pub pid_namespace: u64,
    /// The creating process.
    pub creator: Token,
    /// The random part.
    pub nonce: u128,
}

/// Whether `b` may stand in a name shmrc makes up from a user's word (a namespace's
/// prefix, a service's name, a fake driver's prefix): an ASCII letter or digit, `-` or
/// `_` (what every file system and `/dev/shm` name takes as it is).
pub(crate) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

impl Namespace {
    /// A namespace with `prefix`: it must start with `shmrc`, be at most 48 bytes, and
    /// use only ASCII letters, digits, `-` and `_`; else [`Error::BadNamespace`] says
    /// which rule it breaks.
    ///
    /// ```
    /// let ns = shmrc::Namespace::new("shmrc-train-42").unwrap();
    /// assert_eq!(ns.prefix(), "shmrc-train-42");
    /// assert!(shmrc::Namespace::new("torch").is_err());
    /// ```
    pub fn new(prefix: impl Into<String>) -> Result<Namespace> {
        let prefix = prefix.into();
        let why = if !prefix.starts_with(DEFAULT_PREFIX) {
            Some("it must start with \"shmrc\"")
        } else if prefix.len() > MAX_PREFIX_LEN {
            Some("it is longer than 48 bytes")
        } else if !prefix.bytes().all(is_name_byte) {
            Some("only ASCII letters, digits, '-' and '_' are allowed")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::BadNamespace { prefix, why }),
            None => Ok(Namespace { prefix }),
        }
    }

    /// The prefix (also what `Display` prints).
    ///
    /// ```
    /// let ns = shmrc::Namespace::new("shmrc-eval")?;
    /// assert_eq!(ns.prefix(), "shmrc-eval");
    /// assert_eq!(ns.to_string(), "shmrc-eval");
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The start of every name this namespace has in `/dev/shm` for user `uid`:
    /// `<prefix>.<uid>.`, its segments' names and its publish/subscribe services' alike.
    /// A prefix never holds a `.`, so no other namespace's name starts the same way; a
    /// name that does is not necessarily shmrc's ([`Namespace::contains`] says whether
    /// it is one of this namespace's segments). For a program that watches or counts
    /// the namespace's names itself (`/dev/shm`, inotify).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let uid = nix::unistd::geteuid().as_raw();
    /// let ns = Namespace::new("shmrc-doc-name-start")?;
    /// assert_eq!(ns.name_start(uid), format!("shmrc-doc-name-start.{uid}."));
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let ours = std::fs::read_dir("/dev/shm")
    ///     .map_err(|e| shmrc::Error::os("read /dev/shm", e))?
    ///     .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
    ///     .filter(|name| name.starts_with(&ns.name_start(uid)))
    ///     .count();
    /// assert_eq!(ours, 1);
    /// drop(buf);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn name_start(&self, uid: u32) -> String {
        format!("{}.{}.", self.prefix, uid)
    }

    /// The name of a new segment of user `uid` created by `creator`, a process of pid
    /// namespace `pid_namespace`.
    pub(crate) fn segment_name(
        &self,
        uid: u32,
        pid_namespace: u64,
        creator: Token,
        nonce: u128,
    ) -> String {
        format!(
            "{}{}.{}.{}.{:032x}",
            self.name_start(uid),
            pid_namespace,
            creator.pid(),
            creator.start_ticks(),
            nonce
        )
    }

    /// Parses `name` as a segment of this namespace for user `uid`, or says why not.
    pub(crate) fn parse(&self, name: &str, uid: u32) -> Result<NameParts> {
        let outside = || Error::OutsideNamespace {
            name: name.to_owned(),
            namespace: format!("{}.{}", self.prefix, uid),
        };
        let rest = name
            .strip_prefix(&self.name_start(uid))
            .ok_or_else(outside)?;
        let parts = parse_name_tail(rest).ok_or_else(outside)?;
        Ok(NameParts { uid, ..parts })
    }

    /// Parses `name` as a segment of *any* shmrc namespace of user `uid` (as a handle
    /// received from a peer names it), returning that namespace and the parts.
    pub(crate) fn of_segment(name: &str, uid: u32) -> Result<(Namespace, NameParts)> {
        let prefix = name.split('.').next().unwrap_or_default();
        let ns = Namespace::new(prefix).map_err(|_| Error::OutsideNamespace {
            name: name.to_owned(),
            namespace: format!("shmrc*.{uid}"),
        })?;
        let parts = ns.parse(name, uid)?;
        Ok((ns, parts))
    }

    /// Whether `name` (as `/dev/shm` lists it) is a segment of this namespace for user
    /// `uid`: the prefix, then the uid, then a creator and nonce in shmrc's format. A
    /// longer prefix is another namespace.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let uid = nix::unistd::geteuid().as_raw();
    /// let ns = Namespace::new("shmrc-doc-contains")?;
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let name = buf.name().unwrap();
    /// assert!(ns.contains(name, uid));
    /// assert!(!ns.contains(name, uid + 1)); // another user's
    /// assert!(!Namespace::new("shmrc-doc-contains2")?.contains(name, uid));
    /// assert!(!ns.contains("torch_123_456_7", uid));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn contains(&self, name: &str, uid: u32) -> bool {
        self.parse(name, uid).is_ok()
    }
}

impl Default for Namespace {
    /// The namespace `shmrc`.
    fn default() -> Namespace {
        Namespace {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)
    }
}

/// Parses `<pidns>.<pid>.<start>.<nonce>` strictly (canonical decimals, 32 lowercase
/// hex digits).
fn parse_name_tail(rest: &str) -> Option<NameParts> {
    let mut fields = rest.split('.');
    let pid_namespace = canonical_decimal(fields.next()?)?;
    let pid = canonical_decimal(fields.next()?)?;
    let start = canonical_decimal(fields.next()?)?;
    let nonce_hex = fields.next()?;
    if fields.next().is_some()
        || nonce_hex.len() != 32
        || !nonce_hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let nonce = u128::from_str_radix(nonce_hex, 16).ok()?;
    let creator = Token::new(u32::try_from(pid).ok()?, start)?;
    if creator.start_ticks() != start {
        return None;
    }
    Some(NameParts {
        uid: 0,
        pid_namespace,
        creator,
        nonce,
    })
}

fn canonical_decimal(s: &str) -> Option<u64> {
    // Digits only (`parse` would take a leading `+`) and no leading zero; `parse`
    // refuses the empty string and what overflows a u64.
    let digits = s.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = s.len() > 1 && s.starts_with('0');
    if digits && !leading_zero {
        s.parse().ok()
    } else {
        None
    }
}

/// [`Namespace`]'s name making and parsing, for the checkers' seam (feature `checkers`,
/// not API): `shmrc::checkers::namespace::NamespaceExt`, to make the names of segments
/// a test plants and to read the names it finds. Each is the crate's own `pub(crate)`
/// method of the same name.
#[cfg(feature = "checkers")]
pub trait NamespaceExt: Sized {
    /// The name of a new segment of user `uid` created by `creator`, a process of pid
    /// namespace `pid_namespace`.
    fn segment_name(&self, uid: u32, pid_namespace: u64, creator: Token, nonce: u128) -> String;
    /// Parses `name` as a segment of this namespace for user `uid`, or says why not.
    fn parse(&self, name: &str, uid: u32) -> Result<NameParts>;
    /// Parses `name` as a segment of *any* shmrc namespace of user `uid`, returning
    /// that namespace and the parts.
    fn of_segment(name: &str, uid: u32) -> Result<(Self, NameParts)>;
}

#[cfg(feature = "checkers")]
impl NamespaceExt for Namespace {
    fn segment_name(&self, uid: u32, pid_namespace: u64, creator: Token, nonce: u128) -> String {
        Namespace::segment_name(self, uid, pid_namespace, creator, nonce)
    }

    fn parse(&self, name: &str, uid: u32) -> Result<NameParts> {
        Namespace::parse(self, name, uid)
    }

    fn of_segment(name: &str, uid: u32) -> Result<(Namespace, NameParts)> {
        Namespace::of_segment(name, uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> Token {
        Token::new(4242, 987_654).unwrap()
    }

    #[test]
    fn a_generated_name_parses_back() {
        let ns = Namespace::new("shmrc-t").unwrap();
        let name = ns.segment_name(1000, 4026531836, token(), 0xabc);
        assert_eq!(
            name,
            "shmrc-t.1000.4026531836.4242.987654.00000000000000000000000000000abc"
        );
        let parts = ns.parse(&name, 1000).unwrap();
        assert_eq!(parts.creator, token());
        assert_eq!(parts.nonce, 0xabc);
        assert_eq!(parts.pid_namespace, 4026531836);
        assert_eq!(parts.uid, 1000, "the uid the name was parsed for");
        assert!(name.len() < 255);
    }

    #[test]
    fn names_of_other_namespaces_users_or_shapes_are_outside() {
        let ns = Namespace::new("shmrc-t").unwrap();
        assert_eq!(ns.to_string(), "shmrc-t");
        let name = ns.segment_name(1000, 5, token(), 1);
        assert!(ns.contains(&name, 1000));
        assert!(!ns.contains(&name, 1001), "another uid");
        let other = Namespace::new("shmrc-t2").unwrap();
        assert!(
            !other.contains(&name, 1000),
            "a longer prefix is another namespace"
        );
        for bad in [
            "torch_123_456_7",
            "shmrc-t.1000.5.4242.987654",
            "shmrc-t.1000.4242.987654.00000000000000000000000000000abc",
            "shmrc-t.1000.5.4242.987654.xyz",
            "shmrc-t.1000.5.04242.987654.00000000000000000000000000000abc",
            "shmrc-t.1000.5.0.987654.00000000000000000000000000000abc",
            "shmrc-t.1000.5.4242.987654.00000000000000000000000000000ABC",
            "shmrc-t.1000.5.4242.987654.00000000000000000000000000000abc.x",
            "shmrc-t.1000.5.4242.987654.00000000000000000000000000000abc/../x",
        ] {
            assert!(
                matches!(ns.parse(bad, 1000), Err(Error::OutsideNamespace { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_decimal_field_is_canonical_or_refused() {
        for (field, value) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("10", Some(10)),
            ("18446744073709551615", Some(u64::MAX)),
            ("", None),
            ("00", None),
            ("01", None),
            ("+1", None),
            ("-1", None),
            ("1a", None),
            (" 1", None),
            ("18446744073709551616", None),
            ("000000000000000000001", None),
        ] {
            assert_eq!(canonical_decimal(field), value, "{field:?}");
        }
    }

    #[test]
    fn a_segment_name_tells_its_namespace() {
        let ns = Namespace::new("shmrc-x").unwrap();
        let name = ns.segment_name(7, 5, token(), 9);
        let (found, parts) = Namespace::of_segment(&name, 7).unwrap();
        assert_eq!(found, ns);
        assert_eq!(parts.nonce, 9);
        assert!(Namespace::of_segment(&name, 8).is_err());
        assert!(
            Namespace::of_segment("torch.7.5.1.1.00000000000000000000000000000009", 7).is_err()
        );
    }

    #[test]
    fn bad_prefixes_are_refused_with_a_reason() {
        for bad in ["torch", "shmrc.x", "shmrc/x", "", &"shmrc".repeat(20)] {
            assert!(
                matches!(Namespace::new(bad), Err(Error::BadNamespace { .. })),
                "{bad}"
            );
        }
        assert!(Namespace::new("shmrc_ok-1").is_ok());
    }
}
