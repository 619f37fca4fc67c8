//! `shmrc bench`: runs the workloads of [`crate::workloads`] for shmrc and for the
//! raw-syscall floor in one run, contenders interleaved round by round (the machine is
//! shared and noisy: a ratio measured side by side means more than an absolute time),
//! and prints each result with its ratio to the floor; `--json` prints one document.
//!
//! A ratio is always cost over cost (time per buffer, per attach, per sweep): 1.10
//! means 10% slower than the floor, whatever unit the value column uses.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use shmrc::checkers::namespace::NamespaceExt;
use shmrc::checkers::os::Os;
use shmrc::checkers::segment::{HEADER_BYTES, Layout};
use shmrc::{CreateOptions, DefaultOs, Error, Namespace, Result, ShmBuf, Strategy};

use crate::floor::{self, FloorMap};
use crate::goals::{self, BoundFigures, Goal, Verdict};
use crate::kill_latency;
use crate::payload::Payload;
use crate::planted;
use crate::workloads::{
    AtSegmentLength, Contender, FloorChecked, FloorFd, FloorNamed, FloorReused, Mode, PEER_COUNT,
    PEER_NAMESPACE, Peer, Shmrc, ShmrcChannel, attach_release, attach_release_batched,
    fresh_segment_layout, ping_pong, stream, window_for,
};

/// Options of `shmrc bench` (the CLI parses them).
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// Fewer rounds and shorter batches (well under a minute): for CI.
    pub quick: bool,
    /// Print one JSON document instead of tables.
    pub json: bool,
    /// Run only this workload (one of [`WORKLOADS`]).
    pub only: Option<String>,
    /// Run the growth sweep instead (`growth` below): each workload against size, holder
    /// count and segments per namespace, with its floor.
    pub growth: bool,
}

/// How long to measure.
#[derive(Copy, Clone)]
struct Effort {
    /// Interleaved rounds per measurement; the median round counts.
    rounds: usize,
    /// Time one batch of one contender aims at.
    batch: Duration,
}

/// One measured result.
struct Row {
    workload: &'static str,
    size: Option<usize>,
    contender: String,
    /// Nanoseconds per operation (the median round's mean).
    nanos: f64,
    /// How `value` is shown.
    unit: Unit,
    /// Cost over the baseline's cost, and the baseline's name.
    ratios: Vec<(String, f64)>,
    /// The growth sweep's axis other than size, and the row's value on it
    /// ([`HOLDERS`], [`SEGMENTS`]).
    axis: Option<(&'static str, usize)>,
}

/// The growth sweep's holders axis: handles to one buffer in flight while the peer
/// attaches and releases each.
pub const HOLDERS: &str = "holders";
/// The growth sweep's segments axis: live segments in the namespace.
pub const SEGMENTS: &str = "segments";

#[derive(Copy, Clone)]
enum Unit {
    Micros,
    Nanos,
    Millis,
    PerSecond,
    MillisPerGib,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Micros => "us/op",
            Unit::Nanos => "ns/op",
            Unit::Millis => "ms/op",
            Unit::PerSecond => "buffers/s",
            Unit::MillisPerGib => "ms/GiB",
        }
    }

    fn show(self, nanos: f64, size: Option<usize>) -> f64 {
        match self {
            Unit::Micros => nanos / 1e3,
            Unit::Nanos => nanos,
            Unit::Millis => nanos / 1e6,
            Unit::PerSecond => 1e9 / nanos,
            Unit::MillisPerGib => nanos / 1e6 * (1u64 << 30) as f64 / size.unwrap_or(1) as f64,
        }
    }
}

/// Sizes of the buffer workloads.
const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];

/// A contender's measurement: runs `n` operations, returns the time they took.
type Measure<'a> = Box<dyn FnMut(u64) -> Result<Duration> + 'a>;

