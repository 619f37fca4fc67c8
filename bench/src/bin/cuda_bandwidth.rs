//! Device-to-device bandwidth through shmrc's CUDA sharing, against the same copy in
//! one process, measured in the same run (docs/CUDA.md reports the figures).
//!
//! The producer (this process) allocates a source buffer and shares it with a consumer
//! process (this binary re-executed), once per handle kind the device has: a legacy IPC
//! handle and a POSIX-fd (VMM) allocation, both sent with `shmrc::cuda::transport`. The
//! consumer does `--iters` device-to-device copies from the mapped buffer into one of
//! its own (`cuMemcpyDtoD`, then one `cuCtxSynchronize`), checks the bytes, and
//! reports. The baseline is the same copy loop between two buffers of the producer.
//! Ratios are IPC / in-process.
//!
//! Attach times are measured as `bench/cuda_ipc_torch.py` measures torch's, so the two
//! compare: in `--rounds` fresh consumer processes, each with its CUDA context made and
//! the message (1 + `--warm` handles of as many buffers of `--mib` MiB) arrived before
//! the clock starts; the first attach in a process is the "first" figure, the others
//! the "warm" ones; each is timed alone and the bytes checked after.
//!
//! ```text
//! cuda_bandwidth [--fake] [--mib N] [--iters N] [--rounds N] [--warm N] [--json PATH]
//! ```
//! Without `--fake` it needs an NVIDIA GPU and exits with status 2 when there is none.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use shmrc::cuda::{
    AnyBuf, CudaDevice, DeviceAllocator, DriverAllocator, HandleKind, VmmAllocator, transport,
};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, Error, Namespace};

const ROLE: &str = "SHMRC_BENCH_CUDA_ROLE";
const SOCKET: &str = "SHMRC_BENCH_CUDA_SOCKET";
const NAMESPACE: &str = "shmrc-bench-cuda";
const FAKE_PREFIX: &str = "shmrc-bench-cuda-dev";
/// Bytes checked after the copies (the start of the buffer).
const CHECKED: usize = 1 << 20;

