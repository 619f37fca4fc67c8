//! The manager's decisions, and nothing else: which processes it watches and what
//! each of them uses, what to sweep when some of them die, when to sweep everything,
//! and when to exit. No I/O and no clock: the poll loop (`server.rs`) feeds it events
//! it has already vetted against the kernel (a client said Hello with a token whose
//! pidfd it holds, a client uses one more namespace, pidfds turned readable, the time
//! since the manager started) and carries out what it returns, through any [`Os`]
//! ([`Sweep::carry_out`], [`sweep_everything`]). The same registry runs, unchanged, over
//! the simulated kernel in `tests/manager_registry.rs`, with clients killed, two
//! managers at once, a manager killed part-way through a sweep, and restarts.
//!
//! What a client uses is a set of [`Use`]s, and a death sweeps just those: the
//! segments it said it attached ([`Use::Segment`]) and, in each namespace where it
//! created, the segments whose names carry its token ([`Use::Created`]) — so a death
//! costs a listing of the namespace's names and the opening of the dead's own segments,
//! not of every segment. Whole namespaces ([`Use::Namespace`]) remain for a client
//! that may hold segments this manager was not told of: one that says Hello again
//! after its manager died (it attached under the dead one), or that told more than
//! [`MAX_SEGMENTS_PER_NAMESPACE`] segments of a namespace. The client tells a use
//! before it takes a slot (see `client.rs`), so a holder is never untold.
//!
//! Built with `SHMRC_PLANT=manager_forgets_death` the registry
//! forgets a dead client without sweeping what it used (a known bug the model-based
//! test must catch; see `docs/VERIFICATION.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::Result;
use crate::namespace::Namespace;
use crate::os::{Listed, Os};
use crate::protocol::service_segment;
use crate::protocol::sweep::{SweepReport, sweep_after_deaths, sweep_listed, sweep_named};
use crate::token::Token;

/// The most namespaces one client may register: each costs a sweep at its death, and
/// a real process uses a few.
pub const MAX_NAMESPACES: usize = 64;

/// The most segments of one namespace a client may tell one by one; past it, its
/// death sweeps the whole namespace (bounded memory for the manager, and for the
/// client's record of what it told).
pub const MAX_SEGMENTS_PER_NAMESPACE: usize = 1024;

/// Something a client uses, which its death must get swept.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Use {
    /// Every segment of a namespace.
    Namespace(Namespace),
    /// The segments of a namespace that the client created (their names carry its
    /// token).
    Created(Namespace),
    /// One segment (by name) of a namespace, which the client attached.
    Segment(Namespace, String),
}

impl Use {
    /// The namespace it is in.
    pub fn namespace(&self) -> &Namespace {
        match self {
            Use::Namespace(ns) | Use::Created(ns) | Use::Segment(ns, _) => ns,
        }
    }
}

/// What the registry knows of one client: for each namespace it uses, what of it its
/// death must get swept, folded as uses are told (so a tell costs a lookup, not a
/// recount of everything the client told before).
#[derive(Clone, Default, Debug)]
struct Client {
    scopes: BTreeMap<Namespace, Scope>,
}

impl Client {
    /// The namespaces it uses in any way, sorted, each once.
    fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.scopes.keys()
    }

    /// Adds `new`, folding a namespace's segments into the whole namespace when it is
    /// swept whole anyway or they are too many. `Err` when it would use more than
    /// [`MAX_NAMESPACES`] namespaces (nothing changes then).
    fn add(&mut self, new: Use) -> std::result::Result<(), String> {
        let ns = new.namespace();
        if !self.scopes.contains_key(ns) && self.scopes.len() >= MAX_NAMESPACES {
            return Err(format!(
                "more than {MAX_NAMESPACES} namespaces for one client"
            ));
        }
        let scope = self
            .scopes
            .entry(ns.clone())
            .or_insert_with(|| Scope::DeadsOwn(BTreeSet::new()));
        match (new, &mut *scope) {
            (_, Scope::Whole) | (Use::Created(_), _) => {}
            (Use::Namespace(_), _) => *scope = Scope::Whole,
            (Use::Segment(_, name), Scope::DeadsOwn(attached)) if attached.contains(&name) => {}
            (Use::Segment(..), Scope::DeadsOwn(attached))
                if attached.len() >= MAX_SEGMENTS_PER_NAMESPACE =>
            {
                *scope = Scope::Whole
            }
            (Use::Segment(_, name), Scope::DeadsOwn(attached)) => {
                attached.insert(name);
            }
        }
        Ok(())
    }
}