/// Runs every contender in batches, interleaved, `effort.rounds` times; each one's
/// median nanoseconds per operation. The batch size comes from the second of two
/// single operations (the first may pay for what a pool or a cache keeps afterwards).
fn interleaved(effort: Effort, contenders: &mut [Measure<'_>]) -> Result<Vec<f64>> {
    let mut batch = Vec::new();
    for measure in contenders.iter_mut() {
        measure(1)?;
        let one = measure(1)?.max(Duration::from_nanos(1));
        batch.push((effort.batch.as_nanos() / one.as_nanos()).clamp(1, 20_000) as u64);
    }
    let mut per_op = vec![Vec::new(); contenders.len()];
    for _ in 0..effort.rounds {
        for ((measure, n), samples) in contenders.iter_mut().zip(&batch).zip(&mut per_op) {
            samples.push(measure(*n)?.as_nanos() as f64 / *n as f64);
        }
    }
    Ok(per_op.into_iter().map(median).collect())
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Rows for contenders measured together; the ratios are against the contenders at
/// `baselines` (indexes into `names`).
fn rows(
    workload: &'static str,
    size: Option<usize>,
    unit: Unit,
    names: &[String],
    nanos: &[f64],
    baselines: &[usize],
) -> Vec<Row> {
    names
        .iter()
        .zip(nanos)
        .map(|(name, n)| Row {
            workload,
            size,
            contender: name.clone(),
            nanos: *n,
            unit,
            ratios: baselines
                .iter()
                .map(|b| (names[*b].clone(), n / nanos[*b]))
                .collect(),
            axis: None,
        })
        .collect()
}

fn peer(contender: &str, mode: Mode) -> Result<Peer> {
    let exe = std::env::current_exe().map_err(|e| Error::os("current_exe", e))?;
    let mut command = Command::new(exe);
    command.arg("bench-peer");
    Peer::start(command, contender, mode)
}

/// One workload of the four buffer workloads, as a function of contender, stream, size
/// and operation count.
#[derive(Copy, Clone)]
enum BufferWorkload {
    PingPong,
    Stream,
    /// The stream, every byte written by the producer and checked by the consumer.
    Fill,
    AttachRelease,
}

impl BufferWorkload {
    fn name(self) -> &'static str {
        match self {
            BufferWorkload::PingPong => "ping-pong",
            BufferWorkload::Stream => "stream",
            BufferWorkload::Fill => "fill",
            BufferWorkload::AttachRelease => "attach/release",
        }
    }

    fn mode(self) -> Mode {
        match self {
            BufferWorkload::AttachRelease => Mode::Attach,
            BufferWorkload::Fill => Mode::Fill,
            _ => Mode::Ping,
        }
    }

    fn unit(self) -> Unit {
        match self {
            BufferWorkload::Stream | BufferWorkload::Fill => Unit::PerSecond,
            _ => Unit::Micros,
        }
    }

    /// How many buffers of `len` bytes may be in flight at once.
    fn window(self, len: usize) -> usize {
        match self {
            BufferWorkload::Stream | BufferWorkload::Fill => window_for(len),
            _ => 1,
        }
    }

    /// Whether the pooled rows (and the bare floor) run this workload: every workload
    /// that creates a buffer per operation (attach/release creates one in all).
    fn pooled(self) -> bool {
        !matches!(self, BufferWorkload::AttachRelease)
    }

    /// Whether the workload also measures the reserved floor at shmrc's segment length
    /// ([`AtSegmentLength`]), the bound of the fill goals: the fill workload, whose
    /// cost is the bytes of the segment.
    fn bounded(self) -> bool {
        matches!(self, BufferWorkload::Fill)
    }

    fn measure<'a, C: Contender + 'a>(self, mut c: C, peer: &'a Peer, len: usize) -> Measure<'a> {
        let window = self.window(len);
        Box::new(move |n| match self {
            BufferWorkload::PingPong => ping_pong(&mut c, &peer.stream, len, n, Payload::TouchOne),
            BufferWorkload::Stream => {
                stream(&mut c, &peer.stream, len, n, window, Payload::TouchOne)
            }
            BufferWorkload::Fill => stream(&mut c, &peer.stream, len, n, window, Payload::Fill),
            BufferWorkload::AttachRelease => attach_release(&mut c, &peer.stream, len, n),
        })
    }
}

/// A buffer workload at every size, for one strategy: shmrc and its two floors, and
/// shmrc's pool and the bare floor it is compared with (index 4, a third baseline);
/// for the fill workload, last, the reserved floor at shmrc's segment length and, for
/// file_system, the same floor with shmrc's checks ([`FloorChecked`]).
fn buffer_workload(
    workload: BufferWorkload,
    strategy: Strategy,
    ns: &Namespace,
    effort: Effort,
    sizes: &[usize],
) -> Result<Vec<Row>> {
    let prefix = format!("{}-floor", ns.prefix());
    let shmrc = Shmrc::new(strategy, ns.clone());
    let pooled = workload.pooled();
    let mut names: Vec<String> = match strategy {
        Strategy::FileDescriptor => vec![
            shmrc.name(),
            FloorFd { reserve: false }.name(),
            FloorFd { reserve: true }.name(),
        ],
        Strategy::FileSystem => vec![
            shmrc.name(),
            FloorNamed::new(prefix.clone(), false).name(),
            FloorNamed::new(prefix.clone(), true).name(),
        ],
    };
    if pooled {
        names.extend([
            Shmrc::pooled_name(strategy).to_owned(),
            FloorReused::name_of(strategy).to_owned(),
        ]);
    }
    // The fill workload's bound: the reserved floor at shmrc's segment length (the
    // payload plus header and holder slots), last, after the pooled pair.
    let bounded = workload.bounded();
    if bounded {
        names.push(match strategy {
            Strategy::FileDescriptor => {
                AtSegmentLength::new(FloorFd { reserve: true }, strategy).name()
            }
            Strategy::FileSystem => {
                AtSegmentLength::new(FloorNamed::new(prefix.clone(), true), strategy).name()
            }
        });
        // file_system's goal bound: that floor with shmrc's checks.
        if strategy == Strategy::FileSystem {
            names.push(FloorChecked::new(prefix.clone()).name());
        }
    }
    let baselines: &[usize] = if pooled { &[1, 2, 4] } else { &[1, 2] };
    let peers = names
        .iter()
        .map(|n| peer(n, workload.mode()))
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for &len in sizes {
        let shmrc = Shmrc::new(strategy, ns.clone());
        let mut measures: Vec<Measure<'_>> = match strategy {
            Strategy::FileDescriptor => vec![
                workload.measure(shmrc, &peers[0], len),
                workload.measure(FloorFd { reserve: false }, &peers[1], len),
                workload.measure(FloorFd { reserve: true }, &peers[2], len),
            ],
            Strategy::FileSystem => vec![
                workload.measure(shmrc, &peers[0], len),
                workload.measure(FloorNamed::new(prefix.clone(), false), &peers[1], len),
                workload.measure(FloorNamed::new(prefix.clone(), true), &peers[2], len),
            ],
        };
        if pooled {
            let window = workload.window(len);
            let bare =
                FloorReused::with_strategy(strategy, &format!("{prefix}-bare"), len, window)?;
            let pool = Shmrc::pooled(strategy, ns.clone(), window)?;
            measures.push(workload.measure(pool, &peers[3], len));
            measures.push(workload.measure(bare, &peers[4], len));
        }
        if bounded {
            let peer = &peers[measures.len()];
            measures.push(match strategy {
                Strategy::FileDescriptor => workload.measure(
                    AtSegmentLength::new(FloorFd { reserve: true }, strategy),
                    peer,
                    len,
                ),
                Strategy::FileSystem => workload.measure(
                    AtSegmentLength::new(FloorNamed::new(prefix.clone(), true), strategy),
                    peer,
                    len,
                ),
            });
            if strategy == Strategy::FileSystem {
                let peer = &peers[measures.len()];
                measures.push(workload.measure(FloorChecked::new(prefix.clone()), peer, len));
            }
        }
        let nanos = interleaved(effort, &mut measures)?;
        out.extend(rows(
            workload.name(),
            Some(len),
            workload.unit(),
            &names,
            &nanos,
            baselines,
        ));
    }
    Ok(out)
}

/// Ping-pong of one 4 KiB buffer through `shmrc::channel` (a `ShmBuf` in a serde
/// message), against the same buffers through the raw `transport` the channel is built
/// on, measured side by side.
fn channel_ping_pong(strategy: Strategy, ns: &Namespace, effort: Effort) -> Result<Vec<Row>> {
    const LEN: usize = 4096;
    let channel = ShmrcChannel::new(strategy, ns.clone());
    let raw = Shmrc::new(strategy, ns.clone());
    let names = [channel.name(), raw.name()];
    let peers = [peer(&names[0], Mode::Ping)?, peer(&names[1], Mode::Ping)?];
    let mut measures: Vec<Measure<'_>> = vec![
        BufferWorkload::PingPong.measure(channel, &peers[0], LEN),
        BufferWorkload::PingPong.measure(raw, &peers[1], LEN),
    ];
    let nanos = interleaved(effort, &mut measures)?;
    Ok(rows(
        "channel ping-pong",
        Some(LEN),
        Unit::Micros,
        &names,
        &nanos,
        &[1],
    ))
}

