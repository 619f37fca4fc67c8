//! What the manager's clients create in `/dev/shm`, as inotify reports it: for each
//! watched client, the names that carry its token and still exist, so that the sweep
//! after its death opens those (and the segments it told it attached) without listing
//! `/dev/shm`, whose size any local user controls.
//!
//! The kernel queues an inotify event within the call that creates or removes a name,
//! so by the time a client's pidfd turns readable every name it created is in the
//! queue: the manager reads the queue ([`Creations::drain`]) before it sweeps a death.
//! A client said Hello before its first creation (it waits for the Welcome), so its
//! token is known before any name of its is reported. Where the index cannot be
//! trusted — inotify unavailable, the queue overflowed, a client with more than
//! [`MAX_CREATED`] live names — its creations are unknown ([`Index::forget`] says
//! `None`) and its death's sweep lists `/dev/shm` instead, as it always could.
//!
//! A publish/subscribe service's name carries no token (its publisher is in its
//! header, its subscribers in its entries), so the index keeps every service name of
//! the user that exists ([`Index::services`]: listed once when the watch starts, then
//! followed), and a death's sweep judges the services of the namespaces it sweeps; a
//! temporary service file's name carries its creator's token, and counts as its
//! creation.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsFd, BorrowedFd};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::log::warning;
use crate::namespace::{DEFAULT_PREFIX, Namespace};
use crate::os::Os;
use crate::os::posix::PosixOs;
use crate::protocol::service_segment;
use crate::token::Token;

/// The most live names one client's creations are known by; past it, they are
/// unknown (bounded memory: a client may create without end).
pub(super) const MAX_CREATED: usize = 4096;

/// What is known of one client's creations.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Known {
    /// These names, created by it, exist.
    Names(BTreeSet<String>),
    /// Events were lost, or it has too many names.
    Unknown,
}

/// The bookkeeping, free of I/O: fed the names created and removed, it keeps each
/// watched client's.
#[derive(Debug)]
pub(super) struct Index {
    uid: u32,
    pid_namespace: u64,
    clients: HashMap<Token, Known>,
    /// The user's service names that exist (of every namespace).
    services: Known,
}

impl Index {
    /// Nobody's creations yet, for the manager of user `uid` in pid namespace
    /// `pid_namespace` (a name of another pid namespace carries another meaning of its
    /// pid).
    pub(super) fn new(uid: u32, pid_namespace: u64) -> Index {
        Index {
            uid,
            pid_namespace,
            clients: HashMap::new(),
            services: Known::Names(BTreeSet::new()),
        }
    }

    /// Sets the service names that exist (a listing's, once the watch is on), or
    /// makes them unknown (`None`: the listing failed).
    pub(super) fn services(&mut self, listed: Option<BTreeSet<String>>) {
        self.services = match listed {
            Some(names) if names.len() <= MAX_CREATED => Known::Names(names),
            _ => Known::Unknown,
        };
    }

    fn is_service(&self, name: &str) -> bool {
        name.starts_with(DEFAULT_PREFIX)
            && matches!(
                service_segment::namespace_of(name, self.uid),
                Some((_, None))
            )
    }

    /// From now on, keeps `token`'s creations (kept as they are if it was watched).
    pub(super) fn watch(&mut self, token: Token) {
        self.clients
            .entry(token)
            .or_insert_with(|| Known::Names(BTreeSet::new()));
    }

    /// The name `name` appeared in `/dev/shm`.
    pub(super) fn created(&mut self, name: &str) {
        if self.is_service(name) {
            if let Known::Names(names) = &mut self.services {
                if names.len() >= MAX_CREATED {
                    self.services = Known::Unknown;
                } else {
                    names.insert(name.to_owned());
                }
            }
            return;
        }
        let Some(known) = self.creator(name).and_then(|t| self.clients.get_mut(&t)) else {
            return;
        };
        if let Known::Names(names) = known {
            if names.len() >= MAX_CREATED {
                *known = Known::Unknown;
            } else {
                names.insert(name.to_owned());
            }
        }
    }

    /// The name `name` went from `/dev/shm`.
    pub(super) fn removed(&mut self, name: &str) {
        if let Known::Names(services) = &mut self.services {
            services.remove(name);
        }
        let creator = self.creator(name);
        if let Some(Known::Names(names)) = creator.and_then(|t| self.clients.get_mut(&t)) {
            names.remove(name);
        }
    }

    /// Events were lost: nobody's creations are known any more.
    pub(super) fn lost(&mut self) {
        for known in self.clients.values_mut() {
            *known = Known::Unknown;
        }
        self.services = Known::Unknown;
    }

