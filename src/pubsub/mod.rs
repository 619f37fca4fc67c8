//! Publish/subscribe (issue 33, item 1): one publisher, any number of subscriber
//! processes that join and leave (SIGKILL included), found by a service name in the
//! user's namespace. A sample is written once into a segment of the publisher's pool
//! and shared zero-copy with every subscriber; it is back in the pool once every
//! subscriber has released it, left, or died, with no call by anyone. This module owns
//! the protocol and the user API over it: [`Publisher`], [`Subscriber`],
//! [`PublisherOptions`], [`SlowSubscriber`], [`Received`]; `queue` holds the steps,
//! `service_segment.rs` (a protocol room below the sweep) the service segment.
//!
//! ```
//! # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
//! # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
//! use shmrc::Namespace;
//! use shmrc::pubsub::{Publisher, PublisherOptions, SlowSubscriber, Subscriber};
//!
//! let ns = Namespace::new("shmrc-doc-pubsub-mod")?;
//! let options = PublisherOptions::new().namespace(ns.clone()).slow(SlowSubscriber::DropOldest);
//! let publisher = Publisher::create("telemetry", options)?;
//! let a = Subscriber::join_in(&ns, "telemetry")?; // in practice, other processes
//! let b = Subscriber::join_in(&ns, "telemetry")?;
//! let mut loan = publisher.loan::<f64>(3)?;
//! loan.copy_from_slice(&[1.0, 2.0, 3.0]);
//! assert_eq!(publisher.publish(loan)?.sent().map(|s| s.delivered), Some(2));
//! let (x, y) = (a.try_recv::<f64>()?.unwrap(), b.try_recv::<f64>()?.unwrap());
//! assert_eq!((&*x, x.segment_name()), (&[1.0, 2.0, 3.0][..], y.segment_name())); // one segment
//! assert!(a.try_recv::<f64>()?.is_none()); // empty: two loads, no system call
//! # }
//! # Ok::<(), shmrc::Error>(())
//! ```
//!
//! # The service segment
//! A named segment `<prefix>.<uid>.service.<service>` of the namespace (one per service
//! name, mode 0600, made whole under a temporary name and then linked to its own, which
//! fails if the name exists, as `O_EXCL` would; layout, validation and sweep in
//! `service_segment.rs`), written by the publisher that creates it:
//! - a header: magic, layout version, the configuration (entry count `E`, ring capacity
//!   `C`, sample count `N`, the slow-subscriber `queue::Policy`), the publisher's token,
//!   and the **wake word** (a `u64`: its low bit the *waiters flag*
//!   (`queue::WAITERS`), the count of publishes that delivered above it; a blocking
//!   receiver sets the flag and `futex`-waits on the word's low 32 bits: **Wake**
//!   below);
//! - the **sample table**: per row, the nonce and share key of one of the `N` sample
//!   segments of the publisher's pool (each a recyclable segment with `1 + E` holder
//!   slots and a generation word: the existing holder protocol of `docs/PROTOCOL.md`,
//!   unchanged). The name follows from the namespace, the publisher's token and the
//!   nonce; a subscriber opens a row's segment the first time a descriptor names it,
//!   and checks what a handle's attach checks: a name of the namespace, its header
//!   (uid, pid namespace), the row's share key, the publisher as creator, `1 + E` slots;
//! - `E` **subscriber entries**, each a state word, a `head` and a `tail` word, and a ring
//!   of `C` sample descriptors.
//!
//! A descriptor names a sample (its index in the sample table, 24 bits) and the
//! generation it was published in (40 bits): `queue::Descriptor`.
//!
//! # Entry states
//! - `FREE` (0): nobody; a joiner may take it;
//! - a subscriber's token: joined; the publisher delivers to it while the token lives;
//! - `LEFT | token` (`queue::LEFT`): the subscriber left; the publisher drains it;
//! - a dead subscriber's token, or any other word (a hostile writer's): the publisher
//!   drains it like a left one (P5).
//!
//! Only the publisher turns an entry back to `FREE`, and only after it drained it, so a
//! joiner always finds an empty ring whose references are all given back.
//!
//! # Holder slots of a sample: one column per entry
//! Slot 0 of every sample is the pool's own (the publisher's held slot). Slot `1 + e`
//! (`queue::subscriber_slot`) is entry `e`'s, and nobody else's: the publisher puts
//! the in-flight reference of a delivery to entry `e` there, the subscriber of entry `e`
//! takes it over there (its held reference), and releases it from there. A sample is
//! published once per generation, so within a generation slot `1 + e` carries at most
//! one reference, and the descriptor need not name the slot.
//!
//! The in-flight reference is the existing `IN_FLIGHT | publisher` word: it is alive
//! exactly while the publisher lives (`docs/PROTOCOL.md`). A held one is the
//! subscriber's token, alive while the subscriber lives. So:
//! - a dead **publisher**'s undelivered references are dead, and the existing
//!   finalize/sweep reclaims them (the manager's sweep after the publisher's death);
//!   a subscriber keeps what it took;
//! - a dead **subscriber**'s taken samples are held by a dead token, which the pool's
//!   next recycle of that sample reclaims (no call: the publisher's next loan);
//! - a dead or departed subscriber's *queued* samples are in-flight references of the
//!   live publisher: nobody else may vacate them (they look live), so the publisher
//!   drains the entry's column (below), at its next publish.
//!
//! # Steps
//! - **Join** (`queue::Join`): scan the entries, CAS the first `FREE` state word to my
//!   token. None free: `Full` (the entry count is chosen at creation).
//! - **Publish** (`queue::Publish`, the publisher, holding sample `k` in generation `g`
//!   after its pool recycled it, so every slot but its own is `FREE`): under the
//!   backpressure policy, first a check pass: a live entry whose ring is full refuses the
//!   whole publish (nothing delivered; a ring's room only grows while the publisher does
//!   not push, so the check stays true). The pass reads a joined entry's ring first and
//!   asks whether its subscriber lives only when the ring is full (a liveness check is
//!   a system call; a dead subscriber's full ring is drained below, never waited for). Then for each entry `e`, in order:
//!   1. load its state. `FREE`: next entry. The exact word of a subscriber the
//!      publisher saw alive less than `LIVENESS_PERIOD` (1 ms) ago (**trusted**,
//!      `queue::Queue::trusting`): deliver without asking. Else not a live subscriber
//!      (asked): **drain** it (below).
//!   2. load `head` (`tail` is the publisher's own word). A full ring of a trusted
//!      subscriber: ask now, and a dead one's entry is drained (a full ring is never
//!      left to a dead subscriber). A full ring under
//!      drop-oldest: load the oldest descriptor, CAS `head` one on (lost to the
//!      subscriber's own pop: load again), then give its reference back (CAS slot
//!      `1 + e` of that sample, `IN_FLIGHT | me → FREE`, if it is still in the
//!      descriptor's generation), and load `head` again.
//!   3. CAS slot `1 + e` of sample `k` `FREE → IN_FLIGHT | me` (the reference first: a
//!      descriptor never names a sample without one);
//!   4. store the descriptor at `ring[tail % C]`;
//!   5. store `tail + 1` (the descriptor is now the subscriber's to pop).
//!
//!   Then, if it delivered to anyone, bump the wake word (**Wake**, below).
//! - **Drain** (part of a publish; a publish of no sample, `queue::Publish::reclaim`,
//!   runs only these): for every sample, CAS slot `1 + e` `IN_FLIGHT | me → FREE` (a
//!   held reference there is left alone: a departed subscriber may still hold a sample;
//!   a dead one's is reclaimed by the recycle); then store `head = tail`; then CAS the
//!   state word from what was read back to `FREE`.
//! - **Take** (`queue::Take`, the subscriber of entry `e`): load `head`, then `tail`;
//!   equal: empty (`tail` more than `C` ahead: the publisher's drop-oldest moved `head`
//!   on meanwhile; load again, and the same `head` twice is `Corrupt`). Load `ring[head % C]`, CAS `head` one on (lost: to the publisher's
//!   drop-oldest; start again). The descriptor popped is now this subscriber's alone
//!   (the publisher gives back only what *it* popped): take the reference over with the
//!   existing transfer step, CAS slot `1 + e` `IN_FLIGHT | publisher → my token`.
//!   Then check the sample's generation against the descriptor's (after the transfer,
//!   as an attach checks it after its claim): a mismatch (only a forged descriptor
//!   makes one) turns the slot back into the publisher's in-flight word (a true
//!   descriptor of this column names that reference) and says `Stale`; a failed transfer says `Lost` (the publisher died and a sweep
//!   reclaimed its reference, or the word was forged). Only a successful take reads the
//!   sample's data.
//! - **Release**: the existing `vacate` of slot `1 + e` (held word → `FREE`); if the
//!   publisher is gone (its tombstone, or asked dead; a publisher the subscriber saw
//!   alive less than 1 ms ago is not asked), then the existing `finalize` (nobody
//!   recycles the sample).
//! - **Finalize after the publisher** (the subscriber, when it finds the publisher gone:
//!   `Subscriber::publisher_alive`, `recv`'s check every 100 ms, a release that asks,
//!   its drop): the existing `finalize` of every sample segment it opened. It unlinks
//!   what a release left while it trusted a publisher killed meanwhile, and the dead
//!   publisher's idle samples it had opened; a sample a live process holds is left to
//!   that holder.
//! - **Leave**: CAS the state word from my token to `LEFT | my token`. A subscriber does
//!   nothing with the queue after it; the samples it still holds it releases as above.
//! - **Wake** (the publisher, after a publish that delivered): load the wake word `w`,
//!   CAS it `w → (w & !WAITERS) + 2` (lost to a receiver's flag: again from what the
//!   CAS found); if `w` had the flag, `FUTEX_WAKE` every sleeper of the word
//!   (`Os::wake_word`), else no system call.
//! - **Sleep** (a blocking receiver, `queue::take_within` and `Subscriber::recv_timeout`):
//!   load the wake word `s`, then take; empty: **announce** (`queue::announce_waiter`):
//!   CAS the word `s → s | WAITERS` (already flagged: no CAS; found flagged by another
//!   receiver: fine; found anything else: a publish bumped it since, take again), then
//!   `FUTEX_WAIT` on `s | WAITERS` (the kernel compares and sleeps as one step). No
//!   wake-up is lost: a bump before the announce makes its CAS fail; a bump after it
//!   finds the flag and wakes, and if it came before the `FUTEX_WAIT`, the word differs
//!   and the wait returns at once. The count wraps in the low 32 bits after 2^31
//!   publishes: a receiver that stalled between its load and its wait for exactly that
//!   many sleeps until its timeout (as with any futex counter).
//!
//! # Slow subscribers
//! A ring holds at most `C` descriptors. The policy is the service's, chosen at creation:
//! - **drop-oldest**: a publish to a full ring pops its oldest descriptor and gives its
//!   reference back (the sample returns to the pool once its other subscribers are
//!   done); the publish always succeeds. The subscriber sees a gap, never a stale sample.
//! - **backpressure**: a publish that finds a live subscriber's ring full delivers to
//!   nobody and says which entry was full; the caller retries (or waits on its own
//!   clock). A dead subscriber's full ring is drained, never waited for.
//!
//! # How fast a dead subscriber's samples come back
//! - taken (held by its dead token): at the pool's next recycle of the sample, which
//!   the publisher's next loan makes (one liveness check per slot);
//! - queued (in-flight references of the publisher): at the publisher's first publish
//!   1 ms (`LIVENESS_PERIOD`) or more after it last asked the subscriber's liveness
//!   (it asks every joined subscriber at most once a period: a `poll` of a pidfd each,
//!   where it asked at every publish), at once if its ring is full, at a
//!   `queue::Publish::reclaim` (which trusts nobody), or at a loan that finds no free
//!   sample (it reclaims, then tries once more), which drains the entry: `N` CASes,
//!   then the sample's next recycle as above. A publisher that publishes every few
//!   milliseconds has them back within one period; no call by anyone else, no manager.
//!   A departed subscriber's entry (`LEFT | token`: not a trusted word) is drained at
//!   the next publish.
//! - popped but not yet taken over (killed between its pop and its transfer): the
//!   reference is still the publisher's in-flight word in the dead entry's column, so
//!   the drain gives it back like a queued one.
//!
//! # Properties (DESIGN.md's P1–P5, for the queue)
//! - **P1** While a subscriber lives and holds a sample (a successful take, not yet
//!   released), that sample's slot `1 + e` holds its token and the sample is not
//!   recycled (its generation does not change): a recycle rolls back at a live holder.
//!   No descriptor delivered to a live subscriber is lost: each is popped by it and
//!   taken (never `Lost` or `Stale` while the publisher lives), popped by the
//!   publisher under drop-oldest (counted as dropped), or still queued.
//! - **P2** The drain, the give-back and the take CAS only slot `1 + e` of the
//!   service's own samples from the exact word they expect; nothing outside the
//!   namespace is named (the service and sample segments are namespace segments).
//! - **P3** Once a subscriber left and the publisher ran its next publish, or died and
//!   the publisher ran a publish that asked its liveness (the first 1 ms after the
//!   last ask, or one that found its ring full) or a reclaim, no reference of that
//!   entry remains but the held ones of a departed, still-living subscriber: every sample it had queued is recyclable, every sample it
//!   held is recyclable once it is dead, and the entry is `FREE` again. A dead
//!   publisher's references are dead words the existing sweep reclaims.
//! - **P4** A subscriber that finds a descriptor naming no sample, a generation other
//!   than the sample's, or a ring whose words break `head <= tail <= head + C` gets
//!   `Stale` / `Lost` / `Corrupt`, never another use's data.
//! - **P5** Every state word decodes; a word no step writes counts as a dead
//!   subscriber's and is drained. A live entry whose ring words break the bounds gets
//!   no delivery (the publish counts it) and its subscriber `Corrupt`; the drain resets
//!   them once it leaves or dies.
//!   Counters: `head` and `tail` grow by one per descriptor (2^64 publishes).
//!
//! Checked by `tests/pubsub_interleavings.rs` (every interleaving of a publisher and
//! two subscribers over these very steps, with a subscriber, or the publisher while a
//! sweeper finalizes its samples, killed at every step; and with a publisher that
//! trusts every joined entry, its cache never expiring), `tests/sim_pubsub.rs`,
//! `tests/shuttle_pubsub.rs`, `tests/loom_pubsub.rs` (weak memory, the wake word) and
//! `tests/model_pubsub.rs` (against the reference model `shmrc_model::pubsub`)
//! (`docs/VERIFICATION.md` says what each checks).
//!
//! # Status
//! Built: the steps above (`queue`) and their checks; the service segment (creation
//! under a temporary name linked into place, a dead publisher's taken over by a CAS of its publisher word to a
//! tombstone, then unlink, and a tombstone whose holder died before its unlink taken
//! over by a CAS to this process's tombstone, then unlink; validation on join: owner, mode 0600, length against
//! `fstat` and the layout, magic, version, bounds, uid, pid namespace: P4) and its
//! sweep (a user's [`sweep`](crate::sweep()) recognises the name and unlinks the
//! service once its publisher is dead and no subscriber lives:
//! [`SweepReport::services`](crate::SweepReport::services)); the sample table; the user
//! API. `tests/pubsub_api.rs` runs it between processes.
//!
//! The subscriber drives `queue::Take` step by step rather than through
//! `queue::take_within`: a take's sample table must hold the row its descriptor names,
//! and the row may be newer than the subscriber's view of the table, so the subscriber
//! opens it once the descriptor is read (the row was written before the descriptor was
//! pushed) and before the pop: a row it cannot open (the open-file limit, say) fails
//! the take with the cause, nothing popped, the sample still queued. `recv_timeout` keeps `take_within`'s order (wake word read
//! before the take). A dropped [`Publisher`] gives back the in-flight references still
//! queued to anyone (a CAS per slot, racing a take's transfer on the same word: one
//! wins) after it turned its publisher word into a tombstone; a subscriber's release
//! then finalizes. A child forked from the publisher's process is refused its
//! `loan`, `publish` and `reclaim` ([`Error::NotHolder`](crate::Error::NotHolder)
//! naming the service: its words would name the child, not the publisher whose
//! in-flight words the subscribers' takes expect), and its drop of the inherited copy
//! does nothing.
//!
//! Left:
//! - a received sample costs one small allocation (the entries' views) and a lock, a
//!   publish one, a lock and two hash lookups (the loan's and the publish's, SipHash),
//!   and each of a loan, a publish and a release reads the clock: with the liveness
//!   checks gone from the loop they were its largest parts (a profile of
//!   `bench/iceoryx2/examples/pubsub_loop.rs`, 1 subscriber, 0.53 µs a loop: the clock
//!   10%, the views' `Vec`s and `malloc`/`free` 10%, the hashing 8%); the samples'
//!   views are now made only for the sample a step names (`queue::SampleViews`), where
//!   every operation made one per row in a `Vec` (the loop's median 0.61 → 0.48 µs with
//!   1 subscriber, 1.51 → 1.14 µs with 4), the rest left;
//! - a release that trusted a publisher killed within the last millisecond leaves its
//!   sample to the subscriber's next look (above); a process that never looks again
//!   (no `recv`, `publisher_alive` or release after the period, its subscriber never
//!   dropped) leaves it to a sweep, as the dead publisher's idle samples always were;
//! - a blocking receive (`Subscriber::recv_timeout`) takes again for 20 µs, yielding the
//!   CPU before each look, before it announces itself and sleeps: with 4 subscribers
//!   on 2 busy vCPUs the scheduler's switches and wake-ups were most of a round (29 and
//!   12 context switches a round of 8, 5.0 with the spin; 47–60k → 167–218k samples a
//!   second, docs/PERFORMANCE.md). Left: the bound is fixed, not adapted to how
//!   often a spin catches a sample, so a receiver fed slower than every 20 µs pays 20
//!   µs of yields per receive for nothing; `queue::take_within` (the checkers' sleep
//!   over a fixed table) does not spin;
//!
//! Built besides the steps: the wake-ups (**Wake** and **Sleep** above).
//! `queue::take_within` reads the wake word, takes, and if the ring was empty announces
//! itself and sleeps on the word (`Os::wait_word`: a shared futex on the real kernel)
//! until the publisher's `queue::publish`, which wakes the word's waiters after a
//! publish that delivered and found the flag (`Os::wake_word`). A publish with nobody
//! asleep makes no system call for the wake-up; a polling receiver (`try_recv`) never
//! sets the flag. `tests/pubsub_interleavings.rs` explores every interleaving of two
//! sleepers and a publisher over these steps (no final state leaves one asleep).

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod publisher;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod subscriber;

pub use crate::protocol::queue::Policy as SlowSubscriber;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use publisher::{Delivery, Publisher, PublisherOptions, Sent};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use subscriber::{Received, Subscriber};

/// The queue's views of the entries of service segment `service`.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
fn entries<O: crate::os::Os>(
    service: &crate::protocol::service_segment::Service<O>,
) -> Vec<crate::protocol::queue::Entry<'_>> {
    (0..service.config.entries)
        .map(|e| {
            let w = service.entry_words(e);
            crate::protocol::queue::Entry::new(&w[0], &w[1], &w[2], &w[3..])
        })
        .collect()
}