/// clone/drop of a buffer in one process, against cloning and dropping an `Arc`.
fn clone_drop(effort: Effort) -> Result<Vec<Row>> {
    let buf = ShmBuf::with_options(
        4096,
        &CreateOptions::new().strategy(Strategy::FileDescriptor),
    )?;
    let fd = floor::memfd(4096, false)?;
    let arc = Arc::new(FloorMap::new(std::os::fd::AsFd::as_fd(&fd), 4096)?);
    let mut measures: Vec<Measure<'_>> = vec![
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                drop(std::hint::black_box(buf.clone()));
            }
            Ok(start.elapsed())
        }),
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                drop(std::hint::black_box(Arc::clone(&arc)));
            }
            Ok(start.elapsed())
        }),
    ];
    let nanos = interleaved(effort, &mut measures)?;
    let names = ["shmrc ShmBuf".to_owned(), "floor Arc<mapping>".to_owned()];
    Ok(rows("clone/drop", None, Unit::Nanos, &names, &nanos, &[1]))
}

/// The last release of a file_system buffer with `capacity` holder slots (the finalize
/// scans them), against unmapping, closing and unlinking a floor object, and against
/// the least the protocol's finalize does (a tombstone CAS per slot of an object as
/// long as the segment, then the same).
fn finalize(ns: &Namespace, effort: Effort) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for capacity in [1usize, 64, 4096] {
        let options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns.clone())
            .capacity(capacity);
        let mut floor = FloorNamed::new(format!("{}-fin", ns.prefix()), true);
        let segment_len = Layout::new(4096, capacity)?.total_len();
        let slots_prefix = format!("{}-finslots", ns.prefix());
        let mut next_slots_object = 0u64;
        let mut measures: Vec<Measure<'_>> = vec![
            Box::new(|n| {
                let mut took = Duration::ZERO;
                for _ in 0..n {
                    let buf = ShmBuf::with_options(4096, &options)?;
                    let start = Instant::now();
                    buf.release()?;
                    took += start.elapsed();
                }
                Ok(took)
            }),
            Box::new(|n| {
                let mut took = Duration::ZERO;
                for _ in 0..n {
                    let buf = floor.create(4096)?;
                    let start = Instant::now();
                    drop(buf);
                    took += start.elapsed();
                }
                Ok(took)
            }),
            // The least the protocol's finalize does: an object as long as shmrc's
            // segment, each holder slot's word loaded and CASed to a tombstone
            // (docs/PROTOCOL.md §5, step 4), then munmap + close + unlink.
            Box::new(|n| {
                let mut took = Duration::ZERO;
                for _ in 0..n {
                    next_slots_object += 1;
                    let name = format!("{slots_prefix}-{next_slots_object}");
                    let fd = floor::create_named(&name, segment_len, true)?;
                    let map = FloorMap::new(std::os::fd::AsFd::as_fd(&fd), segment_len)?;
                    map.write_byte(0, 1)?;
                    let start = Instant::now();
                    let tombed = map.tombstone_words(HEADER_BYTES, capacity);
                    drop(map);
                    drop(fd);
                    let unlinked = floor::unlink_named(&name);
                    took += start.elapsed();
                    if !tombed? {
                        return Err(Error::InvalidArgument(format!(
                            "a tombstone CAS of {name} failed with nobody else mapping it"
                        )));
                    }
                    unlinked?;
                }
                Ok(took)
            }),
        ];
        let nanos = interleaved(effort, &mut measures)?;
        let names = [
            format!("shmrc release, {capacity} slots"),
            "floor munmap+close+unlink".to_owned(),
            format!("floor {capacity} slot CASes+munmap+close+unlink, same length"),
        ];
        out.extend(rows(
            "finalize",
            None,
            Unit::Micros,
            &names,
            &nanos,
            &[1, 2],
        ));
    }
    Ok(out)
}

/// The most segments one holder process maps (each a mapping: a process has at most
/// `vm.max_map_count`, 65,530 by default); more are spread over several holders.
const SEGMENTS_PER_HOLDER: usize = 25_000;

