//! Typed f32 tensors with ndarray: one frozen storage, several arrays over it (a
//! matrix, its transpose, a row), sent to a worker process in one message. The worker
//! gets `ndarray` views of the same memory — shape and strides travel with the
//! storage's handle, the storage is never copied — and computes with them, without
//! `unsafe`.
//!
//! `cargo run --example tensors --features channel,ndarray`

use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel;
use shmrc::{FrozenArray, ShmBufMut};

#[derive(Serialize, Deserialize)]
struct Tensors {
    matrix: FrozenArray<f32>,
    transposed: FrozenArray<f32>,
    second_row: FrozenArray<f32>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Stats {
    total: f32,
    column_sums: Vec<f32>,
    second_row_max: f32,
}

const ROWS: usize = 4;
const COLS: usize = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return worker();
    }
    let mut storage = ShmBufMut::new(ROWS * COLS * 4)?;
    for (i, x) in storage
        .array_mut::<f32>(&[ROWS, COLS])?
        .iter_mut()
        .enumerate()
    {
        *x = i as f32;
    }
    let storage = storage.freeze()?;
    let tensors = Tensors {
        matrix: FrozenArray::new(storage.clone(), &[ROWS, COLS])?,
        transposed: FrozenArray::with_strides(storage.clone(), 0, &[COLS, ROWS], &[1, COLS])?,
        second_row: FrozenArray::with_strides(storage, COLS, &[COLS], &[1])?,
    };
    let mut command = Command::new(std::env::current_exe()?);
    command.arg("worker");
    let (mut child, to_worker, from_worker) = channel::spawn::<Tensors, Stats>(&mut command)?;
    to_worker.send(&tensors)?;
    let stats = from_worker.recv_timeout(Duration::from_secs(30))?;
    println!("{stats:?}");

    let matrix = tensors.matrix.view()?;
    assert_eq!(stats.total, matrix.sum());
    assert_eq!(stats.column_sums.len(), COLS);
    assert_eq!(stats.second_row_max, (2 * COLS - 1) as f32);
    drop((to_worker, from_worker));
    assert!(child.wait()?.success());
    Ok(())
}

fn worker() -> Result<(), Box<dyn std::error::Error>> {
    let (to_parent, from_parent) = channel::from_parent::<Stats, Tensors>()?;
    let tensors = from_parent.recv()?;
    let matrix = tensors.matrix.view()?;
    let transposed = tensors.transposed.view()?;
    assert_eq!(matrix, transposed.t()); // two views, one storage
    let column_sums = transposed.outer_iter().map(|column| column.sum()).collect();
    let second_row_max = tensors
        .second_row
        .view()?
        .iter()
        .copied()
        .fold(f32::MIN, f32::max);
    to_parent.send(&Stats {
        total: matrix.sum(),
        column_sums,
        second_row_max,
    })?;
    let _ = from_parent.recv(); // until the parent closes the channel
    Ok(())
}