/// How much of a namespace a [`Sweep`] covers.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Scope {
    /// Every segment of it.
    Whole,
    /// The segments the dead created (by their names) and these, which they attached.
    DeadsOwn(BTreeSet<String>),
}

impl Scope {
    /// Widens it to cover `other` too (one sweep for deaths reported together).
    fn merge(&mut self, other: Scope) {
        match (&mut *self, other) {
            (Scope::Whole, _) => {}
            (_, Scope::Whole) => *self = Scope::Whole,
            (Scope::DeadsOwn(attached), Scope::DeadsOwn(more)) => {
                if !cfg!(shmrc_plant = "manager_forgets_attached") {
                    attached.extend(more);
                }
            }
        }
    }
}

/// A sweep the registry decided: each namespace the dead used, once, with what of it
/// to sweep.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Sweep {
    /// Namespaces to sweep, sorted, each once, with their scope.
    pub namespaces: Vec<(Namespace, Scope)>,
    /// The clients whose death called for it.
    pub dead: Vec<Token>,
}

impl Sweep {
    /// Sweeps each namespace on `os` (`sweep_after_deaths`), in order; one result per
    /// namespace. A sweeper killed part-way gets [`crate::Error::Killed`] from then on.
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn carry_out<O: Os>(&self, os: &O) -> Vec<(Namespace, Result<SweepReport>)> {
        self.carry_out_knowing(os, None)
    }

    /// [`Sweep::carry_out`], knowing `created`: every name of `/dev/shm` that carries a
    /// dead client's token, as the shell saw them created and not yet removed. A
    /// namespace of scope [`Scope::DeadsOwn`] is then swept from those names and the
    /// attached ones alone ([`sweep_named`]), with no listing of `/dev/shm`; a whole one
    /// is listed as ever. `None`: not known (the shell lost events, or does not watch).
    pub fn carry_out_knowing<O: Os>(
        &self,
        os: &O,
        created: Option<&BTreeSet<String>>,
    ) -> Vec<(Namespace, Result<SweepReport>)> {
        self.namespaces
            .iter()
            .map(|(ns, scope)| {
                let report = match (scope, created) {
                    (Scope::Whole, _) => sweep_after_deaths(os, ns, &self.dead, None),
                    (Scope::DeadsOwn(attached), None) => {
                        sweep_after_deaths(os, ns, &self.dead, Some(attached))
                    }
                    (Scope::DeadsOwn(attached), Some(created)) => {
                        let names: BTreeSet<String> = created.union(attached).cloned().collect();
                        Ok(sweep_named(os, ns, &self.dead, &names))
                    }
                };
                (ns.clone(), report)
            })
            .collect()
    }
}

/// Sweeps every shmrc namespace of `os`'s user found among the named objects (the
/// start and grace sweeps); the listing's error when it cannot be read. `/dev/shm` is
/// listed once for all of them ([`segments_found`]), and only the user's own names
/// count.
pub fn sweep_everything<O: Os>(os: &O) -> Result<Vec<(Namespace, Result<SweepReport>)>> {
    Ok(segments_found(os)?
        .into_iter()
        .map(|(ns, names)| {
            let report = sweep_listed(os, &ns, names);
            (ns, Ok(report))
        })
        .collect())
}

/// Every shmrc namespace of user `os.uid()` that has a segment, sorted.
#[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
pub fn namespaces_found<O: Os>(os: &O) -> Result<Vec<Namespace>> {
    Ok(segments_found(os)?.into_keys().collect())
}

