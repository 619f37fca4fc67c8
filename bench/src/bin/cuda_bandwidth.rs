//! Device-to-device bandwidth through shmrc's CUDA sharing, against the same copy in
//! one process, measured in the same run (docs/CUDA.md reports the figures).
//!
//! The producer (this process) allocates a source buffer and shares it with a consumer
//! process (this binary re-executed), once per handle kind the device has: a legacy IPC
//! handle and a POSIX-fd (VMM) allocation, both sent with `shmrc::cuda::transport`. The
//! consumer times its attach, then `--iters` device-to-device copies from the mapped
//! buffer into one of its own (`cuMemcpyDtoD`, then one `cuCtxSynchronize`), checks the
//! bytes, and reports. The baseline is the same copy loop between two buffers of the
//! producer. Ratios are IPC / in-process.
//!
//! ```text
//! cuda_bandwidth [--fake] [--mib N] [--iters N] [--json PATH]
//! ```
//! Without `--fake` it needs an NVIDIA GPU and exits with status 2 when there is none.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

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
    json: Option<String>,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        fake: false,
        bytes: 256 << 20,
        iters: 20,
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
            "--json" => options.json = Some(value("--json")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    options.iters = options.iters.max(1);
    Ok(options)
}

fn device(fake: bool, bytes: usize) -> shmrc::Result<CudaDevice> {
    let keepalive = CreateOptions::new().namespace(Namespace::new(NAMESPACE)?);
    if fake {
        // Room for two buffers per process, rounded to the fake's 2 MiB granularity.
        let total = 4 * (bytes as u64).next_multiple_of(2 << 20);
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

/// The consumer process: receives one handle, times the attach and the copies, checks
/// the bytes, prints one line `attach_us seconds ok`.
fn consumer(options: &Options) -> shmrc::Result<()> {
    let socket = UnixStream::connect(std::env::var(SOCKET).expect("socket path"))
        .map_err(|e| Error::os("connect", e))?;
    let device = device(options.fake, options.bytes)?;
    device.set_allocator(Arc::new(DriverAllocator::new(Arc::clone(device.driver()))));
    let mut message = transport::recv(&socket)?;
    let handle = message.handles.pop().ok_or(Error::Disconnected)?;
    let start = Instant::now();
    let AnyBuf::Cuda(view) = handle.attach(std::slice::from_ref(&device))? else {
        return Err(Error::InvalidArgument("a host buffer arrived".into()));
    };
    let attach = start.elapsed();
    let own = device.alloc(options.bytes)?;
    let seconds = time_copies(&device, own.ptr(), view.ptr(), options.bytes, options.iters)?;
    let mut head = vec![0u8; CHECKED.min(options.bytes)];
    own.read_at(0, &mut head)?;
    let ok = head == pattern(head.len());
    println!("{} {seconds} {ok}", attach.as_micros());
    Ok(())
}

/// One IPC measurement: share a source buffer of `kind` with a fresh consumer process.
fn through_ipc(
    options: &Options,
    producer: &CudaDevice,
    kind: HandleKind,
) -> Result<(f64, u128), String> {
    let driver = Arc::clone(producer.driver());
    let allocator: Arc<dyn DeviceAllocator> = match kind {
        HandleKind::LegacyIpc => Arc::new(DriverAllocator::new(driver)),
        HandleKind::PosixFd => Arc::new(VmmAllocator::new(driver).map_err(|e| e.to_string())?),
    };
    producer.set_allocator(allocator);
    let src = producer.alloc(options.bytes).map_err(|e| e.to_string())?;
    src.write_at(0, &pattern(CHECKED.min(options.bytes)))
        .map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("shmrc-bench-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("consumer.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| e.to_string())?;
    let mut child = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(std::env::args().skip(1))
        .env(ROLE, "consumer")
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
    let handle = src.share().map_err(|e| e.to_string())?;
    transport::send(&socket, b"", vec![handle.into()]).map_err(|e| e.to_string())?;
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    stdout.read_line(&mut line).map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let fields: Vec<&str> = line.split_whitespace().collect();
    match (status.success(), fields.as_slice()) {
        (true, [attach, seconds, "true"]) => Ok((
            seconds.parse().map_err(|e| format!("{e}"))?,
            attach.parse().map_err(|e| format!("{e}"))?,
        )),
        (true, [_, _, "false"]) => Err("the consumer read wrong bytes".into()),
        _ => Err(format!("the consumer failed ({status}): {line:?}")),
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
    if std::env::var_os(ROLE).is_some() {
        return match consumer(&options) {
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
        "path": "in_process", "gbps": baseline, "ratio": 1.0, "attach_us": null,
    })];
    let mut kinds = vec![HandleKind::LegacyIpc];
    if driver.supports_posix_fd().map_err(|e| e.to_string())? {
        kinds.push(HandleKind::PosixFd);
    }
    for kind in kinds {
        let (seconds, attach_us) = through_ipc(options, producer, kind)?;
        let rate = gbps(bytes, iters, seconds);
        rows.push(serde_json::json!({
            "path": format!("ipc_{kind}"), "gbps": rate, "ratio": rate / baseline,
            "attach_us": attach_us,
        }));
    }
    producer.collect();
    let report = serde_json::json!({
        "device": if options.fake { "fake driver".to_owned() } else { format!("cuda:{} uuid {}", id.ordinal, hex::encode(id.uuid)) },
        "bytes": bytes, "iters": iters, "rows": rows,
    });
    println!(
        "device-to-device copies of {} MiB x {iters} ({})",
        bytes >> 20,
        report["device"].as_str().unwrap_or("?")
    );
    println!(
        "{:<16} {:>10} {:>8} {:>10}",
        "path", "GB/s", "ratio", "attach µs"
    );
    for row in &rows {
        println!(
            "{:<16} {:>10.2} {:>8.3} {:>10}",
            row["path"].as_str().unwrap_or("?"),
            row["gbps"].as_f64().unwrap_or(0.0),
            row["ratio"].as_f64().unwrap_or(0.0),
            row["attach_us"]
                .as_u64()
                .map_or("-".into(), |v| v.to_string()),
        );
    }
    if let Some(path) = &options.json {
        let mut file = std::fs::File::create(path).map_err(|e| e.to_string())?;
        writeln!(file, "{report:#}").map_err(|e| e.to_string())?;
    }
    Ok(())
}
