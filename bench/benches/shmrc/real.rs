//! The benches themselves (the real backend only).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use shmrc::{CreateOptions, Error, Namespace, Result, ShmBuf, Strategy};
use shmrc_bench::floor::{self, FloorMap};
use shmrc_bench::payload::{Bytes, Payload};
use shmrc_bench::workloads::{
    Contender, FloorFd, FloorNamed, FloorReused, Mode, PEER_CONTENDER, PEER_COUNT, PEER_NAMESPACE,
    Peer, Shmrc, attach_release, ping_pong, stream, window_for,
};

const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];

fn crate_error(call: &'static str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{call}: {e}"))
}

/// The `memfd` crate: its memfd, passed with `SCM_RIGHTS` like the floor's.
struct MemfdCrate;

impl Contender for MemfdCrate {
    type Buf = (memfd::Memfd, FloorMap);

    fn name(&self) -> String {
        "memfd crate".into()
    }

    fn create(&mut self, len: usize) -> Result<Self::Buf> {
        let fd = memfd::MemfdOptions::default()
            .create("memfd-crate")
            .map_err(|e| crate_error("memfd create", e))?;
        fd.as_file()
            .set_len(len as u64)
            .map_err(|e| Error::os("ftruncate", e))?;
        let map = FloorMap::new(fd.as_file().as_fd(), len)?;
        map.write_byte(0, 1)?;
        Ok((fd, map))
    }

    fn write(&mut self, buf: &Self::Buf, payload: Payload, seed: u64) -> Result<()> {
        payload.write(&buf.1, seed)
    }

    fn send(&mut self, s: &UnixStream, buf: &Self::Buf, count: usize) -> Result<()> {
        let fds = vec![buf.0.as_file().as_fd(); count];
        floor::send(s, &(buf.1.len() as u64).to_le_bytes(), &fds)
    }

    fn consume(&mut self, s: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        let mut fds: Vec<OwnedFd> = Vec::new();
        let Some(len) = shmrc_bench::workloads::recv_len(s, &mut fds)? else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut read = 0;
        for fd in fds {
            let fd = memfd::Memfd::try_from_fd(fd)
                .map_err(|_| Error::InvalidArgument("not a memfd".into()))?;
            read = payload.read(&FloorMap::new(fd.as_file().as_fd(), len)?)?;
        }
        Ok(Some((read, start.elapsed().as_nanos() as u64)))
    }
}

/// The `shared_memory` crate: a named mapping whose id travels as bytes.
struct SharedMemoryCrate;

/// A `shared_memory` mapping as the payloads see it (the fill workload's slices).
struct CrateMapping(shared_memory::Shmem);

impl Bytes for CrateMapping {
    fn first_byte(&self) -> Result<u8> {
        // SAFETY: the mapping is at least one byte long (the creator's `len` > 0); a
        // volatile read of shared memory another process may write is torn at worst.
        Ok(unsafe { self.0.as_ptr().read_volatile() })
    }

    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `as_ptr()`/`len()` are the crate's live mapping, kept while `self`
        // is borrowed; the caller excludes writers (the trait's contract).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), self.0.len()) }
    }

    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as in `bytes`, the mapping writable; the caller excludes every other
        // access (the trait's contract).
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr(), self.0.len()) }
    }
}

impl Contender for SharedMemoryCrate {
    type Buf = CrateMapping;

    fn name(&self) -> String {
        "shared_memory crate".into()
    }

    fn create(&mut self, len: usize) -> Result<Self::Buf> {
        let shmem = shared_memory::ShmemConf::new()
            .size(len)
            .create()
            .map_err(|e| crate_error("shared_memory create", e))?;
        // SAFETY: byte 0 lies inside the fresh `len`-byte mapping (len > 0), which no
        // other process knows yet.
        unsafe { shmem.as_ptr().write_volatile(1) };
        Ok(CrateMapping(shmem))
    }

    fn write(&mut self, buf: &Self::Buf, payload: Payload, seed: u64) -> Result<()> {
        payload.write(buf, seed)
    }

    fn send(&mut self, s: &UnixStream, buf: &Self::Buf, count: usize) -> Result<()> {
        shmrc_bench::workloads::send_named(s, buf.0.len(), count, buf.0.get_os_id())
    }

    fn consume(&mut self, s: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        let Some((_len, count, id)) = shmrc_bench::workloads::recv_named(s)? else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut read = 0;
        for _ in 0..count {
            let shmem = shared_memory::ShmemConf::new()
                .os_id(&id)
                .open()
                .map_err(|e| crate_error("shared_memory open", e))?;
            read = payload.read(&CrateMapping(shmem))?;
        }
        Ok(Some((read, start.elapsed().as_nanos() as u64)))
    }
}