/// The segment names of every shmrc namespace of user `os.uid()`, by namespace, from
/// one listing: a name counts only when it parses as a segment, a publish/subscribe
/// service or a temporary service file of the user's and the user owns it. Another user can create any number of files whose names parse so (an
/// empty file is enough); they are never opened, and count for no namespace.
pub fn segments_found<O: Os>(os: &O) -> Result<BTreeMap<Namespace, Vec<String>>> {
    let uid = os.uid();
    let namespace_of = |name: &str| {
        Namespace::of_segment(name, uid)
            .map(|(ns, _)| ns)
            .ok()
            .or_else(|| service_segment::namespace_of(name, uid).map(|(ns, _)| ns))
    };
    let listed = os.shm_list_owned(crate::namespace::DEFAULT_PREFIX, &mut |name| {
        namespace_of(name).is_some()
    })?;
    let mut found: BTreeMap<Namespace, Vec<String>> = BTreeMap::new();
    for Listed { name, owner } in listed {
        if owner != uid {
            continue;
        }
        if let Some(ns) = namespace_of(&name) {
            found.entry(ns).or_default().push(name);
        }
    }
    Ok(found)
}

/// What the timer says ([`Registry::tick`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Tick {
    /// Some client lives, or the grace period runs: wait for events, at most this long
    /// (`None`: no limit).
    Wait(Option<Duration>),
    /// No client for a whole grace period: sweep everything, then exit unless someone
    /// is connecting (then [`Registry::stay`]).
    GraceOver,
}

/// The counters `shmrc status` shows.
#[derive(Copy, Clone, Default, PartialEq, Eq, Debug)]
pub struct Counters {
    /// Clients ever watched.
    pub clients_ever: u64,
    /// Namespace sweeps that completed.
    pub sweeps: u64,
    /// Dead holders' slots reclaimed by them.
    pub reclaimed: u64,
    /// Segments unlinked by them.
    pub unlinked: u64,
    /// Requests refused.
    pub refused: u64,
}

/// The manager's state: the live clients and what each uses, the grace timer, the
/// counters. See the module docs.
#[derive(Clone, Debug)]
pub struct Registry {
    grace: Duration,
    clients: BTreeMap<Token, Client>,
    /// Since when (time since start) no client has lived; `None` while one does.
    idle_since: Option<Duration>,
    counters: Counters,
}

impl Registry {
    /// A manager that just started (at time 0) with grace period `grace`. Its first
    /// act is to sweep everything: the clients of a manager that died before it are
    /// nobody's now (those alive will say Hello again).
    pub fn new(grace: Duration) -> Registry {
        Registry {
            grace,
            clients: BTreeMap::new(),
            idle_since: Some(Duration::ZERO),
            counters: Counters::default(),
        }
    }

    /// A client said Hello (the shell checked that `token` is the connecting process,
    /// alive, and watched by a pidfd) using `namespaces`. Saying Hello again (another
    /// connection of the same process, after a manager restart) adds to what it uses.
    /// `Err` is the reason to refuse it, and nothing of that Hello is taken: a new
    /// client is not watched, and a known one stays watched for what it used before
    /// (refusing its second Hello must not forget its death).
    pub fn hello(
        &mut self,
        token: Token,
        namespaces: impl IntoIterator<Item = Namespace>,
    ) -> std::result::Result<(), String> {
        let known = self.clients.get(&token);
        let mut client = known.cloned().unwrap_or_default();
        for ns in namespaces {
            client.add(Use::Namespace(ns))?;
        }
        if known.is_none() {
            self.counters.clients_ever += 1;
        }
        self.clients.insert(token, client);
        Ok(())
    }

    /// Client `token` also uses `what`. `Err` is the reason to refuse it (an unknown
    /// or dead client, too many namespaces); what it used before stays watched.
    pub fn uses(&mut self, token: Token, what: Use) -> std::result::Result<(), String> {
        self.clients
            .get_mut(&token)
            .ok_or("the client of this connection has died")?
            .add(what)
    }

