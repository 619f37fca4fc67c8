//! Time namespaces and process start times. The kernel shows a process's start time
//! (field 22 of `/proc/<pid>/stat`) shifted by the boottime offset of the *reader's*
//! time namespace, so one process has as many start times as there are time
//! namespaces reading it. A token carries the start time as the initial time namespace
//! reads it; this module finds how this process's readings are shifted ([`Frame`]) and
//! takes the shift off a reading ([`Frame::unshift`]), so that a token written in one
//! time namespace is judged rightly in any other.
//!
//! The shift is exact only where the offset is a whole number of clock ticks (a
//! reading is rounded down to a tick *after* the shift) and where
//! `/proc/self/timens_offsets`, which shows the offsets of the namespace this process's
//! children go to, shows its own (its `ns/time` and `ns/time_for_children` are one).
//! Elsewhere the frame is [`Frame::Unknown`]: such a process can neither write a token
//! that others would judge rightly nor tell a reused pid from its token's process, so
//! it holds no slot ([`check`] says why) and its liveness questions get "dead" only for
//! a pid that no process has, or a zombie's.

use std::fs;
use std::os::unix::fs::MetadataExt;

use super::fork_guard::{Slot, keep, kept};
use crate::error::{Error, Result};

/// Token start times are 40 bits wide (see `token.rs`): a reading at or above this
/// many ticks (349 years at 100 Hz) is a shifted start that wrapped below zero.
const READING_LIMIT: u64 = 1 << 40;

/// The inode of the initial time namespace (`PROC_TIME_INIT_INO`).
const INITIAL_TIME_NAMESPACE: u64 = 0xEFFF_FFFA;

/// How this process's readings of start times relate to the initial time namespace's.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Frame {
    /// Readings are this many clock ticks ahead of the initial time namespace's (behind
    /// when negative); 0 outside any time namespace.
    Shifted(i64),
    /// The shift is not known to the tick.
    Unknown(Unknown),
}

/// Why a process's shift is not known to the tick.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Unknown {
    /// Its time namespace's boottime offset (nanoseconds) is not a whole number of
    /// clock ticks (`tick` nanoseconds): a reading is then one of two start times.
    OffsetNotWholeTicks {
        /// The boottime offset.
        offset_nanos: i128,
        /// The clock tick.
        tick_nanos: i128,
    },
    /// It is not in the time namespace its children go to (it called
    /// `unshare(CLONE_NEWTIME)` and has not `exec`ed since): the kernel shows the
    /// offsets of that other namespace only.
    ChildrenGoElsewhere,
    /// `/proc/self/ns/time`, `/proc/self/timens_offsets` or the clock tick could not be
    /// read or understood.
    Unreadable(&'static str),
    /// Its own start, read with the shift, wrapped below zero (a negative offset larger
    /// than its age when it entered the namespace).
    OwnStartBeforeZero,
}

impl Frame {
    /// The start time the initial time namespace reads for a process this process read
    /// `reading` for; `None` when that cannot be told to the tick (this frame is
    /// unknown, or the reading wrapped).
    pub(super) fn unshift(self, reading: u64) -> Option<u64> {
        let Frame::Shifted(ticks) = self else {
            return None;
        };
        if reading >= READING_LIMIT {
            return None;
        }
        let start = i128::from(reading) - i128::from(ticks);
        u64::try_from(start)
            .ok()
            .filter(|start| *start < READING_LIMIT)
    }
}

impl Unknown {
    /// The cause, in words, for an error message.
    fn describe(self) -> String {
        match self {
            Unknown::OffsetNotWholeTicks {
                offset_nanos,
                tick_nanos,
            } => format!(
                "its boottime offset ({offset_nanos} ns) is not a whole number of clock ticks \
                 ({tick_nanos} ns), so a start time read in it is one of two"
            ),
            Unknown::ChildrenGoElsewhere => "its children go to another time namespace \
                 (it called unshare(CLONE_NEWTIME) and has not exec'd since), whose offsets \
                 are all the kernel shows it"
                .to_owned(),
            Unknown::Unreadable(what) => format!("{what} cannot be read or understood"),
            Unknown::OwnStartBeforeZero => {
                "its boottime offset puts this process's start before the namespace's boot"
                    .to_owned()
            }
        }
    }
}