/// Every contender of the buffer workloads, by name, in group order (the pooled
/// ones last: groups that create one buffer in all leave them out).
fn contender_names(prefix: &str) -> Vec<String> {
    let ns = Namespace::default();
    vec![
        Shmrc::new(Strategy::FileDescriptor, ns.clone()).name(),
        FloorFd { reserve: false }.name(),
        FloorFd { reserve: true }.name(),
        MemfdCrate.name(),
        Shmrc::new(Strategy::FileSystem, ns).name(),
        FloorNamed::new(prefix.into(), false).name(),
        FloorNamed::new(prefix.into(), true).name(),
        SharedMemoryCrate.name(),
        Shmrc::POOLED.into(),
        FloorReused::NAME.into(),
    ]
}

/// The peer side, when this process was started as one.
fn serve_peer() -> Result<()> {
    if let Some(done) = shmrc_bench::workloads::serve_builtin() {
        return done;
    }
    match std::env::var(PEER_CONTENDER).unwrap_or_default().as_str() {
        "memfd crate" => shmrc_bench::workloads::serve(MemfdCrate),
        "shared_memory crate" => shmrc_bench::workloads::serve(SharedMemoryCrate),
        other => Err(Error::InvalidArgument(format!(
            "unknown contender {other:?}"
        ))),
    }
}

fn peer(name: &str, mode: Mode) -> Peer {
    let exe = std::env::current_exe().expect("the bench binary knows its path");
    Peer::start(Command::new(exe), name, mode).expect("peer process starts")
}

#[derive(Copy, Clone)]
enum Workload {
    PingPong,
    Stream,
    /// The stream, every byte written and checked.
    Fill,
    AttachRelease,
}

impl Workload {
    /// How many buffers of `len` bytes may be in flight at once.
    fn window(self, len: usize) -> usize {
        match self {
            Workload::Stream | Workload::Fill => window_for(len),
            _ => 1,
        }
    }
}

/// Runs `workload` with contender `c` against `peer` for criterion's `iters`.
fn run<C: Contender>(w: Workload, c: &mut C, peer: &Peer, len: usize, iters: u64) -> Duration {
    let window = w.window(len);
    match w {
        Workload::PingPong => ping_pong(c, &peer.stream, len, iters, Payload::TouchOne),
        Workload::Stream => stream(c, &peer.stream, len, iters, window, Payload::TouchOne),
        Workload::Fill => stream(c, &peer.stream, len, iters, window, Payload::Fill),
        Workload::AttachRelease => attach_release(c, &peer.stream, len, iters),
    }
    .expect("workload runs")
}

fn buffer_group(crit: &mut Criterion, group: &str, w: Workload, mode: Mode) {
    let ns = Namespace::new(format!("shmrc-bench-c{}", std::process::id())).expect("namespace");
    let prefix = format!("{}-floor", ns.prefix());
    let mut names = contender_names(&prefix);
    if matches!(w, Workload::AttachRelease) {
        names.truncate(8);
    }
    let peers: Vec<Peer> = names.iter().map(|n| peer(n, mode)).collect();
    let mut g = crit.benchmark_group(group);
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(10);
    for len in SIZES {
        g.throughput(criterion::Throughput::Elements(1));
        // Kept for every iteration at this size, as a user keeps them.
        let mut pool =
            Shmrc::pooled(Strategy::FileSystem, ns.clone(), w.window(len)).expect("pool");
        let mut bare = if names.len() > 8 {
            Some(FloorReused::new(&format!("{prefix}-bare"), len, w.window(len)).expect("bare"))
        } else {
            None
        };
        for (index, (name, p)) in names.iter().zip(&peers).enumerate() {
            let id = BenchmarkId::new(name.as_str(), workloads_size(len));
            g.bench_function(id, |b| {
                b.iter_custom(|iters| match index {
                    0 => run(
                        w,
                        &mut Shmrc::new(Strategy::FileDescriptor, ns.clone()),
                        p,
                        len,
                        iters,
                    ),
                    1 => run(w, &mut FloorFd { reserve: false }, p, len, iters),
                    2 => run(w, &mut FloorFd { reserve: true }, p, len, iters),
                    3 => run(w, &mut MemfdCrate, p, len, iters),
                    4 => run(
                        w,
                        &mut Shmrc::new(Strategy::FileSystem, ns.clone()),
                        p,
                        len,
                        iters,
                    ),
                    5 => run(
                        w,
                        &mut FloorNamed::new(prefix.clone(), false),
                        p,
                        len,
                        iters,
                    ),
                    6 => run(w, &mut FloorNamed::new(prefix.clone(), true), p, len, iters),
                    7 => run(w, &mut SharedMemoryCrate, p, len, iters),
                    8 => run(w, &mut pool, p, len, iters),
                    _ => run(w, bare.as_mut().expect("pooled group"), p, len, iters),
                })
            });
        }
    }
    g.finish();
}

