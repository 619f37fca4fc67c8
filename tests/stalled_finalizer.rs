//! A finalizer word naming a live process that is not finalizing (a word a same-user
//! writer forged; a real finalizer SIGSTOPped, traced or in a frozen cgroup) pinned its
//! segment until that process exited: every finalize and sweep deferred to it. Now the
//! finalize that asks it to run again for the `Finalize::PATIENCE`-th time since it
//! last started a round takes it over (issue 29, item 2; `docs/PROTOCOL.md` §5). Here
//! on the real kernel, the word forged as a live child's token: `sleep`, which never
//! finalizes anything.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shmrc::checkers::holders::Finalize;
use shmrc::checkers::token::{Token, TokenExt};
use shmrc::{Action, CreateOptions, Namespace, Outcome, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::wait_within;

/// Byte offset of the finalizer word (header word 12, `docs/PROTOCOL.md` §2).
const FINALIZER_OFFSET: u64 = 12 * 8;

/// A child that sleeps and never finalizes; killed (by its pid) and reaped on drop.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        let child = Command::new("sleep")
            .arg("120")
            .stdin(Stdio::null())
            .spawn()
            .expect("start sleep");
        Sleeper(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Its token, as a finalizer of its own would write it: pid and start time.
    fn token(&self) -> Token {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .expect("the sleeper's stat");
        // Field 22 (starttime) is the 20th after the parenthesized command.
        let after_comm = &stat[stat.rfind(')').expect("a stat line") + 1..];
        let start: u64 = after_comm
            .split_whitespace()
            .nth(19)
            .and_then(|f| f.parse().ok())
            .expect("a start time");
        Token::new(self.pid(), start).expect("a token of a real pid")
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().expect("ask about the sleeper").is_none()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        wait_within(&mut self.0, Duration::from_secs(10));
    }
}

/// Writes `token` into segment `name`'s finalizer word, as a same-user writer can.
fn forge_finalizer(name: &str, token: Token) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/dev/shm/{name}"))
        .expect("open the segment file");
    file.write_all_at(&token.word().to_ne_bytes(), FINALIZER_OFFSET)
        .expect("forge the finalizer word");
}

/// One sweep of `ns`: what it did to `name`.
fn sweep_once(ns: &Namespace, name: &str) -> Action {
    let report = shmrc::sweep(ns).expect("sweep");
    report
        .segments
        .into_iter()
        .find(|seg| seg.name == name)
        .map(|seg| seg.action)
        .expect("the sweep saw the segment")
}

/// The finalizer pid and the requests to run again that a look at `name` finds.
fn finalizer_of(ns: &Namespace, name: &str) -> (Option<u32>, u64) {
    let report = shmrc::inspect(ns).expect("inspect");
    let census = report
        .segments
        .iter()
        .find(|seg| seg.name == name)
        .and_then(|seg| seg.census)
        .expect("a census of the segment");
    (census.finalizer.map(Token::pid), census.deferrals)
}

/// What `shmrc ls` says of `name` (its STATE column); `None` without the `serde`
/// feature, which `shmrc::report` needs (the CLI's build has it).
#[cfg(feature = "serde")]
fn ls_state(ns: &Namespace, name: &str) -> Option<String> {
    let listing = shmrc::report::listing(Some(ns)).expect("list");
    listing
        .namespaces
        .iter()
        .flat_map(|n| &n.segments)
        .find(|seg| seg.name == name)
        .map(|seg| seg.state.clone())
        .or_else(|| panic!("ls does not list {name}"))
}

#[cfg(not(feature = "serde"))]
fn ls_state(_ns: &Namespace, _name: &str) -> Option<String> {
    None
}

fn named(t: &TestNamespace, name: &str) -> bool {
    t.names().iter().any(|n| n == name)
}

#[test]
fn a_forged_live_finalizer_is_taken_over_at_the_bound_but_never_while_a_holder_lives() {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let t = TestNamespace::new("stallfin");
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    let buf = ShmBuf::with_options(64, &options).expect("create");
    let name = buf.name().expect("a named segment").to_owned();
    let mut sleeper = Sleeper::start();
    forge_finalizer(&name, sleeper.token());

    // A live holder (this process): sweeps keep the segment and count nothing, however
    // many there are.
    for _ in 0..Finalize::PATIENCE + 2 {
        assert!(matches!(sweep_once(&t.ns, &name), Action::Kept));
    }
    if let Some(state) = ls_state(&t.ns, &name) {
        assert_eq!(state, "held", "a live holder holds it");
    }
    assert_eq!(finalizer_of(&t.ns, &name), (Some(sleeper.pid()), 0));
    assert!(named(&t, &name));

    // The last reference goes: its finalize finds the forged finalizer at work and asks
    // it to run again (the first request), keeping the segment.
    let released = buf.release().expect("release").expect("the last reference");
    assert_eq!(released.outcome, Outcome::Deferred);
    assert!(named(&t, &name));
    let pid = sleeper.pid();
    // Each sweep asks once more; before the bound, the segment stays, and ls says why.
    for asked in 2..Finalize::PATIENCE {
        assert_eq!(finalizer_of(&t.ns, &name), (Some(pid), asked - 1));
        if let Some(state) = ls_state(&t.ns, &name) {
            let says = format!(
                "finalizer held by pid {pid} (asked to run again {}",
                asked - 1
            );
            assert!(state.starts_with(&says), "ls says {state:?}");
        }
        assert!(matches!(sweep_once(&t.ns, &name), Action::Kept));
        assert!(
            named(&t, &name),
            "request {asked} of {} took over",
            Finalize::PATIENCE
        );
    }
    // The request that reaches the bound takes over: nobody live holds the segment.
    assert!(
        matches!(sweep_once(&t.ns, &name), Action::Unlinked),
        "the sweep reaching the bound did not unlink {name}: {:?}",
        t.names()
    );
    assert!(!named(&t, &name));
    assert!(sleeper.alive(), "the forged finalizer never had to exit");
}

#[test]
fn a_forged_live_finalizer_never_takes_a_segment_another_process_holds() {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let t = TestNamespace::new("stallheld");
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    let buf = ShmBuf::with_options(64, &options).expect("create");
    let name = buf.name().expect("a named segment").to_owned();
    buf.write_at(0, b"kept").expect("write");
    // A real holder in another process: a forked-free way is a handle in flight from
    // this live process (its in-flight reference counts like a holder).
    let handle = buf.share().expect("share");
    let sleeper = Sleeper::start();
    forge_finalizer(&name, sleeper.token());
    drop(buf);
    for _ in 0..2 * Finalize::PATIENCE {
        assert!(matches!(sweep_once(&t.ns, &name), Action::Kept));
    }
    assert!(
        named(&t, &name),
        "a sweep took a segment a live handle holds"
    );
    let back = ShmBuf::attach(handle).expect("the handle attaches");
    let mut out = [0; 4];
    back.read_at(0, &mut out).expect("read");
    assert_eq!(&out, b"kept");
    drop(back);
    // Its last reference gone, the forged word is the only thing left: the bound's
    // sweeps clear it.
    for _ in 0..Finalize::PATIENCE {
        let _ = shmrc::sweep(&t.ns).expect("sweep");
    }
    assert!(!named(&t, &name), "left: {:?}", t.names());
}