/// A sweep of `count` segments whose holders were SIGKILLed, against listing
/// `/dev/shm` and unlinking as many floor objects, and against the least a sweep that
/// maps can do per name ([`floor::map_claim_unlink_named`]). Each of `rounds` rounds
/// measures the three once, in turn (a sweep is one operation over everything there);
/// the median round counts. With `create` (the rows on the [`SEGMENTS`] axis), the
/// first round also measures, while the `count` segments live, creating and releasing
/// one more 4 KiB file_system buffer in that namespace, against creating (reserved) and
/// unlinking a floor object among `count` floor names.
fn sweep(
    ns_prefix: &str,
    counts: &[usize],
    rounds: usize,
    create: Option<Effort>,
) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for &count in counts {
        let mut samples = [Vec::new(), Vec::new(), Vec::new()];
        for round in 0..rounds.max(1) {
            let prefix = format!("{ns_prefix}-sweep{count}r{round}");
            let create = match create {
                Some(effort) if round == 0 => {
                    Some((effort, format!("{ns_prefix}-sweepfloor{count}")))
                }
                _ => None,
            };
            let took = [
                sweep_killed_holders(&prefix, count, create, &mut out)?,
                sweep_floor(&format!("{prefix}floor"), count, false)?,
                sweep_floor(&format!("{prefix}mapped"), count, true)?,
            ];
            for (sample, took) in samples.iter_mut().zip(took) {
                sample.push(took.as_nanos() as f64);
            }
        }
        let names = [
            format!("shmrc sweep, {count} segments"),
            format!("floor list+unlink, {count} names"),
            format!("floor list+open+map+CAS+unlink, segment length, {count} names"),
        ];
        let nanos = samples.map(median);
        let mut rows = rows("sweep", None, Unit::Millis, &names, &nanos, &[1, 2]);
        if create.is_some() {
            for row in &mut rows {
                row.axis = Some((SEGMENTS, count));
            }
        }
        out.extend(rows);
    }
    Ok(out)
}

/// One `shmrc::sweep` of a namespace `ns_prefix` where SIGKILLed peers held `count`
/// segments (at most [`SEGMENTS_PER_HOLDER`] each): how long it took. With `create`
/// (an effort and a floor prefix), first, while the segments live, the create/release
/// rows among them ([`create_release_among`]) go to `out`.
fn sweep_killed_holders(
    ns_prefix: &str,
    count: usize,
    create: Option<(Effort, String)>,
    out: &mut Vec<Row>,
) -> Result<Duration> {
    let ns = Namespace::new(ns_prefix)?;
    let exe = std::env::current_exe().map_err(|e| Error::os("current_exe", e))?;
    let mut holders = Vec::new();
    let mut left = count;
    while left > 0 {
        let share = left.min(SEGMENTS_PER_HOLDER);
        let mut command = Command::new(&exe);
        command
            .arg("bench-peer")
            .env(PEER_NAMESPACE, ns.prefix())
            .env(PEER_COUNT, share.to_string());
        holders.push(Peer::start(command, "shmrc file_system", Mode::Hold)?);
        left -= share;
    }
    for holder in &holders {
        let mut ack = [0u8];
        std::io::Read::read_exact(&mut &holder.stream, &mut ack)
            .map_err(|e| Error::os("read", e))?;
    }
    if let Some((effort, floor_prefix)) = create {
        for i in 0..count {
            drop(floor::create_named(
                &format!("{floor_prefix}-{i}"),
                4096,
                true,
            )?);
        }
        let measured = create_release_among(&ns, &floor_prefix, count, effort);
        for name in DefaultOs::default().shm_list(&floor_prefix)? {
            floor::unlink_named(&name)?;
        }
        out.extend(measured?);
    }
    for holder in &mut holders {
        holder.child.kill().map_err(|e| Error::os("kill", e))?;
        holder.child.wait().map_err(|e| Error::os("waitpid", e))?;
    }
    let start = Instant::now();
    let report = shmrc::sweep(&ns)?;
    let swept = start.elapsed();
    if report.unlinked as usize != count {
        return Err(Error::InvalidArgument(format!(
            "sweep unlinked {} of {count} segments",
            report.unlinked
        )));
    }
    Ok(swept)
}

/// Makes `count` floor objects named `<prefix>-<i>`, each with its first byte written
/// (as a segment's creator writes its header: a reserved page never written is zeroed
/// at its first fault instead), then times listing them and removing each: unlinking
/// it, or (`mapped`) opening, mapping, CASing a word of, unlinking and unmapping it
/// ([`floor::map_claim_unlink_named`]). The unlinked objects are of 4 KiB; the mapped
/// ones as long as the segment shmrc makes for a 4 KiB file_system buffer (its header,
/// holder slots and payload: the pages the sweep maps and frees), as the fill goals'
/// bound is.
fn sweep_floor(prefix: &str, count: usize, mapped: bool) -> Result<Duration> {
    let len = if mapped {
        fresh_segment_layout(Strategy::FileSystem, 4096)?.total_len()
    } else {
        4096
    };
    for i in 0..count {
        let fd = floor::create_named(&format!("{prefix}-{i}"), len, true)?;
        FloorMap::new(std::os::fd::AsFd::as_fd(&fd), len)?.write_byte(0, 1)?;
    }
    let start = Instant::now();
    for name in DefaultOs::default().shm_list(prefix)? {
        if mapped {
            floor::map_claim_unlink_named(&name, len)?;
        } else {
            floor::unlink_named(&name)?;
        }
    }
    Ok(start.elapsed())
}

/// Creating and releasing a 4 KiB file_system buffer in `ns`, which holds `count` live
/// segments, against creating (reserved) and unlinking a floor object beside `count`
/// floor names under `floor_prefix`.
fn create_release_among(
    ns: &Namespace,
    floor_prefix: &str,
    count: usize,
    effort: Effort,
) -> Result<Vec<Row>> {
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());
    let extra = format!("{floor_prefix}-extra");
    let mut measures: Vec<Measure<'_>> = vec![
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                ShmBuf::with_options(4096, &options)?.release()?;
            }
            Ok(start.elapsed())
        }),
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                drop(floor::create_named(&extra, 4096, true)?);
                floor::unlink_named(&extra)?;
            }
            Ok(start.elapsed())
        }),
    ];
    let nanos = interleaved(effort, &mut measures)?;
    let names = [
        "shmrc create+release (file_system)".to_owned(),
        "floor shm_open+fallocate+unlink".to_owned(),
    ];
    let mut rows = rows(
        "create/release",
        Some(4096),
        Unit::Micros,
        &names,
        &nanos,
        &[1],
    );
    for row in &mut rows {
        row.axis = Some((SEGMENTS, count));
    }
    Ok(rows)
}

