//! `shmrc demo`: the main job. Worker processes receive buffers of both strategies
//! (the process-wide strategy is switched at run time between creations), one worker
//! is SIGKILLed while it holds them (and one segment only it holds), the user's manager
//! sweeps on its death and unlinks that segment, the others keep reading their data, a sweep
//! reclaims the dead worker's references while the job still runs, everyone releases,
//! and a ledger shows what was created, attached, killed, reclaimed, unlinked and
//! leaked (measured: names left in `/dev/shm`, memfds left open in this process).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shmrc::{
    CreateOptions, Error, Namespace, Outcome, Result, ShareHandle, ShmBuf, Strategy, transport,
};

use crate::table::{Table, bytes};
use crate::worker::{checksum, fnv1a};

/// Options of `shmrc demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Worker processes to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=32))]
    workers: u32,
    /// Buffers per strategy.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    buffers: u32,
    /// Bytes per buffer.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
}

/// One worker process and its connection.
struct Worker {
    child: Child,
    stream: UnixStream,
}

/// Kills (by pid) and reaps every worker this demo started that is still running,
/// whatever way the demo ends.
struct Workers(BTreeMap<u32, Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in self.0.values_mut() {
            let _ = worker.child.kill();
            let _ = worker.child.wait();
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Row {
    created: u32,
    attached: u32,
    refs_killed: u32,
    reclaimed: u32,
    unlinked: u32,
    leaked: usize,
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<()> {
    let pid = std::process::id();
    let ns = Namespace::new(format!("shmrc-demo-{pid}"))?;
    let dir = std::env::temp_dir().join(format!("shmrc-demo-{pid}"));
    std::fs::create_dir_all(&dir).map_err(|e| Error::os("mkdir", e))?;
    let result = run_in(args, &ns, dir.join("demo.sock"));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(args: &DemoArgs, ns: &Namespace, socket: PathBuf) -> Result<()> {
    println!(
        "shmrc demo: {} workers, {} buffers of {} per strategy, namespace {ns}",
        args.workers,
        args.buffers,
        bytes(args.size as u64)
    );
    let mut workers = start_workers(&socket, args.workers)?;
    let mut ledger: BTreeMap<&str, Row> = BTreeMap::new();

    // 1. Create buffers, switching the process-wide strategy between batches.
    let mut buffers: Vec<(ShmBuf, u64)> = Vec::new();
    for strategy in shmrc::all_sharing_strategies() {
        shmrc::set_sharing_strategy(*strategy);
        println!(
            "\n[1] sharing strategy switched to {}: creating {} buffers",
            shmrc::sharing_strategy(),
            args.buffers
        );
        for index in 0..args.buffers {
            let buf = ShmBuf::with_options(args.size, &CreateOptions::new().namespace(ns.clone()))?;
            let pattern: Vec<u8> = (0..args.size)
                .map(|i| (i as u32).wrapping_mul(31).wrapping_add(index * 7) as u8)
                .collect();
            buf.write_at(0, &pattern)?;
            buffers.push((buf, fnv1a(&pattern)));
            ledger.entry(strategy.name()).or_default().created += 1;
        }
    }

    // 2. Every worker attaches every buffer and checks its bytes.
    println!(
        "\n[2] sharing all {} buffers with every worker (one message each, fds batched)",
        buffers.len()
    );
    for (id, worker) in &workers.0 {
        let handles = buffers
            .iter()
            .map(|(b, _)| b.share())
            .collect::<Result<Vec<_>>>()?;
        let sums: Vec<String> = buffers.iter().map(|(_, s)| s.to_string()).collect();
        let reply = ask(worker, &format!("hold {}", sums.join(" ")), handles)?;
        println!("    worker {id} (pid {}): {reply}", worker.child.id());
        for (b, _) in &buffers {
            ledger.entry(b.strategy().name()).or_default().attached += 1;
        }
    }
    let watched = buffers
        .iter()
        .find(|(b, _)| b.strategy() == Strategy::FileSystem)
        .map(|(b, _)| b.clone());
    if let Some(census) = watched.as_ref().and_then(ShmBuf::census) {
        println!(
            "    holders of a file_system buffer: {} live, {} dead",
            census.live, census.dead
        );
    }

    // 3. SIGKILL one worker while it holds everything, and one segment only it holds:
    //    the manager sweeps when it dies and unlinks that segment while the job runs.
    let (victim_id, mut victim) = workers.0.pop_first().expect("at least two workers");
    let own = own_segment(&victim, ns, args.size)?;
    let fs = ledger.entry(Strategy::FileSystem.name()).or_default();
    fs.created += 1;
    fs.attached += 1;
    fs.refs_killed += 1;
    let manager_before = shmrc::manager::status().ok();
    let victim_pid = victim.child.id();
    victim.child.kill().map_err(|e| Error::os("kill", e))?;
    let killed_at = Instant::now();
    victim.child.wait().map_err(|e| Error::os("waitpid", e))?;
    println!(
        "\n[3] SIGKILLed worker {victim_id} (pid {victim_pid}) while it held {} buffers, and \
         {own}, which only it held",
        buffers.len()
    );
    for (b, _) in &buffers {
        ledger.entry(b.strategy().name()).or_default().refs_killed += 1;
    }
    if let Some(before) = manager_before {
        watch_manager_sweep(ns, &own, killed_at, &before, &mut ledger)?;
    }

    // 4. The others still read their data.
    for (id, worker) in &workers.0 {
        println!("[4] worker {id}: {}", ask(worker, "verify", vec![])?);
    }
    if let Some(census) = watched.as_ref().and_then(ShmBuf::census) {
        println!(
            "    holders of a file_system buffer: {} live, {} dead",
            census.live, census.dead
        );
    }

    // 5. Sweep while the job runs: the dead worker's slots come back.
    let report = shmrc::sweep(ns)?;
    println!(
        "\n[5] sweep while {} workers still hold: reclaimed {} dead slot(s), unlinked {}",
        workers.0.len(),
        report.reclaimed,
        report.unlinked
    );
    let fs = ledger.entry(Strategy::FileSystem.name()).or_default();
    fs.reclaimed += report.reclaimed;
    fs.unlinked += report.unlinked;
    if let Some(census) = watched.as_ref().and_then(ShmBuf::census) {
        println!(
            "    holders of a file_system buffer: {} live, {} dead",
            census.live, census.dead
        );
    }
    drop(watched);

    // 6. Everyone releases; the last holder of each file_system buffer unlinks it.
    println!("\n[6] releasing: this process first, then the workers");
    for (buf, expected) in buffers.drain(..) {
        let found = checksum(&buf)?;
        if found != expected {
            return Err(Error::InvalidArgument(format!(
                "buffer changed under its holder: {found:#x} != {expected:#x}"
            )));
        }
        let strategy = buf.strategy();
        if let Some(f) = buf.release()? {
            ledger.entry(strategy.name()).or_default().unlinked +=
                u32::from(f.outcome == Outcome::Unlinked);
        }
    }
    for (id, worker) in &workers.0 {
        let reply = ask(worker, "release", vec![])?;
        println!("    worker {id}: {reply}");
        let n: u32 = reply
            .strip_prefix("released ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        ledger
            .entry(Strategy::FileSystem.name())
            .or_default()
            .unlinked += n;
        ask(worker, "exit", vec![])?;
    }
    for worker in workers.0.values_mut() {
        worker.child.wait().map_err(|e| Error::os("waitpid", e))?;
    }
    workers.0.clear();

    // 7. Measure what is left.
    let leftover_sweep = shmrc::sweep(ns)?;
    ledger
        .entry(Strategy::FileSystem.name())
        .or_default()
        .unlinked += leftover_sweep.unlinked;
    ledger
        .entry(Strategy::FileSystem.name())
        .or_default()
        .leaked = names_in_dev_shm(ns)?.len();
    ledger
        .entry(Strategy::FileDescriptor.name())
        .or_default()
        .leaked = open_memfds();

    println!("\n[7] ledger");
    let mut table = Table::new([
        "strategy",
        "created",
        "attached",
        "refs killed",
        "reclaimed",
        "unlinked",
        "leaked",
    ]);
    let mut leaked = 0;
    for (name, row) in &ledger {
        let fd = *name == Strategy::FileDescriptor.name();
        table.row([
            name.to_string(),
            row.created.to_string(),
            row.attached.to_string(),
            row.refs_killed.to_string(),
            if fd {
                "by kernel".into()
            } else {
                row.reclaimed.to_string()
            },
            if fd {
                "n/a (no name)".into()
            } else {
                row.unlinked.to_string()
            },
            row.leaked.to_string(),
        ]);
        leaked += row.leaked;
    }
    table.print();
    println!("leaked = {leaked}");
    if leaked > 0 {
        return Err(Error::InvalidArgument(format!(
            "{leaked} segment(s) leaked"
        )));
    }
    Ok(())
}

fn start_workers(socket: &PathBuf, count: u32) -> Result<Workers> {
    let listener = UnixListener::bind(socket).map_err(|e| Error::os("bind", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::os("fcntl", e))?;
    let exe = std::env::current_exe().map_err(|e| Error::os("current_exe", e))?;
    let mut children = Vec::new();
    let mut workers = Workers(BTreeMap::new());
    for id in 0..count {
        let child = Command::new(&exe)
            .args(["worker", "--socket"])
            .arg(socket)
            .args(["--id", &id.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| Error::os("spawn", e))?;
        children.push(child);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut streams = BTreeMap::new();
    while streams.len() < count as usize {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| Error::os("fcntl", e))?;
                let hello = transport::recv(&stream)?;
                let text = String::from_utf8_lossy(&hello.payload).into_owned();
                let id: u32 = text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| Error::InvalidArgument(format!("bad hello {text:?}")))?;
                streams.insert(id, stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(Error::os("accept", e));
            }
        }
    }
    for (id, child) in children.into_iter().enumerate() {
        let stream = streams
            .remove(&(id as u32))
            .expect("every worker said hello");
        workers.0.insert(id as u32, Worker { child, stream });
    }
    Ok(workers)
}

/// Creates a file_system buffer, hands it to `worker` and drops this process's
/// reference: only the worker holds it. Returns its name.
fn own_segment(worker: &Worker, ns: &Namespace, size: usize) -> Result<String> {
    let options = CreateOptions::new()
        .namespace(ns.clone())
        .strategy(Strategy::FileSystem);
    let buf = ShmBuf::with_options(size, &options)?;
    let name = buf.name().unwrap_or_default().to_owned();
    let sum = checksum(&buf)?;
    ask(worker, &format!("hold {sum}"), vec![buf.share()?])?;
    buf.release()?;
    Ok(name)
}

/// Waits (at most 5 s) until the manager's sweep has unlinked `own`, the dead worker's
/// own segment, and books what the manager reclaimed and unlinked since `before`.
fn watch_manager_sweep(
    ns: &Namespace,
    own: &str,
    killed_at: Instant,
    before: &shmrc::manager::ManagerStatus,
    ledger: &mut BTreeMap<&str, Row>,
) -> Result<()> {
    let deadline = killed_at + Duration::from_secs(5);
    while names_in_dev_shm(ns)?.iter().any(|n| n == own) {
        if Instant::now() >= deadline {
            println!(
                "    the manager (pid {}) has not unlinked it within 5 s",
                before.pid
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let seen_after = killed_at.elapsed();
    let after = shmrc::manager::status()?;
    let reclaimed = after.reclaimed.saturating_sub(before.reclaimed);
    let unlinked = after.unlinked.saturating_sub(before.unlinked);
    println!(
        "    the manager (pid {}) swept on its death: {own} was gone {:.1} ms after the \
         SIGKILL; it reclaimed {reclaimed} dead slot(s) and unlinked {unlinked} segment(s)",
        after.pid,
        seen_after.as_secs_f64() * 1e3
    );
    let fs = ledger.entry(Strategy::FileSystem.name()).or_default();
    fs.reclaimed += u32::try_from(reclaimed).unwrap_or(u32::MAX);
    fs.unlinked += u32::try_from(unlinked).unwrap_or(u32::MAX);
    Ok(())
}

/// Sends a command (with handles) and waits for the reply; an `error` reply is an error.
fn ask(worker: &Worker, command: &str, handles: Vec<ShareHandle>) -> Result<String> {
    transport::send(&worker.stream, command.as_bytes(), handles)?;
    let reply = String::from_utf8_lossy(&transport::recv(&worker.stream)?.payload).into_owned();
    match reply.strip_prefix("error ") {
        Some(e) => Err(Error::InvalidArgument(format!("worker: {e}"))),
        None => Ok(reply),
    }
}

/// memfds of shmrc this process still has open.
fn open_memfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("/memfd:shmrc"))
                .count()
        })
        .unwrap_or(0)
}

/// The names in `/dev/shm` of namespace `ns` for this user, read from the directory
/// itself (not through shmrc's sweep, which the demo checks).
fn names_in_dev_shm(ns: &Namespace) -> Result<Vec<String>> {
    let start = ns.name_start(nix::unistd::geteuid().as_raw());
    let entries = std::fs::read_dir("/dev/shm").map_err(|e| Error::os("reading /dev/shm", e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&start))
        .collect())
}