    /// Forgets the clients `dead`, returning the names they created that exist and
    /// every service name that exists, or `None` when that is not known for every one
    /// of them.
    pub(super) fn forget(&mut self, dead: &[Token]) -> Option<BTreeSet<String>> {
        let mut all = BTreeSet::new();
        let mut known = true;
        match &self.services {
            Known::Names(services) => all.extend(services.iter().cloned()),
            Known::Unknown => known = false,
        }
        for token in dead {
            match self.clients.remove(token) {
                Some(Known::Names(names)) => all.extend(names),
                Some(Known::Unknown) | None => known = false,
            }
        }
        known.then_some(all)
    }

    /// The creator a name of this user's shape names (a segment's or a temporary
    /// service file's), if it is of this pid namespace.
    fn creator(&self, name: &str) -> Option<Token> {
        if !name.starts_with(DEFAULT_PREFIX) {
            return None;
        }
        let parts = match Namespace::of_segment(name, self.uid) {
            Ok((_, parts)) => parts,
            Err(_) => service_segment::namespace_of(name, self.uid)?.1?,
        };
        (parts.pid_namespace == self.pid_namespace).then_some(parts.creator)
    }
}

/// The [`Index`], fed by an inotify watch on `/dev/shm`.
pub(super) struct Creations {
    inotify: Option<Inotify>,
    index: Index,
}

impl Creations {
    /// Watches `/dev/shm`; where inotify cannot (no instance left for this user, say),
    /// says so in the log and knows nothing of anyone's creations.
    pub(super) fn new(uid: u32, pid_namespace: u64) -> Creations {
        let watch = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|inotify| inotify.add_watch("/dev/shm", watch).map(|_| inotify));
        let inotify = match inotify {
            Ok(inotify) => Some(inotify),
            Err(e) => {
                warning!("cannot watch /dev/shm ({e}): every death's sweep lists it");
                None
            }
        };
        let mut index = Index::new(uid, pid_namespace);
        if inotify.is_some() {
            // Once the watch is on, so that no service name falls between the two.
            index.services(list_services(uid));
        }
        Creations { inotify, index }
    }

    /// The descriptor to poll: readable when events wait.
    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(AsFd::as_fd)
    }

    /// From now on, keeps `token`'s creations (when `/dev/shm` is watched).
    pub(super) fn watch(&mut self, token: Token) {
        if self.inotify.is_some() {
            self.index.watch(token);
        }
    }

    /// Reads every event waiting into the index.
    pub(super) fn drain(&mut self) {
        let Some(inotify) = &self.inotify else {
            return;
        };
        loop {
            let events = match inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    warning!("cannot read /dev/shm's events ({e}): every death's sweep lists it");
                    self.index.lost();
                    self.inotify = None;
                    return;
                }
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.index.lost();
                    // The watch is still on: the services can be known again.
                    self.index.services(list_services(self.index.uid));
                }
                let Some(name) = event.name.as_ref().and_then(|n| n.to_str()) else {
                    continue;
                };
                if event
                    .mask
                    .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                {
                    self.index.created(name);
                } else {
                    self.index.removed(name);
                }
            }
        }
    }

    /// Forgets the clients `dead` (after [`Creations::drain`]): the names they created
    /// that exist, or `None` when that is not known.
    pub(super) fn forget(&mut self, dead: &[Token]) -> Option<BTreeSet<String>> {
        self.index.forget(dead)
    }
}