/// Creating a buffer of `len` bytes (the storage is reserved: every page is zeroed by
/// the kernel), against `memset` over as many bytes already in memory.
fn creation(len: usize, effort: Effort) -> Result<Vec<Row>> {
    let mut warm = vec![0u8; len];
    let options_fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let mut measures: Vec<Measure<'_>> = vec![
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                drop(std::hint::black_box(ShmBuf::with_options(
                    len,
                    &options_fd,
                )?));
            }
            Ok(start.elapsed())
        }),
        Box::new(|n| {
            let start = Instant::now();
            for _ in 0..n {
                drop(std::hint::black_box(floor::memfd(len, true)?));
            }
            Ok(start.elapsed())
        }),
        Box::new(|n| {
            let start = Instant::now();
            for i in 0..n {
                warm.fill(i as u8);
                std::hint::black_box(&warm);
            }
            Ok(start.elapsed())
        }),
    ];
    let nanos = interleaved(effort, &mut measures)?;
    let names = [
        "shmrc create (file_descriptor)".to_owned(),
        "floor memfd+fallocate".to_owned(),
        "memset".to_owned(),
    ];
    Ok(rows(
        "creation",
        Some(len),
        Unit::MillisPerGib,
        &names,
        &nanos,
        &[2],
    ))
}

/// Runs the benchmarks (`shmrc-bench`, or `shmrc bench`).
pub fn run(args: &BenchOptions) -> Result<()> {
    let effort = if args.quick {
        Effort {
            rounds: 5,
            batch: Duration::from_millis(20),
        }
    } else {
        Effort {
            rounds: 15,
            batch: Duration::from_millis(100),
        }
    };
    // The floor has no manager: the workloads run without one, except sigkill-to-unlink,
    // whose victims join a manager of their own.
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let pid = std::process::id();
    let ns = Namespace::new(format!("shmrc-bench-{pid}"))?;
    let started = Instant::now();
    let result = if args.growth {
        if args.only.is_some() {
            return Err(Error::InvalidArgument(
                "--growth runs its own sweep of every workload: it takes no --only".into(),
            ));
        }
        growth(&ns, effort, args.quick)
    } else {
        run_all(&ns, effort, args.quick, args.only.as_deref())
    };
    let leftovers = cleanup(&ns);
    let rows = result?;
    leftovers?;
    // The goals are judged on a regular run's rows; the growth sweep has none of its own.
    let verdicts = if args.growth {
        Vec::new()
    } else {
        judge_goals(&rows, args.only.as_deref())
    };
    if args.json {
        print_json(&rows, &verdicts, args.quick, started.elapsed())?;
    } else {
        print_tables(&rows);
        print_goals(&verdicts);
        println!("measured in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The growth sweep's sizes: 4 KiB to 64 MiB.
pub const GROWTH_SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];
/// The growth sweep's holder counts.
pub const GROWTH_HOLDERS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// The growth sweep's segments per namespace (`--quick` stops at 10,000).
pub const GROWTH_SEGMENTS: [usize; 4] = [100, 1_000, 10_000, 100_000];

/// The growth sweep (`--growth`): the buffer workloads at every size of
/// [`GROWTH_SIZES`]; attach + release of a 4 KiB buffer against the holders in flight
/// ([`GROWTH_HOLDERS`]); creating and releasing a buffer and the sweep against the
/// live segments in the namespace ([`GROWTH_SEGMENTS`]): each with its floor, in one
/// run.
fn growth(ns: &Namespace, effort: Effort, quick: bool) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for workload in [
        BufferWorkload::PingPong,
        BufferWorkload::Stream,
        BufferWorkload::Fill,
        BufferWorkload::AttachRelease,
    ] {
        for strategy in Strategy::ALL {
            rows.extend(buffer_workload(
                workload,
                strategy,
                ns,
                effort,
                &GROWTH_SIZES,
            )?);
        }
    }
    for strategy in Strategy::ALL {
        rows.extend(attach_release_by_holders(strategy, ns, effort)?);
    }
    let segments: &[usize] = if quick {
        &GROWTH_SEGMENTS[..3]
    } else {
        &GROWTH_SEGMENTS
    };
    rows.extend(sweep(ns.prefix(), segments, 1, Some(effort))?);
    Ok(rows)
}

/// Attach + release of a 4 KiB buffer by the peer with each count of
/// [`GROWTH_HOLDERS`] handles to it in one message (all of them holders while the peer
/// works through them), shmrc against the floor of `strategy` (file_system buffers
/// with room for every holder: a capacity of 128 slots).
fn attach_release_by_holders(
    strategy: Strategy,
    ns: &Namespace,
    effort: Effort,
) -> Result<Vec<Row>> {
    const LEN: usize = 4096;
    let options = CreateOptions::new().namespace(ns.clone()).capacity(128);
    let floor_name = match strategy {
        Strategy::FileDescriptor => FloorFd { reserve: false }.name(),
        Strategy::FileSystem => FloorNamed::new(String::new(), false).name(),
    };
    let shmrc = Shmrc::with_options(strategy, options.clone());
    let names = [shmrc.name(), floor_name];
    let peers = [
        peer(&names[0], Mode::Attach)?,
        peer(&names[1], Mode::Attach)?,
    ];
    let prefix = format!("{}-holders", ns.prefix());
    let (to_shmrc, to_floor) = (&peers[0].stream, &peers[1].stream);
    let mut out = Vec::new();
    for holders in GROWTH_HOLDERS {
        let mut shmrc = Shmrc::with_options(strategy, options.clone());
        let (mut fd, mut named) = (
            FloorFd { reserve: false },
            FloorNamed::new(prefix.clone(), false),
        );
        let floor: Measure<'_> = match strategy {
            Strategy::FileDescriptor => {
                Box::new(move |n| attach_release_batched(&mut fd, to_floor, LEN, n, holders))
            }
            Strategy::FileSystem => {
                Box::new(move |n| attach_release_batched(&mut named, to_floor, LEN, n, holders))
            }
        };
        let mut measures: Vec<Measure<'_>> = vec![
            Box::new(move |n| attach_release_batched(&mut shmrc, to_shmrc, LEN, n, holders)),
            floor,
        ];
        let nanos = interleaved(effort, &mut measures)?;
        let mut rows = rows(
            "attach/release",
            Some(LEN),
            Unit::Micros,
            &names,
            &nanos,
            &[1],
        );
        for row in &mut rows {
            row.axis = Some((HOLDERS, holders));
        }
        out.extend(rows);
    }
    Ok(out)
}

