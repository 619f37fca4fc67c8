//! `/proc/<pid>/stat`, parsed: the pid, the state letter and the start time (as read,
//! shifted by the reader's time namespace), which `process` judges liveness by and
//! `timens` finds this process's time-namespace shift with.

/// What shmrc reads of `/proc/<pid>/stat`.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) struct ProcStat {
    /// Field 1: the pid.
    pub(super) pid: u32,
    /// Field 3: the state letter (`R`, `S`, `Z`, ...).
    pub(super) state: u8,
    /// Field 22: the start time in clock ticks since boot.
    pub(super) start_ticks: u64,
}

/// Parses the content of `/proc/<pid>/stat`. The command name (field 2) is in
/// parentheses and may itself contain spaces, parentheses and non-UTF-8 bytes, so the
/// fields after it are found after the *last* `)`.
pub(super) fn parse_proc_stat(content: &[u8]) -> Option<ProcStat> {
    let open = content.iter().position(|&b| b == b'(')?;
    let close = content.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(&content[..open])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(&content[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = match fields.next()?.as_bytes() {
        &[state] => state,
        _ => return None,
    };
    // Fields 4..=21 come between the state and the start time.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        start_ticks,
    })
}

/// The start time (as read, shifted by this process's time namespace) in the content
/// of a `/proc/<pid>/stat`.
pub(super) fn parse_start_ticks(content: &[u8]) -> Option<u64> {
    parse_proc_stat(content).map(|stat| stat.start_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(comm: &[u8], state: &str, start: u64) -> Vec<u8> {
        let mut line = b"4242 (".to_vec();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") {state} 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} \
                 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn proc_stat_fields_are_found_after_the_command_name() {
        let st = parse_proc_stat(&stat_line(b"cat", "S", 987_654)).unwrap();
        assert_eq!(
            st,
            ProcStat {
                pid: 4242,
                state: b'S',
                start_ticks: 987_654
            }
        );
    }

    #[test]
    fn a_command_name_with_spaces_and_parens_does_not_shift_the_fields() {
        let st = parse_proc_stat(&stat_line(b"a) b (c", "Z", 77)).unwrap();
        assert_eq!((st.pid, st.state, st.start_ticks), (4242, b'Z', 77));
        let st = parse_proc_stat(&stat_line(b") ) 1 2 3 (", "R", 5)).unwrap();
        assert_eq!((st.state, st.start_ticks), (b'R', 5));
    }

    #[test]
    fn a_command_name_that_is_not_utf8_is_fine() {
        let st = parse_proc_stat(&stat_line(b"\xff\xfe)x", "S", 9)).unwrap();
        assert_eq!(st.start_ticks, 9);
    }

    #[test]
    fn malformed_stat_lines_are_refused() {
        for bad in [
            &b""[..],
            b"4242 cat S 1",
            b"4242 (cat) S 1 2 3",
            b") 4242 (cat",
            b"x (cat) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        ] {
            assert_eq!(parse_proc_stat(bad), None, "{bad:?}");
        }
        assert_eq!(parse_proc_stat(&stat_line(b"cat", "SS", 1)), None);
        assert_eq!(parse_proc_stat(&stat_line(b"cat", "S", 1)[..60]), None);
    }

    proptest::proptest! {
        /// Any command name the kernel can show (up to 64 bytes, any bytes, parentheses
        /// and spaces included), any state letter, pid and start time: parsed back as
        /// written, the fields found after the *last* `)`.
        #[test]
        fn every_stat_line_parses_back(
            comm in proptest::collection::vec(proptest::num::u8::ANY, 0..=64),
            pid in 1u32..=4_194_304,
            state in proptest::sample::select(b"RSDZTtXxKWPI".to_vec()),
            start in proptest::num::u64::ANY,
        ) {
            let mut line = stat_line(&comm, &(state as char).to_string(), start);
            let at = line.iter().position(|&b| b == b' ').unwrap();
            line.splice(..at, pid.to_string().into_bytes());
            proptest::prop_assert_eq!(
                parse_proc_stat(&line),
                Some(ProcStat { pid, state, start_ticks: start })
            );
            proptest::prop_assert_eq!(parse_start_ticks(&line), Some(start));
        }

        /// Every prefix of a stat line short of the start time, and any bytes at all:
        /// refused or parsed, never a panic; a prefix cut inside the start time's digits
        /// never yields a larger start time than the line's.
        #[test]
        fn any_bytes_and_every_cut_line_are_refused_or_parsed(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            comm in proptest::collection::vec(proptest::num::u8::ANY, 0..=64),
            start in proptest::num::u64::ANY,
        ) {
            let _ = parse_proc_stat(&bytes);
            let line = stat_line(&comm, "S", start);
            let digits = start.to_string();
            let field_end = line.len() - line.iter().rev().position(|&b| b == b')').unwrap();
            for cut in 0..line.len() {
                match parse_proc_stat(&line[..cut]) {
                    None => {}
                    Some(st) => {
                        proptest::prop_assert!(cut > field_end, "parsed before the fields: {cut}");
                        proptest::prop_assert!(st.start_ticks <= start);
                        proptest::prop_assert!(st.start_ticks.to_string().len() <= digits.len());
                    }
                }
            }
        }
    }
}
