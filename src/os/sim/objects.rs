//! Objects and files: the shared-memory [`Object`] (named or a memfd) and its
//! reference counts, the open [`SimFile`], and the file half of `Os`: creating,
//! opening, linking, unlinking and listing named objects, memfds and their size seal, `dup` and
//! `fstat`.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use super::faults::UnlinkRace;
use super::kernel::{Ref, SimKernel};
use super::map::Storage;
use super::process::SimOs;
use super::{NAME_MAX, os_error};
use crate::error::{Error, Result};
use crate::os::{FileInfo, Listed};

/// A shared-memory object: a named one or a memfd, alive while anything references it.
pub(super) struct Object {
    /// Length in bytes (what `fstat` says); never more than `storage` covers.
    pub(super) len: u64,
    pub(super) storage: Storage,
    pub(super) uid: u32,
    pub(super) mode: u32,
    pub(super) anonymous: bool,
    pub(super) sealed: bool,
    pub(super) named: bool,
    /// Bytes reserved by `allocate`, counted against the space limit.
    pub(super) reserved: u64,
    pub(super) files: usize,
    pub(super) in_flight: usize,
    pub(super) maps: usize,
    /// Shrinks of this mapped object whose zeroing (done outside the lock) has not
    /// finished yet; growing it back in place is refused meanwhile (see
    /// [`SimKernel::set_object_len`]).
    pub(super) zeroing: usize,
}

impl Object {
    pub(super) fn new(uid: u32, mode: u32, anonymous: bool) -> Object {
        Object {
            len: 0,
            storage: Arc::new(Vec::new()),
            uid,
            mode,
            anonymous,
            sealed: false,
            named: !anonymous,
            reserved: 0,
            files: 0,
            in_flight: 0,
            maps: 0,
            zeroing: 0,
        }
    }

    pub(super) fn referenced(&self) -> bool {
        self.named || self.files > 0 || self.in_flight > 0 || self.maps > 0
    }
}

/// An open file of a simulated process; dropping it closes it.
pub struct SimFile {
    pub(super) kernel: SimKernel,
    id: u64,
    pub(super) object: u64,
    pub(super) owner: u32,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("id", &self.id)
            .field("object", &self.object)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        self.kernel.with(|st, garbage| {
            if let Some(p) = st.procs.get_mut(&self.owner) {
                debug_assert!(p.fds > 0, "a process closed more files than it had");
                p.fds -= 1;
            }
            st.unref(self.object, Ref::File, garbage);
        });
    }
}

impl SimOs {
    pub(super) fn file(&self, id: u64, object: u64) -> SimFile {
        SimFile {
            kernel: self.kernel.clone(),
            id,
            object,
            owner: self.pid,
        }
    }

    /// Opens a new file for this process on an object made by `make`, named `name`
    /// if any.
    fn create_object(
        &self,
        call: &'static str,
        name: Option<&str>,
        make: impl FnOnce() -> Object,
    ) -> Result<SimFile> {
        let (id, object) = self.with(|st, _| {
            st.fd_available(self.pid, call)?;
            if let Some(name) = name {
                if st.names.contains_key(name) {
                    return Err(os_error(call, libc::EEXIST));
                }
            }
            let object = st.fresh_id();
            st.objects.insert(object, make());
            if let Some(name) = name {
                st.names.insert(name.to_owned(), object);
            }
            Ok((st.open_file(self.pid, object), object))
        })?;
        Ok(self.file(id, object))
    }

    /// Checks that `file` is of this process's kernel; whether this process owns it is
    /// checked under the lock ([`State::owned`](super::kernel::State::owned)), after
    /// whether it is alive.
    pub(super) fn check_file(&self, file: &SimFile) -> Result<()> {
        self.kernel.same(&file.kernel)
    }
}

/// Refuses what the posix backend refuses before asking the kernel (a name that is
/// not one plain path component), and what the kernel then refuses for `call` (a
/// component longer than `NAME_MAX`).
fn check_name(name: &str, call: &'static str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a valid shared-memory object name"
        )));
    }
    if name.len() > NAME_MAX {
        return Err(os_error(call, libc::ENAMETOOLONG));
    }
    Ok(())
}

/// [`Os::shm_create`](crate::os::Os::shm_create).
pub(super) fn shm_create(os: &SimOs, name: &str) -> Result<SimFile> {
    check_name(name, "shm_open")?;
    let uid = os.uid;
    os.create_object("shm_open", Some(name), || Object::new(uid, 0o600, false))
}

/// [`Os::shm_open`](crate::os::Os::shm_open).
pub(super) fn shm_open(os: &SimOs, name: &str) -> Result<SimFile> {
    check_name(name, "shm_open")?;
    let (id, object) = os.with(|st, _| {
        st.fd_available(os.pid, "shm_open")?;
        let gone = || Error::Gone {
            segment: name.to_owned(),
        };
        let object = *st.names.get(name).ok_or_else(gone)?;
        let owner = st.objects.get(&object).ok_or_else(gone)?.uid;
        if owner != os.uid {
            return Err(Error::OtherUser {
                segment: name.to_owned(),
                owner,
                me: os.uid,
            });
        }
        Ok((st.open_file(os.pid, object), object))
    })?;
    Ok(os.file(id, object))
}