/// Each goal of [`goals::all`] judged on `rows` (those of the workload `only` names,
/// when it names one).
fn judge_goals(rows: &[Row], only: Option<&str>) -> Vec<(Goal, Verdict)> {
    let measured = |workload: &str, size: Option<usize>, contender: &str, baseline: &str| {
        let row = rows.iter().find(|r| {
            r.axis.is_none() && r.workload == workload && r.size == size && r.contender == contender
        })?;
        let ratio = row.ratios.iter().find(|(b, _)| b == baseline)?.1;
        Some((row.nanos, row.nanos / ratio))
    };
    goals::all()
        .into_iter()
        .filter(|g| only.is_none_or(|o| o == g.workload))
        .map(|g| {
            let verdict = g.judge(measured);
            (g, verdict)
        })
        .collect()
}

fn print_goals(verdicts: &[(Goal, Verdict)]) {
    if !verdicts.is_empty() {
        println!(
            "\nGoals (ratio to a baseline of this run):\n{}",
            goals_table(verdicts)
        );
    }
}

/// The goals and their verdicts as a table, no line ending in spaces (a column is as
/// wide as its widest cell, and the reasons are long).
fn goals_table(verdicts: &[(Goal, Verdict)]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["ISSUE", "GOAL", "RATIO", "VERDICT", "REASON"]);
    for (goal, verdict) in verdicts {
        table.add_row([
            goal.issue.to_string(),
            goal.describe(),
            verdict.ratio().map_or("-".into(), |r| format!("{r:.2}x")),
            verdict.word().to_owned(),
            verdict.reason().to_owned(),
        ]);
    }
    table.trim_fmt()
}

/// The workloads `--only` may name.
pub const WORKLOADS: [&str; 11] = [
    "ping-pong",
    "channel ping-pong",
    "stream",
    "fill",
    "attach/release",
    "clone/drop",
    "finalize",
    "sweep",
    "creation",
    "sigkill-to-unlink",
    "planted-names",
];

fn run_all(ns: &Namespace, effort: Effort, quick: bool, only: Option<&str>) -> Result<Vec<Row>> {
    if let Some(name) = only.filter(|n| !WORKLOADS.contains(n)) {
        return Err(Error::InvalidArgument(format!(
            "unknown workload {name:?}; one of {}",
            WORKLOADS.join(", ")
        )));
    }
    let wanted = |name: &str| only.is_none_or(|o| o == name);
    let mut rows = Vec::new();
    for workload in [
        BufferWorkload::PingPong,
        BufferWorkload::Stream,
        BufferWorkload::Fill,
        BufferWorkload::AttachRelease,
    ] {
        if wanted(workload.name()) {
            for strategy in Strategy::ALL {
                rows.extend(buffer_workload(workload, strategy, ns, effort, &SIZES)?);
            }
        }
    }
    if wanted("channel ping-pong") {
        for strategy in Strategy::ALL {
            rows.extend(channel_ping_pong(strategy, ns, effort)?);
        }
    }
    if wanted("clone/drop") {
        rows.extend(clone_drop(effort)?);
    }
    if wanted("finalize") {
        rows.extend(finalize(ns, effort)?);
    }
    if wanted("sweep") {
        rows.extend(sweep(
            ns.prefix(),
            &[100, 10_000],
            if quick { 1 } else { 5 },
            None,
        )?);
    }
    if wanted("creation") {
        let creation_len = if quick { 64 << 20 } else { 256 << 20 };
        rows.extend(creation(creation_len, effort)?);
    }
    if wanted("sigkill-to-unlink") {
        let (rounds, others): (usize, &[usize]) = if quick {
            (20, &[0, 1000])
        } else {
            (200, &[0, 1000, 10_000])
        };
        let ns = Namespace::new(format!("{}-kill", ns.prefix()))?;
        rows.extend(sigkill_to_unlink(&ns, rounds, others)?);
    }
    if wanted("planted-names") {
        let ns = Namespace::new(format!("{}-planted", ns.prefix()))?;
        let (first_rounds, death_rounds) = if quick { (3, 20) } else { (10, 200) };
        rows.extend(planted_names(&ns, first_rounds, death_rounds)?);
    }
    Ok(rows)
}