    /// The clients `dead` died (their pidfds turned readable): they are forgotten, and
    /// the sweep of what they used is returned (`None` if none of them was known or
    /// used anything). Deaths reported together share one sweep per namespace.
    pub fn died(&mut self, dead: &[Token]) -> Option<Sweep> {
        let mut namespaces: BTreeMap<Namespace, Scope> = BTreeMap::new();
        let mut known = Vec::new();
        for token in dead {
            let Some(client) = self.clients.remove(token) else {
                continue;
            };
            known.push(*token);
            for (ns, scope) in client.scopes {
                namespaces
                    .entry(ns)
                    .or_insert_with(|| Scope::DeadsOwn(BTreeSet::new()))
                    .merge(scope);
            }
        }
        if cfg!(shmrc_plant = "manager_forgets_death") || namespaces.is_empty() {
            return None;
        }
        Some(Sweep {
            namespaces: namespaces.into_iter().collect(),
            dead: known,
        })
    }

    /// The timer at `now` (time since the manager started).
    pub fn tick(&mut self, now: Duration) -> Tick {
        if !self.clients.is_empty() {
            self.idle_since = None;
            return Tick::Wait(None);
        }
        let since = *self.idle_since.get_or_insert(now);
        let idle = now.saturating_sub(since);
        if idle >= self.grace {
            Tick::GraceOver
        } else {
            Tick::Wait(Some(self.grace - idle))
        }
    }

    /// After [`Tick::GraceOver`], someone was connecting: stay, with a fresh grace
    /// period from `now`.
    pub fn stay(&mut self, now: Duration) {
        self.idle_since = Some(now);
    }

    /// A sweep was carried out: counts what it did (a failed one counts nothing).
    pub fn swept(&mut self, report: &Result<SweepReport>) {
        if let Ok(report) = report {
            self.counters.sweeps += 1;
            self.counters.reclaimed += u64::from(report.reclaimed);
            self.counters.unlinked += u64::from(report.unlinked);
        }
    }

