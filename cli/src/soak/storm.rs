//! The soak's run: the workers it keeps (a fixed number of slots, each refilled after a
//! kill), what each holds, the operations of the [`Plan`] carried out one at a time,
//! the manager's SIGKILLs and SIGSTOP, and the deaths whose names must go.
//!
//! Failures: a checksum mismatch; any failure of a command to a live worker (a `Gone`
//! or `Stale` included) except the attach of a handle whose sender was killed; a name a
//! live worker holds missing from `/dev/shm`; a killed worker's own names not gone
//! within [`SWEEP_LIMIT`] of its SIGKILL (while the manager ran; [`DISTURBED_LIMIT`]
//! when the manager was killed or stopped meanwhile).

use std::collections::BTreeSet;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shmrc::{Result, ShareHandle};

use super::fleet::{Answer, Managers, Setting, Worker};
use super::plan::{Kind, ManagerEvent, Op, Plan};
use super::shm_watch::{DeletionWatch, names};
use super::tally::Tally;

/// How long a killed worker's own names may stay while the manager runs.
pub const SWEEP_LIMIT: Duration = Duration::from_secs(10);
/// The same, when the manager was killed or stopped meanwhile.
pub const DISTURBED_LIMIT: Duration = Duration::from_secs(30);
/// Most buffers one worker holds (beyond, a create becomes a release).
const MOST_HELD: usize = 24;

/// A buffer a worker holds.
struct Held {
    key: u64,
    kind: Kind,
    name: Option<String>,
    sum: u64,
}

/// A live worker and what it holds; `pooled` are the names its file_system pool made
/// (the pool may still hold them after the worker let its buffer go).
struct Member {
    worker: Worker,
    held: Vec<Held>,
    pooled: BTreeSet<String>,
}

/// A killed worker's own names (held by no live worker), not all gone yet.
struct Death {
    worker: u32,
    at: Instant,
    names: Vec<String>,
    disturbed: bool,
}

/// One soak.
pub struct Storm<'s> {
    setting: &'s Setting,
    listener: UnixListener,
    socket: PathBuf,
    members: Vec<Option<Member>>,
    next_id: u32,
    pub managers: Managers,
    watch: DeletionWatch,
    deaths: Vec<Death>,
    /// The start of every name of the soak's namespace.
    pub name_start: String,
    stopped_until: Option<Instant>,
    pub tally: Tally,
}

impl<'s> Storm<'s> {
    /// Starts the manager and `workers` workers.
    pub fn start(
        setting: &'s Setting,
        socket: PathBuf,
        name_start: String,
        workers: usize,
    ) -> Result<Storm<'s>> {
        let listener =
            UnixListener::bind(&socket).map_err(|e| shmrc::Error::os("bind the soak socket", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| shmrc::Error::os("set the soak socket non-blocking", e))?;
        let watch = DeletionWatch::new(&name_start)?;
        let managers = Managers::start(setting)?;
        let mut storm = Storm {
            setting,
            listener,
            socket,
            members: (0..workers).map(|_| None).collect(),
            next_id: 0,
            managers,
            watch,
            deaths: Vec::new(),
            name_start,
            stopped_until: None,
            tally: Tally::default(),
        };
        for slot in 0..workers {
            storm.refill(slot)?;
        }
        Ok(storm)
    }

    /// Carries out the plan for `run`.
    pub fn run(&mut self, plan: &mut Plan, run: Duration) {
        let begin = Instant::now();
        while begin.elapsed() < run {
            if let Some(event) = plan.due(begin.elapsed()) {
                self.manager_event(event);
            }
            if self
                .stopped_until
                .is_some_and(|until| Instant::now() >= until)
            {
                self.resume_manager();
            }
            self.operate(plan.next());
            self.settle_deaths(false);
        }
    }