/// [`Os::shm_unlink`](crate::os::Os::shm_unlink).
pub(super) fn shm_unlink(os: &SimOs, name: &str) -> Result<()> {
    check_name(name, "shm_unlink")?;
    os.with(|st, garbage| {
        st.caller(os.pid)?;
        let race = st.unlink_races.remove(name);
        if race == Some(UnlinkRace::Refused) {
            return Err(os_error("shm_unlink", libc::EPERM));
        }
        // Another process's unlink, just before ours: the same removal, then ours
        // finds the name gone.
        let removed = st.names.remove(name);
        if let Some(object) = removed {
            // Named while any other name links it still.
            let named = st.names.values().any(|&other| other == object);
            if let Some(o) = st.objects.get_mut(&object) {
                o.named = named;
            }
            st.collect(object, garbage);
        }
        match (removed, race) {
            (Some(_), None) => Ok(()),
            _ => Err(Error::Gone {
                segment: name.to_owned(),
            }),
        }
    })
}

/// [`Os::shm_link`](crate::os::Os::shm_link): one step, as `link` is.
pub(super) fn shm_link(os: &SimOs, name: &str, new_name: &str) -> Result<()> {
    check_name(name, "link")?;
    check_name(new_name, "link")?;
    os.with(|st, _| {
        st.caller(os.pid)?;
        let object = *st.names.get(name).ok_or_else(|| Error::Gone {
            segment: name.to_owned(),
        })?;
        if st.names.contains_key(new_name) {
            return Err(os_error("link", libc::EEXIST));
        }
        st.names.insert(new_name.to_owned(), object);
        Ok(())
    })
}

/// [`Os::shm_list`](crate::os::Os::shm_list).
pub(super) fn shm_list(os: &SimOs, start: &str) -> Result<Vec<String>> {
    os.with(|st, _| {
        st.caller(os.pid)?;
        Ok(st
            .names
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .map(|(name, _)| name)
            .take_while(|name| name.starts_with(start))
            .cloned()
            .collect())
    })
}

/// [`Os::shm_list_owned`](crate::os::Os::shm_list_owned): one step, as
/// [`shm_list`]; `wanted` is asked outside the kernel's lock (it may be any code).
pub(super) fn shm_list_owned(
    os: &SimOs,
    start: &str,
    wanted: &mut dyn FnMut(&str) -> bool,
) -> Result<Vec<Listed>> {
    let listed: Vec<Listed> = os.with(|st, _| {
        st.caller(os.pid)?;
        Ok::<_, Error>(
            st.names
                .range::<str, _>((Bound::Included(start), Bound::Unbounded))
                .take_while(|(name, _)| name.starts_with(start))
                .filter_map(|(name, object)| {
                    let owner = st.objects.get(object)?.uid;
                    Some(Listed {
                        name: name.clone(),
                        owner,
                    })
                })
                .collect(),
        )
    })?;
    Ok(listed.into_iter().filter(|l| wanted(&l.name)).collect())
}

/// [`Os::shm_owner`](crate::os::Os::shm_owner).
pub(super) fn shm_owner(os: &SimOs, name: &str) -> Result<u32> {
    check_name(name, "fstatat")?;
    os.with(|st, _| {
        st.caller(os.pid)?;
        st.names
            .get(name)
            .and_then(|object| st.objects.get(object))
            .map(|o| o.uid)
            .ok_or_else(|| Error::Gone {
                segment: name.to_owned(),
            })
    })
}

/// [`Os::memfd_create`](crate::os::Os::memfd_create) (the debug name is not kept).
pub(super) fn memfd_create(os: &SimOs) -> Result<SimFile> {
    let uid = os.uid;
    // Linux reports a memfd with mode 0777.
    os.create_object("memfd_create", None, || Object::new(uid, 0o777, true))
}

/// [`Os::seal_size`](crate::os::Os::seal_size).
pub(super) fn seal_size(os: &SimOs, file: &SimFile) -> Result<()> {
    const CALL: &str = "fcntl(F_ADD_SEALS)";
    os.check_file(file)?;
    os.with(|st, _| {
        st.owned(os.pid, file.owner, CALL)?;
        let o = st.object(file.object, CALL)?;
        if !o.anonymous {
            // F_ADD_SEALS on a file that does not allow sealing.
            return Err(os_error(CALL, libc::EINVAL));
        }
        o.sealed = true;
        Ok(())
    })
}

/// [`Os::dup`](crate::os::Os::dup).
pub(super) fn dup(os: &SimOs, file: &SimFile) -> Result<SimFile> {
    // What the posix backend's `try_clone_to_owned` calls.
    const CALL: &str = "fcntl(F_DUPFD_CLOEXEC)";
    os.check_file(file)?;
    let id = os.with(|st, _| {
        st.owned(os.pid, file.owner, CALL)?;
        st.object(file.object, CALL)?;
        st.fd_available(os.pid, CALL)?;
        Ok::<_, Error>(st.open_file(os.pid, file.object))
    })?;
    Ok(os.file(id, file.object))
}

/// [`Os::stat`](crate::os::Os::stat).
pub(super) fn stat(os: &SimOs, file: &SimFile) -> Result<FileInfo> {
    os.check_file(file)?;
    os.with(|st, _| {
        st.owned(os.pid, file.owner, "fstat")?;
        let o = st.object(file.object, "fstat")?;
        Ok(FileInfo {
            len: o.len,
            uid: o.uid,
            mode: o.mode,
            kind: crate::os::FileKind::Regular,
            identity: (0, file.object),
        })
    })
}