/// The frame of this process: read once, and again after a `fork` (a child may be in
/// another time namespace); read every time where it is unknown, or where the kernel
/// cannot wipe a page on fork (before Linux 4.14, which has no time namespaces: one
/// failed `stat`). A process that `setns`es into another time namespace keeps its token
/// (the unshifted start time does not change) and is caught by [`frame_again`], which
/// a liveness check asks before it says "dead".
pub(super) fn frame() -> Frame {
    match kept(Slot::TimeShift) {
        Some(word) => Frame::Shifted((word as i64) >> 1),
        None => frame_again(),
    }
}

/// The frame of this process read afresh, and kept for [`frame`] when it is known
/// (forgotten when it is not).
pub(super) fn frame_again() -> Frame {
    let frame = read_frame();
    let word = match frame {
        // Offsets are below 2^39 ticks (the kernel's KTIME_SEC_MAX / 2): no bit is lost,
        // and the low bit makes the word non-zero.
        Frame::Shifted(ticks) => (ticks << 1) as u64 | 1,
        Frame::Unknown(_) => 0,
    };
    keep(Slot::TimeShift, word);
    frame
}

/// `Ok` when this process can hold slots: its readings of start times are known to
/// the tick in the initial time namespace's terms; [`Error::TimeNamespace`] naming the
/// cause otherwise.
pub(super) fn check() -> Result<()> {
    match frame() {
        Frame::Shifted(_) => Ok(()),
        Frame::Unknown(why) => Err(Error::TimeNamespace {
            why: why.describe(),
        }),
    }
}

/// Reads this process's frame from `/proc/self` and its own start time.
fn read_frame() -> Frame {
    let inode = |path: &str| fs::metadata(path).map(|m| m.ino()).ok();
    let own = match fs::metadata("/proc/self/ns/time") {
        // The initial time namespace (the kernel's fixed inode number for it), whose
        // offsets are 0, even for a process that left it for its children's.
        Ok(own) if own.ino() == INITIAL_TIME_NAMESPACE => return Frame::Shifted(0),
        Ok(own) => own.ino(),
        // A kernel without time namespaces (before 5.6, or built without them): every
        // process reads the same clock.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Frame::Shifted(0),
        Err(_) => return Frame::Unknown(Unknown::Unreadable("/proc/self/ns/time")),
    };
    // The children's namespace is asked before and after the offsets: a leader that
    // left for a new one in between shows that one's offsets.
    let children = inode("/proc/self/ns/time_for_children");
    let offsets = fs::read_to_string("/proc/self/timens_offsets").ok();
    let children_after = inode("/proc/self/ns/time_for_children");
    frame_of(&Seen {
        own,
        children: children.filter(|_| children == children_after),
        offsets,
        tick_nanos: tick_nanos(),
        own_reading: own_reading(),
    })
}

/// What `/proc/self` shows of a process in a time namespace other than the initial one.
#[derive(Debug)]
struct Seen {
    /// The inode of its time namespace.
    own: u64,
    /// The inode of its children's, if read (twice, alike).
    children: Option<u64>,
    /// `timens_offsets`, if read.
    offsets: Option<String>,
    /// The clock tick in nanoseconds, if known.
    tick_nanos: Option<i128>,
    /// Its own start time as it reads it, if read.
    own_reading: Option<u64>,
}

/// The frame of a process that saw `seen`.
fn frame_of(seen: &Seen) -> Frame {
    match seen.children {
        Some(children) if children == seen.own => {}
        Some(_) => return Frame::Unknown(Unknown::ChildrenGoElsewhere),
        None => {
            return Frame::Unknown(Unknown::Unreadable("/proc/self/ns/time_for_children"));
        }
    }
    let Some(offset_nanos) = seen.offsets.as_deref().and_then(boottime_offset_nanos) else {
        return Frame::Unknown(Unknown::Unreadable("/proc/self/timens_offsets"));
    };
    if offset_nanos == 0 {
        return Frame::Shifted(0);
    }
    let Some(tick_nanos) = seen.tick_nanos else {
        return Frame::Unknown(Unknown::Unreadable("the clock tick (sysconf(_SC_CLK_TCK))"));
    };
    let frame = shift_of(offset_nanos, tick_nanos);
    // Its own start must unshift too, or its token could not be written.
    match (frame, seen.own_reading) {
        (Frame::Shifted(_), Some(reading)) if frame.unshift(reading).is_none() => {
            Frame::Unknown(Unknown::OwnStartBeforeZero)
        }
        (Frame::Shifted(_), None) => Frame::Unknown(Unknown::Unreadable("/proc/self/stat")),
        _ => frame,
    }
}