    /// A request was refused.
    pub fn refused(&mut self) {
        self.counters.refused += 1;
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The live clients, by token, each with the namespaces it uses (sorted).
    pub fn clients(&self) -> impl Iterator<Item = (Token, Vec<&Namespace>)> {
        self.clients
            .iter()
            .map(|(token, client)| (*token, client.namespaces().collect()))
    }

    /// Whether `token` is a watched client.
    pub fn watches(&self, token: Token) -> bool {
        self.clients.contains_key(&token)
    }

    /// How many clients are watched.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Whether no client is watched.
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(pid: u32) -> Token {
        Token::new(pid, 1000 + u64::from(pid)).unwrap()
    }

    fn ns(name: &str) -> Namespace {
        Namespace::new(format!("shmrc-registry-{name}")).unwrap()
    }

    const GRACE: Duration = Duration::from_millis(100);

    #[test]
    fn a_death_sweeps_each_namespace_the_dead_used_once() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), [ns("a"), ns("b")]).unwrap();
        r.hello(token(2), [ns("b")]).unwrap();
        r.uses(token(2), Use::Namespace(ns("c"))).unwrap();
        r.hello(token(3), [ns("d")]).unwrap();
        let sweep = r.died(&[token(1), token(2), token(9)]).unwrap();
        assert_eq!(
            sweep.namespaces,
            vec![
                (ns("a"), Scope::Whole),
                (ns("b"), Scope::Whole),
                (ns("c"), Scope::Whole)
            ]
        );
        assert_eq!(sweep.dead, vec![token(1), token(2)]);
        assert!(!r.watches(token(1)) && !r.watches(token(2)) && r.watches(token(3)));
        // Told twice, or of a stranger: nothing to sweep.
        assert_eq!(r.died(&[token(1), token(9)]), None);
    }

    #[test]
    fn a_second_hello_adds_to_what_the_client_uses() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), [ns("a")]).unwrap();
        r.hello(token(1), [ns("b")]).unwrap();
        assert_eq!(r.counters().clients_ever, 1);
        let sweep = r.died(&[token(1)]).unwrap();
        assert_eq!(
            sweep.namespaces,
            vec![(ns("a"), Scope::Whole), (ns("b"), Scope::Whole)]
        );
    }

    fn own(names: &[&str]) -> Scope {
        Scope::DeadsOwn(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn a_death_sweeps_just_what_the_dead_created_and_attached() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), []).unwrap();
        r.hello(token(2), []).unwrap();
        r.uses(token(1), Use::Created(ns("a"))).unwrap();
        r.uses(token(1), Use::Segment(ns("b"), "b1".into()))
            .unwrap();
        r.uses(token(1), Use::Segment(ns("b"), "b1".into()))
            .unwrap();
        r.uses(token(2), Use::Segment(ns("b"), "b2".into()))
            .unwrap();
        r.uses(token(2), Use::Segment(ns("c"), "c1".into()))
            .unwrap();
        r.uses(token(2), Use::Namespace(ns("c"))).unwrap();
        let sweep = r.died(&[token(1), token(2)]).unwrap();
        assert_eq!(
            sweep.namespaces,
            vec![
                (ns("a"), own(&[])),
                (ns("b"), own(&["b1", "b2"])),
                (ns("c"), Scope::Whole)
            ]
        );
    }

    #[test]
    fn a_whole_namespace_of_one_dead_covers_the_segments_of_another() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), [ns("a")]).unwrap();
        r.hello(token(2), []).unwrap();
        r.uses(token(2), Use::Segment(ns("a"), "a1".into()))
            .unwrap();
        // A segment told after the whole namespace changes nothing.
        r.uses(token(1), Use::Segment(ns("a"), "a2".into()))
            .unwrap();
        let sweep = r.died(&[token(2), token(1)]).unwrap();
        assert_eq!(sweep.namespaces, vec![(ns("a"), Scope::Whole)]);
    }

    #[test]
    fn too_many_segments_of_a_namespace_fold_into_the_whole_namespace() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), []).unwrap();
        for i in 0..MAX_SEGMENTS_PER_NAMESPACE {
            r.uses(token(1), Use::Segment(ns("a"), format!("s{i}")))
                .unwrap();
        }
        r.uses(token(1), Use::Segment(ns("b"), "b".into())).unwrap();
        // Told again at the limit: nothing new, nothing folded.
        r.uses(token(1), Use::Segment(ns("a"), "s0".into()))
            .unwrap();
        let mut at_limit = r.clone();
        let sweep = at_limit.died(&[token(1)]).unwrap();
        assert!(
            matches!(&sweep.namespaces[0].1, Scope::DeadsOwn(s) if s.len() == MAX_SEGMENTS_PER_NAMESPACE)
        );
        r.uses(token(1), Use::Segment(ns("a"), "one-more".into()))
            .unwrap();
        let sweep = r.died(&[token(1)]).unwrap();
        assert_eq!(
            sweep.namespaces,
            vec![(ns("a"), Scope::Whole), (ns("b"), own(&["b"]))]
        );
    }

    #[test]
    fn clients_lists_each_live_client_with_the_namespaces_it_uses() {
        let mut r = Registry::new(GRACE);
        assert!(r.is_empty());
        assert_eq!(r.len(), 0);
        r.hello(token(1), [ns("b"), ns("a")]).unwrap();
        r.hello(token(2), []).unwrap();
        r.uses(token(2), Use::Segment(ns("c"), "c1".into()))
            .unwrap();
        r.uses(token(2), Use::Created(ns("a"))).unwrap();
        r.uses(token(2), Use::Created(ns("c"))).unwrap();
        assert!(!r.is_empty());
        assert_eq!(r.len(), 2);
        let listed: Vec<(Token, Vec<&Namespace>)> = r.clients().collect();
        let (a, b, c) = (ns("a"), ns("b"), ns("c"));
        assert_eq!(
            listed,
            vec![(token(1), vec![&a, &b]), (token(2), vec![&a, &c])]
        );
        r.died(&[token(1)]);
        assert_eq!(r.len(), 1);
        r.died(&[token(2)]);
        assert!(r.is_empty());
        assert_eq!(r.clients().count(), 0);
    }

    #[test]
    fn a_client_with_no_namespace_dies_without_a_sweep() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), []).unwrap();
        assert_eq!(r.died(&[token(1)]), None);
    }

    #[test]
    fn uses_of_an_unknown_client_is_refused() {
        let mut r = Registry::new(GRACE);
        let why = r.uses(token(1), Use::Namespace(ns("a"))).unwrap_err();
        assert!(why.contains("died"), "{why}");
        r.hello(token(1), []).unwrap();
        r.died(&[token(1)]);
        assert!(r.uses(token(1), Use::Created(ns("a"))).is_err());
    }

    #[test]
    fn too_many_namespaces_are_refused_at_hello_and_at_uses() {
        let mut r = Registry::new(GRACE);
        let many: Vec<Namespace> = (0..=MAX_NAMESPACES).map(|i| ns(&format!("n{i}"))).collect();
        let why = r.hello(token(1), many.clone()).unwrap_err();
        assert!(why.contains("more than"), "{why}");
        assert!(!r.watches(token(1)), "a refused client is not watched");
        r.hello(token(2), many[..MAX_NAMESPACES].to_vec()).unwrap();
        // One already used is fine, one more is not; the client stays watched.
        r.uses(token(2), Use::Namespace(many[0].clone())).unwrap();
        assert!(
            r.uses(token(2), Use::Namespace(many[MAX_NAMESPACES].clone()))
                .is_err()
        );
        let segment = Use::Segment(many[MAX_NAMESPACES].clone(), "x".into());
        assert!(r.uses(token(2), segment).is_err());
        assert!(r.watches(token(2)));
        assert_eq!(
            r.died(&[token(2)]).unwrap().namespaces.len(),
            MAX_NAMESPACES
        );
    }

    #[test]
    fn the_grace_period_runs_only_while_no_client_lives() {
        let ms = Duration::from_millis;
        let mut r = Registry::new(GRACE);
        assert_eq!(r.tick(ms(30)), Tick::Wait(Some(ms(70))));
        r.hello(token(1), [ns("a")]).unwrap();
        assert_eq!(r.tick(ms(500)), Tick::Wait(None));
        r.died(&[token(1)]);
        // The period starts when the last client is gone, not at start.
        assert_eq!(r.tick(ms(600)), Tick::Wait(Some(GRACE)));
        assert_eq!(r.tick(ms(650)), Tick::Wait(Some(ms(50))));
        assert_eq!(r.tick(ms(700)), Tick::GraceOver);
        r.stay(ms(710));
        assert_eq!(r.tick(ms(720)), Tick::Wait(Some(ms(90))));
        assert_eq!(r.tick(ms(810)), Tick::GraceOver);
    }

    #[test]
    fn counters_count_clients_completed_sweeps_and_refusals() {
        let mut r = Registry::new(GRACE);
        r.hello(token(1), []).unwrap();
        r.hello(token(2), []).unwrap();
        r.refused();
        r.swept(&Ok(SweepReport {
            segments: Vec::new(),
            reclaimed: 2,
            unlinked: 1,
            ..SweepReport::default()
        }));
        r.swept(&Err(crate::Error::Killed));
        assert_eq!(
            r.counters(),
            Counters {
                clients_ever: 2,
                sweeps: 1,
                reclaimed: 2,
                unlinked: 1,
                refused: 1
            }
        );
    }

    /// Another user plants names of this user's shape, in many namespaces and in one
    /// of ours with a dead "creator": they count for no namespace, the sweeps of the
    /// manager leave them out (and alone), and ours are swept as ever.
    #[test]
    fn another_users_names_count_for_no_namespace_and_are_left_alone() {
        use crate::os::sim::SimKernel;
        use crate::protocol::sweep::Action;
        use crate::{CreateOptions, ShmBuf, Strategy};
        const UID: u32 = 1000;
        let kernel = SimKernel::new(26);
        let (creator, stranger) = (kernel.spawn(UID), kernel.spawn(UID + 1));
        let options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns("mine"));
        let ours = ShmBuf::create_with(&creator, 64, &options).unwrap();
        let ours_name = ours.name().unwrap().to_owned();
        let nobody = Token::new(1, 1).unwrap();
        let pid_namespace = creator.pid_namespace();
        let mut planted: Vec<String> = (0..50u128)
            .map(|i| ns(&format!("p{i}")).segment_name(UID, pid_namespace, nobody, i))
            .chain((0..50u128).map(|i| ns("mine").segment_name(UID, pid_namespace, nobody, i)))
            .collect();
        for name in &planted {
            drop(stranger.shm_create(name).unwrap());
        }
        kernel.kill(creator.pid());
        let manager = kernel.spawn(UID);

        assert_eq!(namespaces_found(&manager).unwrap(), vec![ns("mine")]);
        let swept = sweep_everything(&manager).unwrap();
        assert_eq!(swept.len(), 1, "{swept:?}");
        let (namespace, report) = &swept[0];
        let report = report.as_ref().unwrap();
        assert_eq!(namespace, &ns("mine"));
        let names: Vec<&str> = report.segments.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec![ours_name.as_str()], "only ours, unlinked");
        assert!(matches!(report.segments[0].action, Action::Unlinked));
        planted.sort();
        assert_eq!(kernel.names(), planted, "another user's names stay");

        // A death's sweep of the whole namespace leaves them out too; the user's own
        // sweep reports them, unopened.
        let whole = sweep_after_deaths(&manager, &ns("mine"), &[nobody], None).unwrap();
        assert!(whole.segments.is_empty(), "{whole:?}");
        let own = crate::protocol::sweep::sweep_with(&manager, &ns("mine"), false).unwrap();
        assert_eq!(own.segments.len(), 50);
        assert!(own.segments.iter().all(|s| matches!(
            s.action,
            Action::Skipped(crate::Error::OtherUser { owner, .. }) if owner == UID + 1
        )));
        assert_eq!(kernel.names(), planted);
        drop(ours);
    }

    /// Knowing what the dead created, a death's sweep opens just those names and the
    /// attached ones: a segment of the dead's that the shell did not report stays for a
    /// later sweep, a forged name of another user's is left out unopened, and one gone
    /// meanwhile is reported vanished.
    #[test]
    fn a_sweep_knowing_what_the_dead_created_sweeps_just_those_names() {
        use crate::os::sim::SimKernel;
        use crate::protocol::sweep::Action;
        use crate::{CreateOptions, ShmBuf, Strategy};
        const UID: u32 = 1000;
        let kernel = SimKernel::new(27);
        let (creator, stranger) = (kernel.spawn(UID), kernel.spawn(UID + 1));
        let options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns("k"));
        let reported = ShmBuf::create_with(&creator, 64, &options).unwrap();
        let unreported = ShmBuf::create_with(&creator, 64, &options).unwrap();
        let (reported_name, unreported_name) = (
            reported.name().unwrap().to_owned(),
            unreported.name().unwrap().to_owned(),
        );
        let pid_namespace = creator.pid_namespace();
        let forged = ns("k").segment_name(UID, pid_namespace, creator.token(), 1);
        drop(stranger.shm_create(&forged).unwrap());
        let gone = ns("k").segment_name(UID, pid_namespace, creator.token(), 2);
        let mut r = Registry::new(GRACE);
        r.hello(creator.token(), []).unwrap();
        r.uses(creator.token(), Use::Created(ns("k"))).unwrap();
        kernel.kill(creator.pid());
        let sweep = r.died(&[creator.token()]).unwrap();
        let created: BTreeSet<String> =
            [reported_name.clone(), forged.clone(), gone.clone()].into();
        let manager = kernel.spawn(UID);
        let done = sweep.carry_out_knowing(&manager, Some(&created));
        let report = done[0].1.as_ref().unwrap();
        let seen: Vec<(&str, bool)> = report
            .segments
            .iter()
            .map(|s| (s.name.as_str(), matches!(s.action, Action::Unlinked)))
            .collect();
        let mut expected = vec![(reported_name.as_str(), true), (gone.as_str(), false)];
        expected.sort();
        assert_eq!(seen, expected, "{report:?}");
        assert!(
            report
                .segments
                .iter()
                .any(|s| matches!(s.action, Action::Vanished))
        );
        let mut left = vec![unreported_name, forged];
        left.sort();
        assert_eq!(kernel.names(), left);
        // Not knowing, it lists the namespace: the unreported one goes too.
        let listed = sweep.carry_out(&manager);
        assert_eq!(listed[0].1.as_ref().unwrap().unlinked, 1);
        drop((reported, unreported));
    }
}
