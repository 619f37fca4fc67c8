//! A worker pool where one worker is SIGKILLed while it holds buffers, and nothing
//! leaks. The parent shares file_system buffers with three workers (each worker holds
//! every buffer it is sent), kills one, and the survivors keep working on the same
//! buffers. The dead worker's references are reclaimed while the job runs (here by
//! `shmrc::sweep`; the manager does it within milliseconds when it is on), and once
//! everyone lets go, every segment is unlinked.
//!
//! `cargo run --example worker_pool --features channel`

use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, Receiver, Sender};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};

const WORKERS: usize = 3;
const BUFFERS: usize = 6;

#[derive(Serialize, Deserialize)]
enum Job {
    /// Keep this buffer and report its checksum.
    Hold(ShmBuf),
    /// Release everything and exit.
    Stop,
}

type Worker = (Child, Sender<Job>, Receiver<u64>);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This example sweeps by itself to show the reclaim; a real job leaves the manager on.
    set_manager_mode(ManagerMode::Off);
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return worker();
    }
    let ns = Namespace::new(format!("shmrc-example-pool-{}", std::process::id()))?;
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());
    let buffers: Vec<ShmBuf> = (0..BUFFERS)
        .map(|i| {
            let buf = ShmBuf::with_options(64 * 1024, &options)?;
            buf.write_items(0, &[i as u64 + 1; 8])?;
            Ok(buf)
        })
        .collect::<shmrc::Result<_>>()?;

    let mut pool: Vec<Worker> = (0..WORKERS)
        .map(|_| {
            let mut command = Command::new(std::env::current_exe()?);
            command.arg("worker").env("SHMRC_MANAGER", "off");
            Ok(channel::spawn(&mut command)?)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;

    // Every worker holds every buffer.
    for (_, to_worker, from_worker) in &pool {
        for (i, buf) in buffers.iter().enumerate() {
            to_worker.send(&Job::Hold(buf.clone()))?;
            assert_eq!(
                from_worker.recv_timeout(Duration::from_secs(30))?,
                8 * (i as u64 + 1)
            );
        }
    }
    let holders = |buf: &ShmBuf| buf.census().map(|c| (c.live, c.dead)).unwrap_or_default();
    println!(
        "each buffer is held by this process and {WORKERS} workers: {:?} (live, dead)",
        holders(&buffers[0])
    );

    // SIGKILL worker 0 while it holds all six buffers. Its channel stays open until it
    // is dead: closed first, the worker would see `Disconnected`, exit and release its
    // buffers itself before the kill lands.
    let (mut victim, to_victim, from_victim) = pool.remove(0);
    victim.kill()?;
    victim.wait()?;
    drop((to_victim, from_victim));
    println!("worker 0 SIGKILLed: {:?}", holders(&buffers[0]));
    let swept = shmrc::sweep(&ns)?;
    println!(
        "sweep reclaimed {} slots of the dead worker while the job runs: {:?}",
        swept.reclaimed,
        holders(&buffers[0])
    );
    assert_eq!(swept.reclaimed as usize, BUFFERS);

    // The survivors still work on the same memory.
    buffers[0].write_items(0, &[100u64; 8])?;
    for (_, to_worker, from_worker) in &pool {
        to_worker.send(&Job::Hold(buffers[0].clone()))?;
        assert_eq!(from_worker.recv_timeout(Duration::from_secs(30))?, 800);
    }
    for (mut child, to_worker, _) in pool {
        to_worker.send(&Job::Stop)?;
        assert!(child.wait()?.success());
    }
    drop(buffers);
    let left = shmrc::inspect(&ns)?.segments.len();
    println!("all released: {left} segments left in /dev/shm");
    assert_eq!(left, 0);
    Ok(())
}

/// A worker: holds every buffer it is given, answers with the sum of its first 8
/// numbers.
fn worker() -> Result<(), Box<dyn std::error::Error>> {
    let (to_parent, jobs) = channel::from_parent::<u64, Job>()?;
    let mut held = Vec::new();
    loop {
        match jobs.recv()? {
            Job::Hold(buf) => {
                let mut numbers = [0u64; 8];
                buf.read_items(0, &mut numbers)?;
                to_parent.send(&numbers.iter().sum())?;
                held.push(buf);
            }
            Job::Stop => return Ok(()),
        }
    }
}