/// What names another user planted cost the victim ([`planted`]): its first create
/// (p50, max) with 10,000 planted namespaces, and SIGKILL to unlink (p50, p99) with
/// 100,000 planted names in its namespace, each against nothing planted.
fn planted_names(ns: &Namespace, first_rounds: usize, death_rounds: usize) -> Result<Vec<Row>> {
    let victim = match planted::victim_user() {
        Ok(victim) => victim,
        Err(why) => {
            eprintln!("planted-names: skipped: {why}");
            return Ok(Vec::new());
        }
    };
    let mut rows = Vec::new();
    let mut pair = |what: &str, p: &str, nothing: Duration, planted: Duration, with: &str| {
        let baseline = format!("{what} {p}, nothing planted");
        rows.push(Row {
            workload: "planted-names",
            size: None,
            contender: baseline.clone(),
            nanos: nothing.as_nanos() as f64,
            unit: Unit::Millis,
            ratios: Vec::new(),
            axis: None,
        });
        rows.push(Row {
            workload: "planted-names",
            size: None,
            contender: format!("{what} {p}, {with}"),
            nanos: planted.as_nanos() as f64,
            unit: Unit::Millis,
            ratios: vec![(
                baseline,
                planted.as_nanos() as f64 / nothing.as_nanos() as f64,
            )],
            axis: None,
        });
    };
    let first = planted::first_create(ns, victim, first_rounds)?;
    let with = format!("{} planted namespaces", planted::NAMESPACES);
    for (p, pick) in [("p50", 50.0), ("max", 100.0)] {
        let at = |row: &planted::FirstCreate| kill_latency::percentile(&row.samples, pick);
        pair("first create", p, at(&first[0]), at(&first[1]), &with);
    }
    let death = planted::death(ns, victim, death_rounds)?;
    let with = format!("{} planted in its namespace", planted::IN_NAMESPACE);
    for (p, pick) in [("p50", 50.0), ("p99", 99.0)] {
        let at = |row: &planted::Death| kill_latency::percentile(&row.unlink, pick);
        pair("sigkill-to-unlink", p, at(&death[0]), at(&death[1]), &with);
    }
    Ok(rows)
}

/// SIGKILL of a segment's last holder to its unlink by the manager, p50 and p99,
/// against the kernel's SIGKILL to `waitpid` in the same rounds.
fn sigkill_to_unlink(ns: &Namespace, rounds: usize, others: &[usize]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for latency in kill_latency::measure(ns, rounds, others)? {
        if latency.failed > 0 {
            return Err(Error::InvalidArgument(format!(
                "sigkill-to-unlink: {} of {rounds} segments were not unlinked within 5 s \
                 ({:?} killed, {} other segments)",
                latency.failed, latency.victim, latency.others
            )));
        }
        let what = format!("{:?}, {} others", latency.victim, latency.others).to_lowercase();
        for p in [50.0, 99.0] {
            let base = kill_latency::percentile(&latency.baseline, p).as_nanos() as f64;
            let unlink = kill_latency::percentile(&latency.unlink, p).as_nanos() as f64;
            let baseline = format!("kill->waitpid p{p}, {what}");
            rows.push(Row {
                workload: "sigkill-to-unlink",
                size: None,
                contender: baseline.clone(),
                nanos: base,
                unit: Unit::Millis,
                ratios: Vec::new(),
                axis: None,
            });
            rows.push(Row {
                workload: "sigkill-to-unlink",
                size: None,
                contender: format!("manager unlink p{p}, {what}"),
                nanos: unlink,
                unit: Unit::Millis,
                ratios: vec![(baseline, unlink / base)],
                axis: None,
            });
        }
    }
    Ok(rows)
}

/// Sweeps the bench's namespaces and unlinks floor objects a failed run left; an error
/// if anything of this run is still in `/dev/shm` afterwards.
fn cleanup(ns: &Namespace) -> Result<()> {
    let os = DefaultOs::default();
    for name in os.shm_list(ns.prefix())? {
        let _ = floor::unlink_named(&name);
    }
    for name in os.shm_list("")? {
        let found = Namespace::of_segment(&name, os.uid()).map(|(found, _)| found);
        if let Some(found) = found.ok().filter(|f| f.prefix().starts_with(ns.prefix())) {
            shmrc::sweep(&found)?;
        }
    }
    let left: Vec<String> = os
        .shm_list("")?
        .into_iter()
        .filter(|n| n.contains(ns.prefix()))
        .collect();
    if !left.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the bench left {} object(s) in /dev/shm: {}",
            left.len(),
            left.join(" ")
        )));
    }
    Ok(())
}

fn size_name(size: Option<usize>) -> String {
    size.map_or("-".into(), |s| humansize::format_size(s, humansize::BINARY))
}

fn print_tables(rows: &[Row]) {
    println!("{}", rows_table(rows));
}

/// The rows as a table, no line ending in spaces.
fn rows_table(rows: &[Row]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header([
        "WORKLOAD",
        "SIZE",
        "CONTENDER",
        "VALUE",
        "UNIT",
        "RATIO (cost / baseline cost)",
    ]);
    for row in rows {
        let ratios: Vec<String> = row
            .ratios
            .iter()
            .filter(|(name, _)| *name != row.contender)
            .map(|(name, r)| format!("{r:.2}x {name}"))
            .collect();
        table.add_row([
            row.workload.to_owned(),
            match row.axis {
                Some((name, value)) => format!("{} {value} {name}", size_name(row.size)),
                None => size_name(row.size),
            },
            row.contender.clone(),
            format!("{:.2}", row.unit.show(row.nanos, row.size)),
            row.unit.name().to_owned(),
            if ratios.is_empty() {
                "baseline".into()
            } else {
                ratios.join(", ")
            },
        ]);
    }
    table.trim_fmt()
}

/// The `--json` document.
#[derive(Serialize)]
struct Document<'a> {
    quick: bool,
    seconds: f64,
    results: Vec<JsonRow<'a>>,
    /// Every goal with its verdict (empty in the growth sweep).
    goals: Vec<JsonGoal<'a>>,
}

/// One goal and what this run made of it.
#[derive(Serialize)]
struct JsonGoal<'a> {
    issue: u32,
    goal: String,
    workload: &'a str,
    size: Option<usize>,
    contender: &'a str,
    baseline: &'a str,
    limit: f64,
    ratio: Option<f64>,
    verdict: &'a str,
    reason: &'a str,
    /// The goal's bound as this run measured it (its row, cost, cost over the
    /// baseline and the contender's cost over it); `null` if the goal has none or the
    /// run did not measure it.
    bound: Option<&'a BoundFigures>,
}

/// The growth sweep's axis of a row, other than size.
#[derive(Serialize)]
struct JsonAxis {
    name: &'static str,
    value: usize,
}

/// One result in the `--json` document.
#[derive(Serialize)]
struct JsonRow<'a> {
    workload: &'a str,
    size: Option<usize>,
    contender: &'a str,
    nanos_per_op: f64,
    value: f64,
    unit: &'a str,
    ratios: Vec<JsonRatio<'a>>,
    /// The growth sweep's holders or segments axis, `null` elsewhere.
    axis: Option<JsonAxis>,
}