#[derive(Clone, Debug)]
struct Options {
    fake: bool,
    bytes: usize,
    iters: u32,
    /// Consumer processes timing attaches.
    rounds: u32,
    /// Attaches after the first in each of them.
    warm: u32,
    json: Option<String>,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        fake: false,
        bytes: 256 << 20,
        iters: 20,
        rounds: 5,
        warm: 4,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--fake" => options.fake = true,
            "--mib" => {
                let mib: usize = value("--mib")?.parse().map_err(|e| format!("--mib: {e}"))?;
                options.bytes = mib.max(1) << 20;
            }
            "--iters" => {
                options.iters = value("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?;
            }
            "--rounds" => {
                options.rounds = value("--rounds")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?;
            }
            "--warm" => {
                options.warm = value("--warm")?
                    .parse()
                    .map_err(|e| format!("--warm: {e}"))?;
            }
            "--json" => options.json = Some(value("--json")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    options.iters = options.iters.max(1);
    options.rounds = options.rounds.max(1);
    Ok(options)
}

fn device(fake: bool, bytes: usize) -> shmrc::Result<CudaDevice> {
    let keepalive = CreateOptions::new().namespace(Namespace::new(NAMESPACE)?);
    if fake {
        // Room for the attach rounds' buffers (1 + warm, at most 64) and two more per
        // process, rounded to the fake's 2 MiB granularity.
        let total = 80 * (bytes as u64).next_multiple_of(2 << 20);
        CudaDevice::fake(FAKE_PREFIX, total, &keepalive)
    } else {
        CudaDevice::real(0, &keepalive)
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// Seconds for `iters` copies of `bytes` from `src` to `dst` (both on `device`), after
/// one warm-up copy.
fn time_copies(
    device: &CudaDevice,
    dst: shmrc::cuda::DevicePtr,
    src: shmrc::cuda::DevicePtr,
    bytes: usize,
    iters: u32,
) -> shmrc::Result<f64> {
    let driver = device.driver();
    driver.copy_on_device(dst, src, bytes)?;
    driver.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        driver.copy_on_device(dst, src, bytes)?;
    }
    driver.synchronize()?;
    Ok(start.elapsed().as_secs_f64())
}

fn gbps(bytes: usize, iters: u32, seconds: f64) -> f64 {
    bytes as f64 * f64::from(iters) / seconds / 1e9
}

/// The consumer process. Its device (the CUDA context) is made first, then the
/// message is received whole, and only then a clock runs. Role `copies`: one handle,
/// times the copies, prints `seconds ok`. Role `attach`: times each attach of the
/// handles alone, checks each buffer's head after, prints `ok us us ...`.
fn consumer(options: &Options, role: &str) -> shmrc::Result<()> {
    let socket = UnixStream::connect(std::env::var(SOCKET).expect("socket path"))
        .map_err(|e| Error::os("connect", e))?;
    let device = device(options.fake, options.bytes)?;
    device.set_allocator(Arc::new(DriverAllocator::new(Arc::clone(device.driver()))));
    let message = transport::recv(&socket)?;
    let mut views = Vec::new();
    let mut attach_us = Vec::new();
    for handle in message.handles {
        let start = Instant::now();
        let AnyBuf::Cuda(view) = handle.attach(std::slice::from_ref(&device))? else {
            return Err(Error::InvalidArgument("a host buffer arrived".into()));
        };
        attach_us.push(start.elapsed().as_secs_f64() * 1e6);
        views.push(view);
    }
    let checked = CHECKED.min(options.bytes);
    let mut head = vec![0u8; checked];
    if role == "attach" {
        let mut ok = !views.is_empty();
        for view in &views {
            view.read_at(0, &mut head)?;
            ok &= head == pattern(checked);
        }
        let times: Vec<String> = attach_us.iter().map(|us| format!("{us:.1}")).collect();
        println!("{ok} {}", times.join(" "));
        return Ok(());
    }
    let view = views.pop().ok_or(Error::Disconnected)?;
    let own = device.alloc(options.bytes)?;
    let seconds = time_copies(&device, own.ptr(), view.ptr(), options.bytes, options.iters)?;
    own.read_at(0, &mut head)?;
    let ok = head == pattern(checked);
    println!("{seconds} {ok}");
    Ok(())
}

/// Makes `producer` share its buffers as `kind`.
fn share_as(producer: &CudaDevice, kind: HandleKind) -> Result<(), String> {
    let driver = Arc::clone(producer.driver());
    let allocator: Arc<dyn DeviceAllocator> = match kind {
        HandleKind::LegacyIpc => Arc::new(DriverAllocator::new(driver)),
        HandleKind::PosixFd => Arc::new(VmmAllocator::new(driver).map_err(|e| e.to_string())?),
    };
    producer.set_allocator(allocator);
    Ok(())
}

/// Runs one consumer process in `role`: allocates `count` source buffers of `kind`
/// (the pattern at their head), sends them in one message, and returns the words of
/// the consumer's answer.
fn with_consumer(
    options: &Options,
    producer: &CudaDevice,
    kind: HandleKind,
    role: &str,
    count: u32,
) -> Result<Vec<String>, String> {
    share_as(producer, kind)?;
    let mut sources = Vec::new();
    for _ in 0..count {
        let src = producer.alloc(options.bytes).map_err(|e| e.to_string())?;
        src.write_at(0, &pattern(CHECKED.min(options.bytes)))
            .map_err(|e| e.to_string())?;
        sources.push(src);
    }
    let dir = std::env::temp_dir().join(format!("shmrc-bench-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("consumer.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| e.to_string())?;
    let mut child = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(std::env::args().skip(1))
        .env(ROLE, role)
        .env(SOCKET, &path)
        .env("SHMRC_MANAGER", "off")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let socket = match accept_or_exit(&listener, &mut child) {
        Ok(socket) => socket,
        Err(e) => {
            // Ours to end: it never connected.
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let handles = sources
        .iter()
        .map(|src| src.share().map(Into::into))
        .collect::<shmrc::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    transport::send(&socket, b"", handles).map_err(|e| e.to_string())?;
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    stdout.read_line(&mut line).map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    drop(sources);
    producer.collect();
    if !status.success() {
        return Err(format!("the {role} consumer failed ({status}): {line:?}"));
    }
    Ok(line.split_whitespace().map(str::to_owned).collect())
}

/// Seconds of the consumer's copies from a buffer shared as `kind`.
fn through_ipc(options: &Options, producer: &CudaDevice, kind: HandleKind) -> Result<f64, String> {
    let words = with_consumer(options, producer, kind, "copies", 1)?;
    match words.as_slice() {
        [seconds, ok] if ok == "true" => seconds.parse().map_err(|e| format!("{e}")),
        [_, _] => Err("the consumer read wrong bytes".into()),
        _ => Err(format!("the consumer answered {words:?}")),
    }
}

/// First and warm attach times (µs) of buffers shared as `kind`, over the rounds.
fn attach_times(
    options: &Options,
    producer: &CudaDevice,
    kind: HandleKind,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let (mut first, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        let words = with_consumer(options, producer, kind, "attach", 1 + options.warm.min(63))?;
        let Some((ok, times)) = words.split_first() else {
            return Err("the attach consumer said nothing".into());
        };
        if ok != "true" {
            return Err(format!("an attached buffer had wrong bytes: {words:?}"));
        }
        let times: Vec<f64> = times
            .iter()
            .map(|t| t.parse().map_err(|e| format!("{e}")))
            .collect::<Result<_, String>>()?;
        first.push(times[0]);
        warm.extend_from_slice(&times[1..]);
    }
    Ok((first, warm))
}

/// `{median, min, max, n}` of `values` (null when there are none).
fn summary(values: &[f64]) -> serde_json::Value {
    if values.is_empty() {
        return serde_json::Value::Null;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    serde_json::json!({"median": median, "min": sorted[0], "max": sorted[n - 1], "n": n})
}

/// `median (min-max)` of a [`summary`], or `-`.
fn show(summary: &serde_json::Value) -> String {
    match (
        summary["median"].as_f64(),
        summary["min"].as_f64(),
        summary["max"].as_f64(),
    ) {
        (Some(median), Some(min), Some(max)) => format!("{median:.0} ({min:.0}-{max:.0})"),
        _ => "-".into(),
    }
}

/// The consumer's connection; an error if it exits first or takes over a minute.
fn accept_or_exit(listener: &UnixListener, child: &mut Child) -> Result<UnixStream, String> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(100u16)).map_err(|e| e.to_string())? > 0 {
            return listener.accept().map(|(s, _)| s).map_err(|e| e.to_string());
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("the consumer exited before connecting ({status})"));
        }
    }
    Err("the consumer did not connect within 60 s".into())
}

fn main() -> ExitCode {
    set_manager_mode(ManagerMode::Off);
    let options = match parse() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("cuda_bandwidth: {e}");
            return ExitCode::from(64);
        }
    };
    if let Ok(role) = std::env::var(ROLE) {
        return match consumer(&options, &role) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cuda_bandwidth consumer: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let producer = match device(options.fake, options.bytes) {
        Ok(device) => device,
        Err(Error::CudaUnavailable { reason }) => {
            eprintln!(
                "cuda_bandwidth: no usable NVIDIA GPU ({reason}); --fake runs on the fake driver"
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cuda_bandwidth: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&options, &producer) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuda_bandwidth: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options, producer: &CudaDevice) -> Result<(), String> {
    let driver = producer.driver();
    let id = driver.device().map_err(|e| e.to_string())?;
    let (bytes, iters) = (options.bytes, options.iters);
    producer.set_allocator(Arc::new(DriverAllocator::new(Arc::clone(driver))));
    let (a, b) = (
        producer.alloc(bytes).map_err(|e| e.to_string())?,
        producer.alloc(bytes).map_err(|e| e.to_string())?,
    );
    let local = time_copies(producer, b.ptr(), a.ptr(), bytes, iters).map_err(|e| e.to_string())?;
    drop((a, b));
    let baseline = gbps(bytes, iters, local);
    let mut rows = vec![serde_json::json!({
        "path": "in_process", "gbps": baseline, "ratio": 1.0,
        "attach_first_us": null, "attach_warm_us": null,
    })];
    let mut kinds = vec![HandleKind::LegacyIpc];
    if driver.supports_posix_fd().map_err(|e| e.to_string())? {
        kinds.push(HandleKind::PosixFd);
    }
    for kind in kinds {
        let seconds = through_ipc(options, producer, kind)?;
        let rate = gbps(bytes, iters, seconds);
        let (first, warm) = attach_times(options, producer, kind)?;
        rows.push(serde_json::json!({
            "path": format!("ipc_{kind}"), "gbps": rate, "ratio": rate / baseline,
            "attach_first_us": summary(&first), "attach_warm_us": summary(&warm),
        }));
    }
    producer.collect();
    let report = serde_json::json!({
        "device": if options.fake { "fake driver".to_owned() } else { format!("cuda:{} uuid {}", id.ordinal, hex::encode(id.uuid)) },
        "bytes": bytes, "iters": iters, "rounds": options.rounds, "warm": options.warm,
        "attach_measured": "context ready and the message arrived before the clock",
        "rows": rows,
    });
    println!(
        "device-to-device copies of {} MiB x {iters} ({})",
        bytes >> 20,
        report["device"].as_str().unwrap_or("?")
    );
    println!(
        "attach: {} consumer processes, each with its context made and the message arrived \
         before the clock; first = its first attach, warm = the {} after (µs, median (min-max))",
        options.rounds, options.warm
    );
    println!(
        "{:<16} {:>10} {:>8} {:>22} {:>22}",
        "path", "GB/s", "ratio", "attach first µs", "attach warm µs"
    );
    for row in &rows {
        println!(
            "{:<16} {:>10.2} {:>8.3} {:>22} {:>22}",
            row["path"].as_str().unwrap_or("?"),
            row["gbps"].as_f64().unwrap_or(0.0),
            row["ratio"].as_f64().unwrap_or(0.0),
            show(&row["attach_first_us"]),
            show(&row["attach_warm_us"]),
        );
    }
    if let Some(path) = &options.json {
        let mut file = std::fs::File::create(path).map_err(|e| e.to_string())?;
        writeln!(file, "{report:#}").map_err(|e| e.to_string())?;
    }
    Ok(())
}
