//! A data loader: the parent makes 16 batches of f32 features, freezes each (sealed
//! against writes), and streams them to two worker processes over shmrc channels. One
//! worker is SIGKILLed part-way; the other keeps going, and the killed worker's
//! batches are handed to the survivor. Readers need no `unsafe`: a frozen buffer is a
//! plain `&[f32]`. Nothing leaks: frozen buffers are memfds the kernel frees with
//! their last holder, killed or not.
//!
//! `cargo run --example data_loader --features channel`

use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, Receiver, Sender};
use shmrc::{FrozenBuf, ShmBufMut};

const BATCHES: usize = 16;
const ROWS: usize = 64;
const COLS: usize = 256;

/// One batch: its index, shape, and the features (out of band, zero-copy).
#[derive(Serialize, Deserialize)]
struct Batch {
    index: usize,
    shape: [usize; 2],
    features: FrozenBuf,
}

/// A worker's answer: the batch index and the sum of its features.
#[derive(Serialize, Deserialize)]
struct Done {
    worker: u32,
    index: usize,
    sum: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return worker();
    }
    let batches: Vec<FrozenBuf> = (0..BATCHES).map(make_batch).collect::<Result<_, _>>()?;
    let expected: Vec<f64> = batches.iter().map(sum).collect::<Result<_, _>>()?;

    let mut workers: Vec<(Child, Sender<Batch>, Receiver<Done>)> = Vec::new();
    for id in 0..2 {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("worker").env("WORKER_ID", id.to_string());
        workers.push(channel::spawn(&mut command)?);
    }

    // Deal the batches round-robin, then kill worker 1 before it answers all of them.
    for (index, features) in batches.iter().enumerate() {
        let (_, to_worker, _) = &workers[index % 2];
        to_worker.send(&Batch {
            index,
            shape: [ROWS, COLS],
            features: features.clone(),
        })?;
    }
    let (_, _, from_1) = &workers[1];
    let first = from_1.recv_timeout(Duration::from_secs(30))?;
    let mut done = vec![None; BATCHES];
    done[first.index] = Some(first.sum);
    // Its channel stays open until it is dead (closed first, it could see the end of the
    // stream and exit by itself before the kill lands).
    let (mut victim, to_1, from_1) = workers.pop().expect("two workers");
    victim.kill()?; // SIGKILL, by pid: a child of ours
    victim.wait()?;
    drop((to_1, from_1));
    println!("worker 1 SIGKILLed after answering batch {}", first.index);

    // Worker 0 answers its own batches, and takes over the ones worker 1 never did.
    let (mut survivor, to_0, from_0) = workers.pop().expect("two workers");
    for _ in 0..BATCHES / 2 {
        let answer = from_0.recv_timeout(Duration::from_secs(30))?;
        done[answer.index] = Some(answer.sum);
    }
    let missing: Vec<usize> = (0..BATCHES).filter(|i| done[*i].is_none()).collect();
    for &index in &missing {
        to_0.send(&Batch {
            index,
            shape: [ROWS, COLS],
            features: batches[index].clone(),
        })?;
    }
    for _ in &missing {
        let answer = from_0.recv_timeout(Duration::from_secs(30))?;
        assert_eq!(answer.worker, 0);
        done[answer.index] = Some(answer.sum);
    }
    drop((to_0, from_0)); // the worker sees the end of the stream and exits
    assert!(survivor.wait()?.success());

    for (index, (got, want)) in done.iter().zip(&expected).enumerate() {
        assert_eq!(*got, Some(*want), "batch {index}");
    }
    println!(
        "{BATCHES} batches of {ROWS}x{COLS} f32 summed by 2 workers ({} re-sent after the kill): all correct",
        missing.len()
    );
    Ok(())
}

/// Batch `index`: written through `&mut [f32]` while nobody else can see it, then
/// frozen (sealed against writes for good).
fn make_batch(index: usize) -> shmrc::Result<FrozenBuf> {
    let mut buf = ShmBufMut::new(ROWS * COLS * size_of::<f32>())?;
    for (i, x) in buf.cast_mut::<f32>()?.iter_mut().enumerate() {
        *x = (index * 1000 + i % 977) as f32 * 0.25;
    }
    Ok(buf.freeze()?)
}

fn sum(features: &FrozenBuf) -> shmrc::Result<f64> {
    Ok(features.cast::<f32>()?.iter().map(|&x| f64::from(x)).sum())
}

/// The worker: sums each batch it receives, zero-copy, with no `unsafe`.
fn worker() -> Result<(), Box<dyn std::error::Error>> {
    let worker: u32 = std::env::var("WORKER_ID")?.parse()?;
    let (to_parent, batches) = channel::from_parent::<Done, Batch>()?;
    loop {
        let batch = match batches.recv() {
            Ok(batch) => batch,
            Err(shmrc::Error::Disconnected) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let features: &[f32] = batch.features.cast()?;
        assert_eq!(features.len(), batch.shape[0] * batch.shape[1]);
        to_parent.send(&Done {
            worker,
            index: batch.index,
            sum: sum(&batch.features)?,
        })?;
    }
}