/// The frame of a namespace whose boottime offset is `offset_nanos`, with clock ticks
/// of `tick_nanos`.
fn shift_of(offset_nanos: i128, tick_nanos: i128) -> Frame {
    if offset_nanos % tick_nanos != 0 {
        return Frame::Unknown(Unknown::OffsetNotWholeTicks {
            offset_nanos,
            tick_nanos,
        });
    }
    match i64::try_from(offset_nanos / tick_nanos) {
        Ok(ticks) if ticks.unsigned_abs() < READING_LIMIT => Frame::Shifted(ticks),
        _ => Frame::Unknown(Unknown::Unreadable("/proc/self/timens_offsets")),
    }
}

/// The boottime offset in nanoseconds from the content of `timens_offsets` (lines
/// `<clock> <seconds> <nanoseconds>`, the clock by name or by id, 7 for boottime).
fn boottime_offset_nanos(offsets: &str) -> Option<i128> {
    let line = offsets.lines().find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        match fields.next()? {
            "boottime" | "7" => Some(fields),
            _ => None,
        }
    })?;
    let mut fields = line;
    let seconds: i64 = fields.next()?.parse().ok()?;
    let nanos: i64 = fields.next()?.parse().ok()?;
    if fields.next().is_some() || !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    Some(i128::from(seconds) * 1_000_000_000 + i128::from(nanos))
}

/// The clock tick of `/proc/<pid>/stat` start times, in nanoseconds (10 ms at the
/// usual 100 Hz); `None` when unknown or not a whole number of nanoseconds.
fn tick_nanos() -> Option<i128> {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let hz = i128::from(hz);
    (hz > 0 && 1_000_000_000 % hz == 0).then(|| 1_000_000_000 / hz)
}

