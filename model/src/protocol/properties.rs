//! The properties the exhaustive check holds in every state it reaches (P1–P5,
//! docs/PROTOCOL.md), each a check of one [`State`]: [`Property`], its statement, and
//! `State::check` with the checks behind it (P3's "kill everyone, then sweep" and the
//! memfd pool's "the creator's recycle reuses it", run on a copy of the state).

use super::*;

/// The properties, each a check of one state.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Property {
    /// No premature destruction.
    P1,
    /// At most once, only ours.
    P2,
    /// No leak: with nobody dead, once every holder released (no handle in flight),
    /// the segment is unlinked with no sweep, and no live process has in-flight
    /// references beyond the handles it sent; from any state, killing everyone and
    /// sweeping once leaves nothing (file_system); the creator alone left, its recycle
    /// reuses the segment (memfd pool).
    P3,
    /// Clear failure: an attach to a gone segment ends in `Gone`.
    P4,
    /// Valid words, nothing stuck.
    P5,
}

impl Property {
    /// Every property.
    pub const ALL: [Property; 5] = [
        Property::P1,
        Property::P2,
        Property::P3,
        Property::P4,
        Property::P5,
    ];

    /// One line saying what is checked.
    pub fn statement(self) -> &'static str {
        match self {
            Property::P1 => {
                "a live holder's segment is named (a memfd: exists), its slot holds its word and it is in the generation the holder attached; so is a live sender's in-flight reference"
            }
            Property::P2 => {
                "a name is removed at most once, only when committed (all tombstones) or half-created with a dead creator; the foreign name never, a memfd (no name) never"
            }
            Property::P3 => {
                "while every process lives: no slot holds a live process's in-flight word beyond the handles it sent that are still in flight (in the pool or being attached or dropped), and (file_system) once every process is idle, none holds a segment and no handle of it is in flight, the segment is unlinked with no sweep (unless a finalize gave up at its last retry round); from every state: file_system, killing every process and one sweep by a fresh process unlinks every segment created; memfd pool, killing all but the segment's creator, cancelling every handle in flight and ending the creator's operation, the creator's recycle (if it holds the segment) reuses it"
            }
            Property::P4 => {
                "an attach that opens an unlinked or committed segment (every slot a tombstone, the finalizer word committed) never ends holding it"
            }
            Property::P5 => {
                "every word is a valid state, one held slot per process and segment, tombstones among other words only under a finalizer word, or turned by a process still in its finalize or recycle, or by a dead one"
            }
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl State {
    /// Checks `prop` in this state: `Some(why)` when it is violated.
    pub fn check(&self, prop: Property) -> Option<String> {
        match prop {
            Property::P1 => self.check_p1(),
            Property::P2 => self.check_p2(),
            Property::P3 => self.check_p3(),
            Property::P4 => match self.flaw {
                Some(Flaw::DoomedAttachHeld(p, s)) => Some(format!(
                    "p{p}'s attach opened s{s} when every slot was a tombstone, and ended holding it"
                )),
                _ => None,
            },
            Property::P5 => self.check_p5(),
        }
    }

    fn check_p1(&self) -> Option<String> {
        for (p, proc) in self.procs.iter().enumerate().take(self.procs()) {
            if !proc.alive {
                continue;
            }
            for (s, slot) in proc.holds.iter().enumerate().take(self.segments()) {
                let Some(slot) = slot else { continue };
                let seg = &self.segments[s];
                let word = seg.slots[usize::from(*slot)];
                if !seg.named || word != Word::Held(p as Pid) {
                    return Some(format!(
                        "live p{p} holds slot {slot} of s{s}, but the segment is {} and the slot holds {word}",
                        self.presence(seg)
                    ));
                }
                // The recycler itself takes the new generation when its recycle ends.
                let recycling = matches!(proc.pc, Pc::At(Op::Recycle(r), _) if usize::from(r) == s);
                if proc.generations[s] != seg.generation && !recycling {
                    return Some(format!(
                        "live p{p} holds s{s} in generation {}, but the segment was recycled to generation {}: its data is another use's",
                        proc.generations[s], seg.generation
                    ));
                }
            }
        }
        let carried = self
            .procs
            .iter()
            .filter(|q| q.alive)
            .filter_map(|q| match q.pc {
                Pc::At(op, step) => State::carried(op, step),
                Pc::Idle => None,
            });
        for h in self.handles.iter().flatten().copied().chain(carried) {
            if !self.alive(Pid::MAX, h.sender) {
                continue;
            }
            let seg = &self.segments[usize::from(h.seg)];
            let word = seg.slots[usize::from(h.slot)];
            if !seg.named || word != Word::InFlight(h.sender) {
                return Some(format!(
                    "{h} is in flight from live p{}, but s{} is {} and the slot holds {word}",
                    h.sender,
                    h.seg,
                    self.presence(seg)
                ));
            }
        }
        None
    }

    fn check_p2(&self) -> Option<String> {
        if !self.foreign_named {
            return Some("the name outside the namespace was removed".into());
        }
        for (s, seg) in self.segments.iter().enumerate().take(self.segments()) {
            if seg.unlinks > 1 {
                return Some(format!("s{s} was unlinked {} times", seg.unlinks));
            }
            if self.anonymous && seg.unlinks > 0 {
                return Some(format!(
                    "memfd s{s} has no name, yet a finalize unlinked it: nothing may finalize a memfd"
                ));
            }
        }
        match self.flaw {
            Some(Flaw::UnlinkUncommitted(s)) => Some(format!(
                "s{s} was unlinked while a slot was held or in flight"
            )),
            Some(Flaw::UnlinkBeingCreated(s)) => Some(format!(
                "half-created s{s} was removed while its creator lived"
            )),
            _ => None,
        }
    }

    fn check_p5(&self) -> Option<String> {
        let n = self.slots();
        let valid_owner = |w: Word| w.owner().is_none_or(|p| usize::from(p) < self.procs());
        for (s, seg) in self.segments.iter().enumerate().take(self.segments()) {
            let slots = &seg.slots[..n];
            if let Some(w) = slots.iter().find(|w| !valid_owner(**w)) {
                return Some(format!("s{s} has a slot word {w} of no process"));
            }
            // `InFlight(p)` there is production's `COMMITTED | token`: p committed;
            // `Tomb(p)`, `SEALING | token`: p sealed it and re-reads the mark.
            if !valid_owner(seg.finalizer) {
                return Some(format!("s{s}'s finalizer word is {}", seg.finalizer));
            }
            for p in 0..self.procs_n {
                let held = slots.iter().filter(|w| **w == Word::Held(p)).count();
                if held > 1 {
                    return Some(format!("p{p} holds {held} slots of s{s}"));
                }
            }
            // The mark covers every taken slot (a claim raises it before its slot CAS,
            // a finalize turns only slots below the mark it read, nothing lowers it):
            // at and above it every slot is free. A finalize passes over them.
            let mark = usize::from(seg.mark);
            if let Some((i, w)) = slots
                .iter()
                .enumerate()
                .find(|&(i, w)| *w != Word::Free && i >= mark)
            {
                return Some(format!(
                    "s{s}'s slot {i} holds {w}, at or above the mark {mark}: a finalize would pass over it"
                ));
            }
            let tombs = slots.iter().filter(|w| matches!(w, Word::Tomb(_))).count();
            // With no finalizer word taken, a tombstone among other words must be one its
            // turner will still roll back (a live process inside its finalize or
            // recycle: one taken over, not yet back) or a dead one's (the next finalize
            // that sees it takes the finalizer word to roll it back).
            let resolved = |w: &Word| match *w {
                Word::Tomb(p) => {
                    let proc = &self.procs[usize::from(p)];
                    !proc.alive || matches!(proc.pc, Pc::At(_, Step::Fin(_) | Step::Recycle(_)))
                }
                _ => true,
            };
            if tombs > 0 && tombs < n && seg.finalizer == Word::Free && !slots.iter().all(resolved)
            {
                return Some(format!(
                    "s{s} has {tombs} tombstone(s) among live slots, no finalizer owns it and a live process that is not finalizing turned one: stuck"
                ));
            }
            if seg.phase == Phase::Absent && (seg.named || slots.iter().any(|w| *w != Word::Free)) {
                return Some(format!("s{s} was never created but has state"));
            }
        }
        None
    }

    /// P3 (no leak): in every state, the in-flight bound
    /// ([`State::check_in_flight_bound`]) and P3 while processes live
    /// ([`State::check_p3_live`]); then, by kind:
    /// - file_system: kill every process, then one sweep (of every name, in order) by a
    ///   fresh process, run alone to its end: every segment ever created must be
    ///   unlinked.
    /// - anonymous (a pool's memfd): the kernel frees a memfd nobody reaches, so the leak
    ///   to rule out is a slot that blocks reuse forever. For each segment, on its own
    ///   copy of the state (so that another segment's creator, alive, holding this one,
    ///   is not taken for a leak): kill every process but its creator; a fresh process
    ///   drops every handle in flight (a cancel run to its end); the creator's current
    ///   operation runs alone to its end, and the handle it sent if it was a share is
    ///   dropped too; then, if the creator lives and holds the segment, its recycle run
    ///   alone to its end must reuse it ([`Recycled::Reused`]). Dead holders' words do
    ///   not block it (the recycle reclaims them); any other word left (the creator's
    ///   own word in a slot it does not hold, a live in-flight word) does.
    pub fn check_p3(&self) -> Option<String> {
        if let Some(why) = self.check_in_flight_bound() {
            return Some(why);
        }
        if let Some(why) = self.check_p3_live() {
            return Some(why);
        }
        if self.anonymous {
            return (0..self.segments_n).find_map(|s| self.check_p3_anonymous(s));
        }
        let mut st = self.clone();
        for p in 0..self.procs_n {
            if st.procs[usize::from(p)].alive {
                st.crash(p);
            }
        }
        let sweeper = (MAX_PROCS - 1) as Pid;
        st.procs[usize::from(sweeper)] = Proc {
            ops_left: u8::MAX,
            ..FRESH
        };
        for s in 0..self.segments_n {
            if !st.seg(s).named {
                continue;
            }
            st.start(sweeper, Op::Sweep(Target::Segment(s)));
            if !st.run_alone(sweeper, false) {
                return Some(format!("the lone sweeper never finishes sweeping s{s}"));
            }
        }
        for (s, seg) in st.segments.iter().enumerate().take(self.segments()) {
            if seg.named {
                return Some(format!(
                    "after every process died and a fresh sweep, s{s} is still named: {}",
                    self.seg_line(seg)
                ));
            }
        }
        None
    }

    /// The in-flight bound, in every state: a live process's in-flight words in the slots
    /// of a segment are no more than the handles of that segment it sent that are still
    /// somewhere (in the pool, or carried by a live process's attach or cancel, which
    /// has not consumed it yet). A word beyond them is a reference no handle will ever
    /// take over or give back: it keeps the segment while its sender lives.
    fn check_in_flight_bound(&self) -> Option<String> {
        let carried = self
            .procs
            .iter()
            .take(self.procs())
            .filter(|q| q.alive)
            .filter_map(|q| match q.pc {
                Pc::At(op, step) => State::carried(op, step),
                Pc::Idle => None,
            });
        let handles: Vec<Handle> = self
            .handles
            .iter()
            .flatten()
            .copied()
            .chain(carried)
            .collect();
        for p in 0..self.procs_n {
            if !self.procs[usize::from(p)].alive {
                continue;
            }
            for (s, seg) in self.segments.iter().enumerate().take(self.segments()) {
                let words = seg.slots[..self.slots()]
                    .iter()
                    .filter(|w| **w == Word::InFlight(p))
                    .count();
                let sent = handles
                    .iter()
                    .filter(|h| h.sender == p && usize::from(h.seg) == s)
                    .count();
                if words > sent {
                    return Some(format!(
                        "live p{p} has {words} in-flight word(s) in s{s} but only {sent} handle(s) of it in flight: {}",
                        self.seg_line(seg)
                    ));
                }
            }
        }
        None
    }

    /// P3 while processes live (file_system): with no process dead and no finalize given
    /// up at its last retry round, every process idle, a segment that was created, that
    /// nobody holds and of which no handle is in flight is unlinked: the releases (and
    /// the handles given back) unlinked it by themselves, with no sweep. A memfd has no
    /// name to unlink (the kernel frees it); its P3 is the creator's recycle.
    fn check_p3_live(&self) -> Option<String> {
        if self.anonymous || self.finalize_gave_up || self.anyone_dead() {
            return None;
        }
        if self.procs[..self.procs()].iter().any(|q| q.pc != Pc::Idle) {
            return None;
        }
        for (s, seg) in self.segments.iter().enumerate().take(self.segments()) {
            let held = self.procs[..self.procs()]
                .iter()
                .any(|q| q.holds[s].is_some());
            let in_flight = self
                .handles
                .iter()
                .flatten()
                .any(|h| usize::from(h.seg) == s);
            if seg.phase != Phase::Absent && seg.named && !held && !in_flight {
                return Some(format!(
                    "nobody died, every process is idle, none holds s{s} and no handle of it is in flight, yet it is still named (only a sweep would unlink it): {}",
                    self.seg_line(seg)
                ));
            }
        }
        None
    }

    /// P3 of anonymous segment `s` (see [`State::check_p3`]).
    fn check_p3_anonymous(&self, s: u8) -> Option<String> {
        if self.seg(s).phase == Phase::Absent {
            return None;
        }
        let creator = self.seg(s).creator;
        if !self.alive(Pid::MAX, creator) {
            // Nobody may recycle it again: the kernel frees it with its last descriptor.
            return None;
        }
        let mut st = self.clone();
        for p in 0..self.procs_n {
            if p != creator && st.procs[usize::from(p)].alive {
                st.crash(p);
            }
        }
        // Operations the check starts are not the exploration's: no bound applies.
        st.proc_mut(creator).ops_left = u8::MAX;
        let dropper = (MAX_PROCS - 1) as Pid;
        st.procs[usize::from(dropper)] = Proc {
            ops_left: u8::MAX,
            ..FRESH
        };
        if !st.drop_handles(dropper) {
            return Some(format!("a lone cancel of a handle of s{s} never finishes"));
        }
        if !st.run_alone(creator, true) {
            return Some(format!(
                "creator p{creator}, alone, never finishes its operation ({})",
                self.at(creator)
            ));
        }
        // A share that ended above sent one more handle.
        if !st.drop_handles(dropper) {
            return Some(format!("a lone cancel of a handle of s{s} never finishes"));
        }
        let holds = st.procs[usize::from(creator)].holds[usize::from(s)].is_some();
        if !holds {
            // Released (or its attach failed): the pool no longer has it to recycle.
            return None;
        }
        let before = st.seg(s).generation;
        st.start(creator, Op::Recycle(s));
        if !st.run_alone(creator, true) {
            return Some(format!(
                "creator p{creator}'s lone recycle of s{s} never finishes"
            ));
        }
        // `Recycled::Reused` bumps the generation word; `Held` leaves it as it was.
        if st.seg(s).generation == before {
            return Some(format!(
                "every process but creator p{creator} died, every handle in flight was dropped and p{creator}'s operation ended, yet its lone recycle of s{s} found it held: a slot blocks its reuse forever: {}",
                st.seg_line(st.seg(s))
            ));
        }
        None
    }

    /// Runs process `p` alone from where it stands to the end of its operation. With
    /// `last_round`, a retry round that ends takes the last round's exit (see
    /// [`State::exec`]): for an operation without a finalize that is exactly its run
    /// alone, since nobody else changes a word or dies meanwhile, so every further
    /// round would repeat the one that just ended (a claim that found no slot ends
    /// `Full` after its 64 rounds). Without it, early rounds only. `false` if a step
    /// budget ran out.
    fn run_alone(&mut self, p: Pid, last_round: bool) -> bool {
        let mut budget = 10_000;
        while self.procs[usize::from(p)].pc != Pc::Idle {
            budget -= 1;
            if budget == 0 {
                return false;
            }
            self.exec(p, last_round);
        }
        true
    }

    /// Process `p` (idle) drops every handle in flight, one cancel at a time, each run
    /// to its end. `false` if one never ended.
    fn drop_handles(&mut self, p: Pid) -> bool {
        while let Some(h) = self.handles[0] {
            self.start(p, Op::Cancel(h));
            if !self.run_alone(p, true) {
                return false;
            }
        }
        true
    }
}