/// The service names of user `uid` in `/dev/shm` (`None`, logged, if it cannot be
/// listed).
fn list_services(uid: u32) -> Option<BTreeSet<String>> {
    let listed = PosixOs.shm_list_owned(DEFAULT_PREFIX, &mut |name| {
        matches!(service_segment::namespace_of(name, uid), Some((_, None)))
    });
    match listed {
        Ok(listed) => Some(
            listed
                .into_iter()
                .filter(|l| l.owner == uid)
                .map(|l| l.name)
                .collect(),
        ),
        Err(e) => {
            warning!("cannot list /dev/shm's services ({e}): every death's sweep lists it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: u32 = 1000;
    const PIDNS: u64 = 4026531836;

    fn token(pid: u32) -> Token {
        Token::new(pid, 5000 + u64::from(pid)).unwrap()
    }

    fn name(ns: &str, creator: Token, nonce: u128) -> String {
        Namespace::new(ns)
            .unwrap()
            .segment_name(UID, PIDNS, creator, nonce)
    }

    #[test]
    fn a_watched_clients_live_creations_are_known_at_its_death() {
        let mut index = Index::new(UID, PIDNS);
        index.watch(token(1));
        index.watch(token(2));
        let (a, b, c) = (
            name("shmrc-x", token(1), 1),
            name("shmrc-y", token(1), 2),
            name("shmrc-x", token(1), 3),
        );
        for n in [&a, &b, &c] {
            index.created(n);
        }
        index.removed(&c);
        // Another client's, a stranger's, another uid's or pid namespace's, not ours.
        index.created(&name("shmrc-x", token(2), 4));
        index.created(&name("shmrc-x", token(3), 5));
        let other_uid =
            Namespace::new("shmrc-x")
                .unwrap()
                .segment_name(UID + 1, PIDNS, token(1), 6);
        let other_pidns =
            Namespace::new("shmrc-x")
                .unwrap()
                .segment_name(UID, PIDNS + 1, token(1), 7);
        for n in [
            &other_uid,
            &other_pidns,
            "torch_1_2",
            "shmrc-x.1000.garbage",
        ] {
            index.created(n);
        }
        assert_eq!(index.forget(&[token(1)]), Some([a, b].into()));
        assert_eq!(index.forget(&[token(1)]), None, "forgotten: not known");
        assert_eq!(index.forget(&[token(2)]).unwrap().len(), 1);
    }

    #[test]
    fn every_existing_service_and_a_dead_creators_temporary_file_come_with_a_death() {
        let ns = Namespace::new("shmrc-x").unwrap();
        let service = |s: &str| service_segment::service_name(&ns, UID, s).unwrap();
        let temporary = |t: Token| service_segment::temporary_name(&ns, UID, PIDNS, t, 9);
        let mut index = Index::new(UID, PIDNS);
        index.services(Some([service("old")].into()));
        index.watch(token(1));
        index.watch(token(2));
        for n in [service("new"), service("gone"), temporary(token(1))] {
            index.created(&n);
        }
        index.created(&temporary(token(2)));
        index.removed(&service("gone"));
        // Another user's service is none of ours.
        index.created(&service_segment::service_name(&ns, UID + 1, "theirs").unwrap());
        let expected = [service("old"), service("new"), temporary(token(1))].into();
        assert_eq!(index.forget(&[token(1)]), Some(expected));
        index.services(None);
        assert_eq!(
            index.forget(&[token(2)]),
            None,
            "services unknown: a listing"
        );
        let mut index = Index::new(UID, PIDNS);
        index.watch(token(3));
        index.lost();
        index.watch(token(4));
        assert_eq!(
            index.forget(&[token(4)]),
            None,
            "lost events: services unknown"
        );
        index.services(Some(BTreeSet::new()));
        index.watch(token(4));
        assert_eq!(index.forget(&[token(4)]), Some(BTreeSet::new()));
        // Past MAX_CREATED services (listed or created), they are unknown.
        let many = |n: usize| (0..n).map(|i| service(&format!("s{i}"))).collect();
        index.services(Some(many(MAX_CREATED + 1)));
        index.watch(token(5));
        assert_eq!(index.forget(&[token(5)]), None);
        index.services(Some(many(MAX_CREATED)));
        index.created(&service("one-more"));
        index.watch(token(6));
        assert_eq!(index.forget(&[token(6)]), None);
    }

    #[test]
    fn lost_events_or_too_many_names_make_creations_unknown() {
        let mut index = Index::new(UID, PIDNS);
        index.watch(token(1));
        index.watch(token(2));
        index.lost();
        index.watch(token(1)); // a second Hello does not make it known again
        index.watch(token(3)); // watched after the loss: known
        index.created(&name("shmrc-x", token(3), 1));
        assert_eq!(index.forget(&[token(1)]), None);
        assert_eq!(index.forget(&[token(3), token(2)]), None, "one unknown");
        let mut index = Index::new(UID, PIDNS);
        index.watch(token(4));
        for i in 0..=MAX_CREATED as u128 {
            index.created(&name("shmrc-x", token(4), i));
        }
        assert_eq!(index.forget(&[token(4)]), None);
        let mut index = Index::new(UID, PIDNS);
        index.watch(token(5));
        assert_eq!(index.forget(&[token(5)]), Some(BTreeSet::new()));
    }

    #[test]
    fn inotify_reports_this_processs_creations_and_removals() {
        let os = PosixOs;
        let me = os.current();
        let mut creations = Creations::new(os.uid(), os.pid_namespace());
        assert!(creations.fd().is_some(), "/dev/shm can be watched");
        creations.watch(me);
        let ns = Namespace::new(format!("shmrc-creations-{}", std::process::id())).unwrap();
        let names: Vec<String> = (0..3)
            .map(|i| ns.segment_name(os.uid(), os.pid_namespace(), me, i))
            .collect();
        for n in &names {
            drop(os.shm_create(n).unwrap());
        }
        os.shm_unlink(&names[2]).unwrap();
        creations.drain();
        let known = creations.forget(&[me]);
        for n in &names[..2] {
            let _ = os.shm_unlink(n);
        }
        assert_eq!(known, Some(names[..2].iter().cloned().collect()));
    }
}