/// This process's own start time as it reads it.
fn own_reading() -> Option<u64> {
    let content = fs::read("/proc/self/stat").ok()?;
    super::proc_stat::parse_start_ticks(&content)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any offsets file the kernel writes (the monotonic line and the boottime
        /// line, by name or by id, in either order, any spacing, any offset the kernel
        /// accepts): the boottime offset is read back exactly; any text at all is
        /// refused or read, never a panic.
        #[test]
        fn every_offsets_file_gives_its_boottime_offset(
            mono in proptest::num::i64::ANY,
            seconds in proptest::num::i64::ANY,
            nanos in 0i64..1_000_000_000,
            by_id in proptest::bool::ANY,
            boottime_first in proptest::bool::ANY,
            pad in 1usize..12,
            junk in ".{0,80}",
        ) {
            let sp = " ".repeat(pad);
            let boot = format!("{}{sp}{seconds}{sp}{nanos}", if by_id { "7" } else { "boottime" });
            let monotonic = format!("monotonic{sp}{mono}{sp}0");
            let text = if boottime_first {
                format!("{boot}\n{monotonic}\n")
            } else {
                format!("{monotonic}\n{boot}\n")
            };
            proptest::prop_assert_eq!(
                boottime_offset_nanos(&text),
                Some(i128::from(seconds) * 1_000_000_000 + i128::from(nanos))
            );
            let _ = boottime_offset_nanos(&junk);
        }
    }

    #[test]
    fn the_boottime_offset_is_parsed_by_name_or_id() {
        let offsets = "monotonic           0         0\nboottime       100000         0\n";
        assert_eq!(boottime_offset_nanos(offsets), Some(100_000_000_000_000));
        assert_eq!(
            boottime_offset_nanos("1 5 0\n7 -3 250000000\n"),
            Some(-2_750_000_000)
        );
        for bad in [
            "",
            "monotonic 0 0\n",
            "boottime 1\n",
            "boottime x 0\n",
            "boottime 1 1000000000\n",
            "boottime 1 -1\n",
            "boottime 1 2 3\n",
        ] {
            assert_eq!(boottime_offset_nanos(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_offset_of_whole_ticks_unshifts_exactly() {
        let tick = 10_000_000;
        let frame = shift_of(100_000 * 1_000_000_000, tick);
        assert_eq!(frame, Frame::Shifted(10_000_000));
        assert_eq!(frame.unshift(10_028_053), Some(28_053));
        assert_eq!(frame.unshift(9_999_999), None, "before the initial boot");
        let behind = shift_of(-5 * 1_000_000_000, tick);
        assert_eq!(behind.unshift(100), Some(600));
        assert_eq!(Frame::Shifted(0).unshift(77), Some(77));
    }

    #[test]
    fn a_wrapped_reading_is_not_unshifted() {
        // A start 3 s after boot read with an offset of -10 s: the kernel's u64 sum
        // wraps, and the reading is about 2^64 ns in ticks.
        let wrapped = ((1u128 << 64) - 7_000_000_000) / 10_000_000;
        let frame = Frame::Shifted(-1_000);
        assert_eq!(frame.unshift(u64::try_from(wrapped).unwrap()), None);
        assert_eq!(frame.unshift(READING_LIMIT - 1), None, "beyond 40 bits");
    }

    #[test]
    fn an_offset_of_part_of_a_tick_is_unknown() {
        let frame = shift_of(100_005_000_000, 10_000_000);
        assert!(matches!(
            frame,
            Frame::Unknown(Unknown::OffsetNotWholeTicks { .. })
        ));
        assert_eq!(frame.unshift(5), None);
        let Frame::Unknown(why) = frame else {
            unreachable!()
        };
        assert!(
            why.describe().contains("100005000000 ns"),
            "{}",
            why.describe()
        );
    }

    /// What a process in a namespace 100000 s ahead sees, started 280 s after boot.
    fn seen_ahead() -> Seen {
        Seen {
            own: 4_026_532_177,
            children: Some(4_026_532_177),
            offsets: Some("monotonic 0 0\nboottime 100000 0\n".into()),
            tick_nanos: Some(10_000_000),
            own_reading: Some(10_028_000),
        }
    }

    #[test]
    fn a_frame_is_known_only_from_what_its_own_namespace_shows() {
        assert_eq!(frame_of(&seen_ahead()), Frame::Shifted(10_000_000));
        let unknown = |seen: Seen| match frame_of(&seen) {
            Frame::Unknown(why) => why,
            known => panic!("{seen:?} gave {known:?}"),
        };
        let elsewhere = unknown(Seen {
            children: Some(4_026_532_999),
            ..seen_ahead()
        });
        assert_eq!(elsewhere, Unknown::ChildrenGoElsewhere);
        assert!(elsewhere.describe().contains("unshare(CLONE_NEWTIME)"));
        assert!(elsewhere.describe().contains("children"));
        let unreadable = [
            (
                Seen {
                    children: None,
                    ..seen_ahead()
                },
                "/proc/self/ns/time_for_children",
            ),
            (
                Seen {
                    offsets: Some("boottime lots 0".into()),
                    ..seen_ahead()
                },
                "/proc/self/timens_offsets",
            ),
            (
                Seen {
                    offsets: None,
                    ..seen_ahead()
                },
                "/proc/self/timens_offsets",
            ),
            (
                Seen {
                    tick_nanos: None,
                    ..seen_ahead()
                },
                "the clock tick (sysconf(_SC_CLK_TCK))",
            ),
            (
                Seen {
                    own_reading: None,
                    ..seen_ahead()
                },
                "/proc/self/stat",
            ),
        ];
        for (seen, what) in unreadable {
            let why = unknown(seen);
            assert_eq!(why, Unknown::Unreadable(what));
            assert!(why.describe().contains(what), "{}", why.describe());
        }
        // 1000 s behind, entered 280 s after boot: its own start wrapped below zero.
        let wrapped = u64::try_from(((1u128 << 64) - 720_000_000_000) / 10_000_000).unwrap();
        let behind = unknown(Seen {
            offsets: Some("boottime -1000 0\n".into()),
            own_reading: Some(wrapped),
            ..seen_ahead()
        });
        assert_eq!(behind, Unknown::OwnStartBeforeZero);
        assert!(behind.describe().contains("before"));
        // No offset at all: neither the tick nor its own start is needed.
        let unshifted = Seen {
            offsets: Some("boottime 0 0\n".into()),
            tick_nanos: None,
            own_reading: None,
            ..seen_ahead()
        };
        assert_eq!(frame_of(&unshifted), Frame::Shifted(0));
    }

    #[test]
    fn this_process_frame_is_known_and_kept() {
        // The tests run in a time namespace whose offset is whole seconds (or none).
        let Frame::Shifted(ticks) = frame_again() else {
            panic!("{:?}", frame_again());
        };
        assert_eq!(frame(), Frame::Shifted(ticks));
        assert!(check().is_ok());
        let reading = own_reading().unwrap();
        assert!(frame().unshift(reading).is_some());
    }
}
