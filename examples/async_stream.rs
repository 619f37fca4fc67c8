//! Several worker processes' results as one async `Stream`: a tokio collector starts
//! three workers, turns each one's receiver into an `AsyncReceiver` (a
//! `futures_core::Stream`) and merges them with `tokio_stream::StreamMap`. Each worker
//! streams its chunks of results as frozen buffers (zero-copy: the collector reads the
//! worker's memory as `&[u64]`). One worker is SIGKILLed after its second chunk: its
//! stream just ends, and the others' keep coming on the same runtime.
//!
//! `cargo run --example async_stream --features tokio`

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, AsyncReceiver, Sender};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{FrozenBuf, ShmBufMut};
use tokio_stream::{StreamExt, StreamMap};

const WORKERS: u32 = 3;
const CHUNKS: u32 = 6;
const LEN: usize = 4096;
/// The worker that is SIGKILLed once its second chunk arrived.
const VICTIM: u32 = 1;
const VICTIM_CHUNKS: u32 = 2;
const LIMIT: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize)]
struct Chunk {
    worker: u32,
    number: u32,
    /// `LEN` squares, of `number * LEN ..`.
    squares: FrozenBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This example needs no sweeping (frozen buffers are memfds); a real job leaves the
    // manager on.
    set_manager_mode(ManagerMode::Off);
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return worker();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(collect())
}

async fn collect() -> Result<(), Box<dyn std::error::Error>> {
    let mut merged = StreamMap::new();
    // Each worker's process, and the sender it never reads (kept so that it waits).
    let mut workers: HashMap<u32, (Child, Sender<()>)> = HashMap::new();
    for worker in 0..WORKERS {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("worker")
            .env("WORKER", worker.to_string())
            .env("SHMRC_MANAGER", "off");
        let (child, to_worker, chunks) = channel::spawn::<(), Chunk>(&mut command)?;
        merged.insert(worker, AsyncReceiver::new(chunks)?);
        workers.insert(worker, (child, to_worker));
    }
    let outcome = tokio::time::timeout(LIMIT, receive_all(&mut merged, &mut workers)).await;
    // Whatever happened, no worker outlives the example.
    let mut statuses = HashMap::new();
    for (worker, (mut child, _)) in workers {
        if outcome.is_err() {
            let _ = child.kill();
        }
        statuses.insert(worker, child.wait()?);
    }
    let received = outcome.map_err(|_| "the workers did not finish in time")??;
    for worker in 0..WORKERS {
        let expected = if worker == VICTIM {
            VICTIM_CHUNKS
        } else {
            CHUNKS
        };
        println!(
            "worker {worker}: {} chunks, {}",
            received[&worker], statuses[&worker]
        );
        if received[&worker] != expected {
            return Err(format!(
                "worker {worker}: {} chunks, not {expected}",
                received[&worker]
            )
            .into());
        }
        if (worker != VICTIM) != statuses[&worker].success() {
            return Err(format!("worker {worker} ended as {}", statuses[&worker]).into());
        }
    }
    println!("every stream ended; the killed worker's ended early, the others' were whole");
    Ok(())
}

/// Reads the merged stream to its end: every chunk checked, the victim killed after its
/// second. Returns how many chunks each worker sent.
async fn receive_all(
    merged: &mut StreamMap<u32, AsyncReceiver<Chunk>>,
    workers: &mut HashMap<u32, (Child, Sender<()>)>,
) -> Result<HashMap<u32, u32>, Box<dyn std::error::Error>> {
    let mut received: HashMap<u32, u32> = (0..WORKERS).map(|w| (w, 0)).collect();
    // A worker's stream ends (leaves the map) when its process is gone.
    while let Some((worker, chunk)) = merged.next().await {
        let chunk = chunk?;
        let squares = chunk.squares.cast::<u64>()?;
        let first = u64::from(chunk.number) * LEN as u64;
        if chunk.worker != worker
            || squares.len() != LEN
            || squares.iter().zip(first..).any(|(s, n)| *s != n * n)
        {
            return Err(format!("worker {worker}: chunk {} is wrong", chunk.number).into());
        }
        let count = received.entry(worker).or_default();
        *count += 1;
        if worker == VICTIM && *count == VICTIM_CHUNKS {
            workers.get_mut(&worker).ok_or("no such worker")?.0.kill()?;
            println!("worker {worker} SIGKILLed after chunk {}", chunk.number);
        }
    }
    Ok(received)
}

/// A worker: streams its chunks; the victim sends two, then waits to be killed.
fn worker() -> Result<(), Box<dyn std::error::Error>> {
    let worker: u32 = std::env::var("WORKER")?.parse()?;
    let (chunks, from_collector) = channel::from_parent::<Chunk, ()>()?;
    let count = if worker == VICTIM {
        VICTIM_CHUNKS
    } else {
        CHUNKS
    };
    for number in 0..count {
        let mut squares = ShmBufMut::new(LEN * size_of::<u64>())?;
        let first = u64::from(number) * LEN as u64;
        for (out, n) in squares.cast_mut::<u64>()?.iter_mut().zip(first..) {
            *out = n * n;
        }
        chunks.send(&Chunk {
            worker,
            number,
            squares: squares.freeze()?,
        })?;
        std::thread::sleep(Duration::from_millis(5));
    }
    if worker == VICTIM {
        // The collector never sends: this waits until the SIGKILL.
        let _ = from_collector.recv();
        return Err("the victim was not killed".into());
    }
    Ok(())
}