fn workloads_size(len: usize) -> String {
    match len {
        l if l >= 1 << 20 => format!("{}MiB", l >> 20),
        l => format!("{}KiB", l >> 10),
    }
}

fn clone_drop(crit: &mut Criterion) {
    let buf = ShmBuf::with_options(
        4096,
        &CreateOptions::new().strategy(Strategy::FileDescriptor),
    )
    .expect("buffer");
    let fd = floor::memfd(4096, false).expect("memfd");
    let arc = Arc::new(FloorMap::new(fd.as_fd(), 4096).expect("map"));
    let mut g = crit.benchmark_group("clone_drop");
    g.measurement_time(Duration::from_secs(1));
    g.bench_function("shmrc ShmBuf", |b| {
        b.iter(|| drop(std::hint::black_box(buf.clone())))
    });
    g.bench_function("floor Arc<mapping>", |b| {
        b.iter(|| drop(std::hint::black_box(Arc::clone(&arc))))
    });
    g.finish();
}

fn finalize(crit: &mut Criterion) {
    let ns = Namespace::new(format!("shmrc-bench-f{}", std::process::id())).expect("namespace");
    let mut g = crit.benchmark_group("finalize");
    g.measurement_time(Duration::from_secs(1));
    for capacity in [1usize, 64, 4096] {
        let options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns.clone())
            .capacity(capacity);
        g.bench_function(BenchmarkId::new("shmrc release", capacity), |b| {
            b.iter_batched(
                || ShmBuf::with_options(4096, &options).expect("buffer"),
                |buf| buf.release().expect("release"),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    let mut floor = FloorNamed::new(format!("{}-floor", ns.prefix()), true);
    g.bench_function("floor munmap+close+unlink", |b| {
        b.iter_batched(
            || floor.create(4096).expect("floor object"),
            drop,
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn sweep(crit: &mut Criterion) {
    const COUNT: usize = 100;
    let ns = Namespace::new(format!("shmrc-bench-s{}", std::process::id())).expect("namespace");
    let mut g = crit.benchmark_group("sweep");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.bench_function(BenchmarkId::new("shmrc sweep, dead holder", COUNT), |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let exe = std::env::current_exe().expect("bench binary path");
                let mut command = Command::new(exe);
                command
                    .env(PEER_NAMESPACE, ns.prefix())
                    .env(PEER_COUNT, COUNT.to_string());
                let mut holder =
                    Peer::start(command, "shmrc file_system", Mode::Hold).expect("holder");
                let mut ack = [0u8];
                std::io::Read::read_exact(&mut &holder.stream, &mut ack).expect("holder ack");
                holder.child.kill().expect("kill the holder");
                holder.child.wait().expect("reap the holder");
                let start = Instant::now();
                let report = shmrc::sweep(&ns).expect("sweep");
                took += start.elapsed();
                assert_eq!(report.unlinked as usize, COUNT);
            }
            took
        })
    });
    g.finish();
}

fn creation(crit: &mut Criterion) {
    const LEN: usize = 64 << 20;
    let mut g = crit.benchmark_group("creation_64MiB");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(criterion::Throughput::Bytes(LEN as u64));
    let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    g.bench_function("shmrc create", |b| {
        b.iter(|| drop(ShmBuf::with_options(LEN, &options).expect("buffer")))
    });
    g.bench_function("floor memfd+fallocate", |b| {
        b.iter(|| drop(floor::memfd(LEN, true).expect("memfd")))
    });
    let mut warm = vec![0u8; LEN];
    g.bench_function("memset", |b| {
        b.iter(|| {
            warm.fill(std::hint::black_box(1));
            std::hint::black_box(&warm);
        })
    });
    g.finish();
}

/// Serves as a peer if started as one, else runs every group.
pub fn main() {
    if std::env::var_os(PEER_CONTENDER).is_some() {
        if let Err(e) = serve_peer() {
            eprintln!("bench peer: {e}");
            std::process::exit(1);
        }
        return;
    }
    // As in `shmrc bench`: the floor has no manager, nor does shmrc here.
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let mut crit = Criterion::default().configure_from_args();
    buffer_group(&mut crit, "ping_pong", Workload::PingPong, Mode::Ping);
    buffer_group(&mut crit, "stream", Workload::Stream, Mode::Ping);
    buffer_group(&mut crit, "fill", Workload::Fill, Mode::Fill);
    buffer_group(
        &mut crit,
        "attach_release",
        Workload::AttachRelease,
        Mode::Attach,
    );
    clone_drop(&mut crit);
    finalize(&mut crit);
    sweep(&mut crit);
    creation(&mut crit);
    crit.final_summary();
}
