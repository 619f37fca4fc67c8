//! One server, several client processes: a `Listener` accepts every client as a channel
//! of its own, and one `Select` waits on all of them. Each client sends frames in
//! shared memory (a `FrozenBuf`, zero-copy) and gets back their checksum in a
//! file_system buffer the server made. One client is SIGKILLed half-way: the select
//! reports it closed, the buffer that was in flight to it comes back, and the others
//! never notice. At the end nothing is left in the namespace.
//!
//! `cargo run --example many_clients --features channel`

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, Listener, Select, Selection, Sender};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, FrozenBuf, Namespace, ShmBuf, ShmBufMut, Strategy};

const CLIENTS: u32 = 4;
const FRAMES: u32 = 3;
const LIMIT: Duration = Duration::from_secs(30);
/// The client that is killed after its first frame, its answer unread.
const VICTIM: u32 = 0;

#[derive(Serialize, Deserialize)]
struct Frame {
    client: u32,
    number: u32,
    pixels: FrozenBuf,
}

#[derive(Serialize, Deserialize)]
struct Checked {
    number: u32,
    /// The frame's sum, written by the server in a buffer of its own.
    sum: ShmBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This example checks its namespace by itself; a real job leaves the manager on.
    set_manager_mode(ManagerMode::Off);
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("client") {
        let name = args.next().ok_or("client: no server name")?;
        let client: u32 = args.next().ok_or("client: no number")?.parse()?;
        return run_client(&name, client);
    }
    let ns = Namespace::new(format!("shmrc-example-many-{}", std::process::id()))?;
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());

    let listener = Listener::<Checked, Frame>::new()?;
    let mut children: Vec<Child> = (0..CLIENTS)
        .map(|client| {
            Command::new(std::env::current_exe()?)
                .args(["client", listener.name(), &client.to_string()])
                .env("SHMRC_MANAGER", "off")
                .spawn()
        })
        .collect::<Result<_, _>>()?;

    let mut set = Select::new();
    let mut answer_to: HashMap<u64, (u32, Sender<Checked>)> = HashMap::new();
    for _ in 0..CLIENTS {
        let client = listener.accept_timeout(LIMIT)?;
        let id = set.add(client.receiver);
        let which = children
            .iter()
            .position(|c| c.id() == client.pid)
            .ok_or("a client that is not ours")?;
        println!(
            "accepted client {which} (pid {}, uid {})",
            client.pid, client.uid
        );
        answer_to.insert(id, (which as u32, client.sender));
    }

    // The victim is killed once its first answer is on its way (it never reads it):
    // the buffer in flight to it must come back.
    let mut answered = 0;
    while !set.is_empty() {
        for selection in set.select_timeout(LIMIT)? {
            match selection {
                Selection::Message(id, frame) => {
                    let sum: u64 = frame.pixels.iter().map(|&b| u64::from(b)).sum();
                    let buf = ShmBuf::with_options(8, &options)?;
                    buf.write_items(0, &[sum])?;
                    let (client, to_client) = &answer_to[&id];
                    assert_eq!(*client, frame.client);
                    to_client.send(&Checked {
                        number: frame.number,
                        sum: buf,
                    })?;
                    answered += 1;
                    if *client == VICTIM {
                        let child = &mut children[VICTIM as usize];
                        child.kill()?; // ours, by pid
                        child.wait()?;
                        println!("client {VICTIM} SIGKILLed with an answer in flight to it");
                    }
                }
                Selection::Closed(id) => {
                    let (client, to_client) = answer_to.remove(&id).ok_or("an unknown id")?;
                    let unread = to_client.in_flight();
                    // Dropping the sender gives back what it had in flight.
                    drop(to_client);
                    println!(
                        "client {client} is gone; {unread} buffer(s) it never read given back"
                    );
                    if client == VICTIM {
                        assert_eq!(unread, 1);
                    }
                }
                Selection::Failed(id, error) => return Err(format!("client {id}: {error}").into()),
            }
        }
    }
    for (client, child) in children.iter_mut().enumerate() {
        if client as u32 == VICTIM {
            continue; // reaped when killed
        }
        let status = child.wait()?;
        assert!(status.success(), "client {client}: {status}");
    }
    println!("answered {answered} frames from {CLIENTS} clients");
    assert_eq!(answered, 1 + (CLIENTS - 1) * FRAMES);
    let left = std::fs::read_dir("/dev/shm")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&ns.name_start(nix::unistd::geteuid().as_raw())))
        .count();
    assert_eq!(left, 0, "segments left in the namespace");
    println!("nothing left in /dev/shm");
    Ok(())
}

/// Sends `FRAMES` frames, one at a time, checking each answer.
fn run_client(name: &str, client: u32) -> Result<(), Box<dyn std::error::Error>> {
    let (to_server, from_server) = channel::connect::<Frame, Checked>(name)?;
    for number in 0..FRAMES {
        let mut pixels = ShmBufMut::new(64 * 1024)?;
        pixels.fill((client * 10 + number) as u8);
        let want = 64 * 1024 * u64::from(client * 10 + number);
        to_server.send(&Frame {
            client,
            number,
            pixels: pixels.freeze()?,
        })?;
        if client == VICTIM {
            // Never reads its answer: it waits here to be killed.
            std::thread::sleep(LIMIT * 2);
            return Err("the victim was not killed".into());
        }
        let checked = from_server.recv_timeout(LIMIT)?;
        assert_eq!(checked.number, number);
        let mut sum = [0u64];
        checked.sum.read_items(0, &mut sum)?;
        assert_eq!(sum[0], want);
    }
    Ok(())
}