/// A cost over a baseline's cost.
#[derive(Serialize)]
struct JsonRatio<'a> {
    baseline: &'a str,
    ratio: f64,
}

fn print_json(
    rows: &[Row],
    verdicts: &[(Goal, Verdict)],
    quick: bool,
    took: Duration,
) -> Result<()> {
    let document = Document {
        quick,
        seconds: took.as_secs_f64(),
        results: rows
            .iter()
            .map(|row| JsonRow {
                workload: row.workload,
                size: row.size,
                contender: &row.contender,
                nanos_per_op: row.nanos,
                value: row.unit.show(row.nanos, row.size),
                unit: row.unit.name(),
                ratios: row
                    .ratios
                    .iter()
                    .map(|(name, ratio)| JsonRatio {
                        baseline: name,
                        ratio: *ratio,
                    })
                    .collect(),
                axis: row.axis.map(|(name, value)| JsonAxis { name, value }),
            })
            .collect(),
        goals: verdicts
            .iter()
            .map(|(goal, verdict)| JsonGoal {
                issue: goal.issue,
                goal: goal.describe(),
                workload: goal.workload,
                size: goal.size,
                contender: &goal.contender,
                baseline: &goal.baseline,
                limit: goal.limit,
                ratio: verdict.ratio(),
                verdict: verdict.word(),
                reason: verdict.reason(),
                bound: verdict.bound(),
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&document)
        .map_err(|e| Error::InvalidArgument(format!("the bench's JSON document: {e}")))?;
    writeln!(std::io::stdout().lock(), "{text}").map_err(|e| Error::os("write stdout", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_with_only_is_refused_and_an_unknown_workload_is_named() {
        let growth = BenchOptions {
            growth: true,
            only: Some("fill".into()),
            ..BenchOptions::default()
        };
        let err = run(&growth).unwrap_err();
        assert!(err.to_string().contains("takes no --only"), "{err}");
        let unknown = BenchOptions {
            only: Some("nothing".into()),
            ..BenchOptions::default()
        };
        let err = run(&unknown).unwrap_err();
        assert!(err.to_string().contains("\"nothing\""), "{err}");
    }

    #[test]
    fn goals_are_judged_on_the_rows_of_this_run_and_only_those_of_the_workload_run() {
        let names = [
            "shmrc file_system".to_owned(),
            "floor shm_open+fallocate".to_owned(),
            "floor shm_open+fallocate, segment length".to_owned(),
            "floor shm_open+fallocate, segment length, with checks".to_owned(),
        ];
        let mut fill = rows(
            "fill",
            Some(4096),
            Unit::PerSecond,
            &names,
            &[30.0, 20.0, 23.0, 26.0],
            &[1],
        );
        // A growth row of the same workload and size must not be taken for the goal's.
        let mut growth = rows(
            "fill",
            Some(4096),
            Unit::PerSecond,
            &names,
            &[1.0, 100.0, 1.0, 1.0],
            &[1],
        );
        for row in &mut growth {
            row.axis = Some((HOLDERS, 2));
        }
        growth.append(&mut fill);
        let verdicts = judge_goals(&growth, Some("fill"));
        assert!(verdicts.iter().all(|(g, _)| g.workload == "fill"));
        let (_, verdict) = verdicts
            .iter()
            .find(|(g, _)| g.contender == "shmrc file_system" && g.size == Some(4096))
            .expect("the fill 4 KiB goal of file_system");
        assert_eq!(verdict.word(), "missed");
        assert!((verdict.ratio().unwrap() - 1.5).abs() < 1e-9);
        assert!(
            verdict.reason().starts_with("1.50x > 1.2x"),
            "{}",
            verdict.reason()
        );
        // Its bound, the floor at shmrc's segment length with shmrc's checks, from the
        // same run's rows.
        assert!(
            verdict.reason().contains(
                "is itself 1.30x the baseline, past the 1.2x goal by itself; \
                 shmrc file_system is 1.15x that bound"
            ),
            "{}",
            verdict.reason()
        );
        assert_eq!(
            verdict.bound().map(|b| b.row.as_str()),
            Some("floor shm_open+fallocate, segment length, with checks")
        );
        // Its file_descriptor twin had no rows in this run.
        let (_, absent) = verdicts
            .iter()
            .find(|(g, _)| g.contender == "shmrc file_descriptor" && g.size == Some(4096))
            .expect("the fill 4 KiB goal of file_descriptor");
        assert_eq!(absent.word(), "not measured");
    }

    /// A short cell in a column made wide by a long one (a goal's reason, a row's
    /// ratios) must not leave its line padded with spaces to that width.
    #[test]
    fn the_printed_tables_end_no_line_in_spaces() {
        let names = [
            "shmrc file_system".to_owned(),
            "floor shm_open+fallocate".to_owned(),
            "floor shm_open+fallocate, segment length".to_owned(),
        ];
        let mut fill = rows(
            "fill",
            Some(4096),
            Unit::PerSecond,
            &names,
            &[30.0, 20.0, 26.0],
            &[1],
        );
        // Met at 1 MiB: a goal whose reason is empty, beside a missed one's.
        fill.extend(rows(
            "fill",
            Some(1 << 20),
            Unit::PerSecond,
            &names,
            &[20.0, 20.0, 20.0],
            &[1],
        ));
        let verdicts = judge_goals(&fill, Some("fill"));
        assert!(verdicts.iter().any(|(_, v)| v.word() == "missed"));
        assert!(verdicts.iter().any(|(_, v)| v.reason().is_empty()));
        for table in [rows_table(&fill), goals_table(&verdicts)] {
            assert!(table.lines().count() > 2, "{table}");
            for line in table.lines() {
                assert_eq!(line, line.trim_end(), "a padded line in:\n{table}");
            }
        }
    }
}