    /// Ends the run: the manager resumed, every worker told to exit (each releases what
    /// it holds), the deaths settled; then the namespace must empty by itself.
    pub fn finish(&mut self, limit: Duration) {
        self.resume_manager();
        for slot in 0..self.members.len() {
            if let Some(member) = self.members[slot].take() {
                let id = member.worker.id;
                if !member.worker.exit() {
                    self.tally
                        .fail(format!("worker {id} did not exit when asked"));
                }
            }
        }
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline
            && (!self.deaths.is_empty() || !names(&self.name_start).is_empty())
        {
            self.settle_deaths(false);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.settle_deaths(true);
        let left = names(&self.name_start);
        if !left.is_empty() {
            self.tally.fail(format!(
                "left in /dev/shm {limit:?} after the last worker exited: {left:?}"
            ));
        }
    }

    fn manager_event(&mut self, event: ManagerEvent) {
        self.resume_manager();
        for death in &mut self.deaths {
            death.disturbed = true;
        }
        match event {
            ManagerEvent::Kill => {
                if self.managers.kill() {
                    self.tally.managers_killed += 1;
                }
                if let Err(e) = self.managers.start_another(self.setting) {
                    self.tally.fail(format!("starting a manager: {e}"));
                }
            }
            ManagerEvent::Stop(length) => {
                if self.managers.stop(length) {
                    self.tally.managers_stopped += 1;
                    self.stopped_until = Some(Instant::now() + length);
                }
            }
        }
    }

    /// Ends a stop: the manager is SIGCONTed on time by a thread of its own (or now,
    /// if its time is not up).
    fn resume_manager(&mut self) {
        if self.stopped_until.take().is_some() {
            self.managers.resume();
        }
    }

    fn refill(&mut self, slot: usize) -> Result<()> {
        let worker = Worker::start(self.setting, &self.listener, &self.socket, self.next_id)?;
        self.next_id += 1;
        self.members[slot] = Some(Member {
            worker,
            held: Vec::new(),
            pooled: BTreeSet::new(),
        });
        Ok(())
    }

    fn operate(&mut self, op: Op) {
        match op {
            Op::Create { w, kind, len, seed } => {
                let full = self.members[w]
                    .as_ref()
                    .is_some_and(|m| m.held.len() >= MOST_HELD);
                if full {
                    return self.operate(Op::Release { w, pick: seed });
                }
                self.create(w, kind, len, seed);
            }
            Op::Share {
                from,
                to,
                pick,
                as_bytes,
            } => self.share(from, to, pick, as_bytes, false),
            Op::ShareThenKillSender { from, to, pick } => self.share(from, to, pick, false, true),
            Op::Release { w, pick } => self.release(w, pick),
            Op::Verify { w } => self.verify(w),
            Op::CheckNames => self.check_names(),
            Op::Kill { w } => {
                if self.kill(w, None) {
                    self.tally.killed_idle += 1;
                }
            }
            Op::KillDuringCreate { w, kind, after_us } => {
                let Some(member) = &self.members[w] else {
                    return;
                };
                if member
                    .worker
                    .send(&format!("create {} 4096 1", kind.word()), vec![])
                    .is_ok()
                {
                    std::thread::sleep(Duration::from_micros(after_us));
                }
                if self.kill(w, None) {
                    self.tally.killed_mid_create += 1;
                }
            }
        }
    }

    fn create(&mut self, w: usize, kind: Kind, len: usize, seed: u64) {
        let command = format!("create {} {len} {seed}", kind.word());
        let Some(answer) = self.ask(w, &command, vec![], "create") else {
            return;
        };
        let words: Vec<&str> = answer.text.split_whitespace().collect();
        let (Some(key), Some(sum), Some(name)) = (
            words.get(1).and_then(|k| k.parse().ok()),
            words.get(2).and_then(|s| s.parse().ok()),
            words.get(3),
        ) else {
            return self.fail_answer(w, &command, &answer.text);
        };
        let name = kind.is_named().then(|| (*name).to_owned());
        let Some(member) = self.members[w].as_mut() else {
            return;
        };
        if let (Kind::PoolFs, Some(name)) = (kind, &name) {
            member.pooled.insert(name.clone());
        }
        member.held.push(Held {
            key,
            kind,
            name,
            sum,
        });
        self.tally.count("create");
    }

    /// `from` shares a buffer with `to`: as a handle over the socket, or as bytes;
    /// with `kill_sender`, `from` is SIGKILLed before `to` attaches.
    fn share(&mut self, from: usize, to: usize, pick: u64, as_bytes: bool, kill_sender: bool) {
        let Some((key, kind, name, sum)) = self.members[from].as_ref().and_then(|m| {
            let h = m.held.get(pick as usize % m.held.len().max(1))?;
            Some((h.key, h.kind, h.name.clone(), h.sum))
        }) else {
            return;
        };
        if self.members[to].is_none() {
            return;
        }
        let as_bytes = as_bytes && kind.is_named();
        let verb = if as_bytes { "share-bytes" } else { "share" };
        let Some(shared) = self.ask(from, &format!("{verb} {key}"), vec![], "shared") else {
            return;
        };
        let hold = match shared.text.split_whitespace().nth(2) {
            Some(hex) => format!("hold-bytes {sum} {hex}"),
            None => format!("hold {sum}"),
        };
        if kill_sender && self.kill(from, name.as_deref()) {
            self.tally.killed_after_share += 1;
        }
        let Some(member) = self.members[to].as_ref() else {
            return;
        };
        let id = member.worker.id;
        let answer = member.worker.ask(&hold, shared.handles);
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                self.tally.fail(format!("worker {id}: {hold}: {e}"));
                self.kill(to, None);
                return;
            }
        };
        let text = &answer.text;
        let key = text.strip_prefix("held ").and_then(|k| k.parse().ok());
        let done = match key {
            Some(key) => {
                if kill_sender {
                    self.tally.attached_after_sender_died += 1;
                }
                if let Some(member) = self.members[to].as_mut() {
                    member.held.push(Held {
                        key,
                        kind,
                        name,
                        sum,
                    });
                }
                true
            }
            None if kill_sender && (text.starts_with("gone ") || text.starts_with("stale ")) => {
                self.tally.gone_after_sender_died += 1;
                true
            }
            None => {
                self.fail_answer(to, &format!("{hold:.40} ({})", kind.word()), text);
                false
            }
        };
        if done {
            self.tally.count(if as_bytes {
                "share as bytes"
            } else {
                "share over the socket"
            });
        }
    }

    fn release(&mut self, w: usize, pick: u64) {
        let Some(key) = self.members[w].as_ref().and_then(|m| {
            let h = m.held.get(pick as usize % m.held.len().max(1))?;
            Some(h.key)
        }) else {
            return;
        };
        if self
            .ask(w, &format!("release {key}"), vec![], "released")
            .is_some()
        {
            if let Some(member) = self.members[w].as_mut() {
                member.held.retain(|h| h.key != key);
            }
            self.tally.count("release");
        }
    }

    fn verify(&mut self, w: usize) {
        let Some(answer) = self.ask(w, "verify", vec![], "verified") else {
            return;
        };
        let held = self.members[w].as_ref().map_or(0, |m| m.held.len());
        if answer.text == format!("verified {held}") {
            self.tally.count("verify");
        } else {
            self.fail_answer(w, "verify", &answer.text);
        }
    }

    /// Every name a live worker holds must be in `/dev/shm`.
    fn check_names(&mut self) {
        self.tally.count("check names");
        let present: BTreeSet<String> = names(&self.name_start).into_iter().collect();
        let mut missing = Vec::new();
        for member in self.members.iter().flatten() {
            for held in &member.held {
                if let Some(name) = held.name.as_ref().filter(|n| !present.contains(*n)) {
                    missing.push(format!("{name} (held by worker {})", member.worker.id));
                }
            }
        }
        if !missing.is_empty() {
            let count = missing.len();
            missing.truncate(3);
            self.tally.fail(format!(
                "{count} held name(s) missing from /dev/shm, among them {missing:?}"
            ));
        }
    }

    /// SIGKILLs the worker in `slot` (but for `spared`, its own names must go), and
    /// refills the slot. Whether there was one.
    fn kill(&mut self, slot: usize, spared: Option<&str>) -> bool {
        let Some(member) = self.members[slot].take() else {
            return false;
        };
        let others: BTreeSet<&str> = self
            .members
            .iter()
            .flatten()
            .flat_map(|m| {
                let held = m.held.iter().filter_map(|h| h.name.as_deref());
                held.chain(m.pooled.iter().map(String::as_str))
            })
            .chain(spared)
            .collect();
        let own: BTreeSet<String> = member
            .held
            .iter()
            .filter_map(|h| h.name.clone())
            .chain(member.pooled.iter().cloned())
            .filter(|name| !others.contains(name.as_str()))
            .collect();
        let worker = member.worker.id;
        let at = member.worker.kill();
        if !own.is_empty() {
            self.deaths.push(Death {
                worker,
                at,
                names: own.into_iter().collect(),
                disturbed: self.stopped_until.is_some(),
            });
        }
        // While the manager is stopped, the new worker's first round trip waits for
        // it (the stop is shorter than the client's wait).
        if let Err(e) = self.refill(slot) {
            self.tally.fail(format!("starting a worker: {e}"));
        }
        true
    }

    /// Records the deaths whose names are all gone; fails those past their limit (or
    /// every one left, with `last`).
    fn settle_deaths(&mut self, last: bool) {
        let now = Instant::now();
        let mut deaths = std::mem::take(&mut self.deaths);
        deaths.retain(|death| {
            let gone: Option<Vec<Instant>> = death
                .names
                .iter()
                .map(|n| self.watch.deleted_at(n))
                .collect();
            if let Some(gone) = gone {
                let swept = gone.into_iter().max().unwrap_or(death.at);
                let took = swept.saturating_duration_since(death.at);
                match death.disturbed {
                    false => self.tally.death_to_sweep.push(took),
                    true => self.tally.death_to_sweep_disturbed.push(took),
                }
                return false;
            }
            let limit = if death.disturbed {
                DISTURBED_LIMIT
            } else {
                SWEEP_LIMIT
            };
            if last || now.duration_since(death.at) > limit {
                let left: Vec<&String> = death
                    .names
                    .iter()
                    .filter(|n| self.watch.deleted_at(n).is_none())
                    .collect();
                self.tally.fail(format!(
                    "worker {}'s own names not gone {:?} after its SIGKILL: {left:?}",
                    death.worker,
                    now.duration_since(death.at)
                ));
                return false;
            }
            true
        });
        self.deaths = deaths;
    }

    /// Asks the worker in `slot`; an answer that does not start with `expected` (a
    /// `gone` or `stale` one included) is a failure, and so is a worker that does not
    /// answer (it is then SIGKILLed and replaced).
    fn ask(
        &mut self,
        slot: usize,
        command: &str,
        handles: Vec<ShareHandle>,
        expected: &'static str,
    ) -> Option<Answer> {
        let member = self.members[slot].as_ref()?;
        let id = member.worker.id;
        match member.worker.ask(command, handles) {
            Ok(answer) if answer.text.starts_with(expected) => Some(answer),
            Ok(answer) => {
                self.fail_answer(slot, command, &answer.text);
                None
            }
            Err(e) => {
                self.tally.fail(format!("worker {id}: {command}: {e}"));
                self.kill(slot, None);
                None
            }
        }
    }

    fn fail_answer(&mut self, slot: usize, command: &str, answer: &str) {
        let id = self.members[slot]
            .as_ref()
            .map_or(u32::MAX, |m| m.worker.id);
        self.tally
            .fail(format!("worker {id} (live): {command:.60} -> {answer}"));
    }
}
