//! Request/response between processes: a lookup server answers any number of client
//! processes with `channel::request::Server`, and each client `call`s it with
//! `channel::request::Client`. An answer is a block of rows in a frozen buffer (sealed,
//! zero-copy: the client reads the server's memory as `&[f32]`). One client gives up on
//! a slow call (`call_timeout`): its late answer is recognised by its call number and
//! skipped, never taken for the next call's. Another client is SIGKILLed in the middle of
//! its calls: the server drops it and keeps serving the others.
//!
//! `cargo run --example request_reply --features channel`

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shmrc::channel::request::{Client, Server};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{FrozenBuf, ShmBufMut};

const CLIENTS: u32 = 3;
const CALLS: u32 = 5;
const ROWS: u32 = 8;
const COLUMNS: u32 = 16;
const LIMIT: Duration = Duration::from_secs(30);
/// The client that is SIGKILLed once its second answer is sent.
const VICTIM: u32 = 0;
/// The client that gives up on one slow call.
const IMPATIENT: u32 = 1;

/// Rows `first..first + ROWS` of the table, for `client`.
#[derive(Serialize, Deserialize)]
struct Lookup {
    client: u32,
    first: u32,
    /// The server takes its time over this one (longer than the client waits).
    slow: bool,
}

/// The rows, `ROWS * COLUMNS` floats, or why the server could not make them.
type Rows = Result<FrozenBuf, String>;

/// The table the server serves: row `r`, column `c` holds `r * 1000 + c`.
fn cell(row: u32, column: u32) -> f32 {
    (row * 1000 + column) as f32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This example checks what it leaves by itself; a real job leaves the manager on.
    set_manager_mode(ManagerMode::Off);
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("client") {
        let name = args.next().ok_or("client: no server name")?;
        let client: u32 = args.next().ok_or("client: no number")?.parse()?;
        return run_client(&name, client);
    }
    let mut server = Server::<Lookup, Rows>::new()?;
    let mut children: Vec<Child> = (0..CLIENTS)
        .map(|client| {
            Command::new(std::env::current_exe()?)
                .args(["client", server.name(), &client.to_string()])
                .env("SHMRC_MANAGER", "off")
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let outcome = serve(&mut server, &mut children);
    // Whatever happened, no child outlives the example.
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    outcome
}

fn serve(
    server: &mut Server<Lookup, Rows>,
    children: &mut [Child],
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + LIMIT;
    let mut victim_answered = 0;
    let mut victim_killed = false;
    let mut answered = 0;
    let mut finished = vec![false; children.len()];
    loop {
        answered += server.serve_timeout(Duration::from_millis(20), |lookup| {
            if lookup.client == VICTIM {
                victim_answered += 1;
            }
            if lookup.slow {
                std::thread::sleep(Duration::from_millis(200));
            }
            rows(lookup.first).map_err(|e| e.to_string())
        })?;
        if victim_answered >= 2 && !victim_killed {
            // Its second answer has just been sent (read or not): the server must not care.
            let victim = &mut children[VICTIM as usize];
            victim.kill()?;
            victim.wait()?;
            victim_killed = true;
            println!("client {VICTIM} SIGKILLed in the middle of its calls");
        }
        for (which, child) in children.iter_mut().enumerate() {
            if which as u32 == VICTIM || finished[which] {
                continue;
            }
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    return Err(format!("client {which} failed: {status}").into());
                }
                finished[which] = true;
                println!("client {which} done");
            }
        }
        if victim_killed && finished.iter().filter(|f| **f).count() == children.len() - 1 {
            break;
        }
        if Instant::now() > deadline {
            return Err("the clients did not finish in time".into());
        }
    }
    // One more round notices the clients that are gone.
    server.serve_timeout(Duration::from_millis(20), |lookup| {
        rows(lookup.first).map_err(|e| e.to_string())
    })?;
    println!(
        "answered {answered} calls; clients still connected: {}",
        server.clients()
    );
    if server.clients() != 0 {
        return Err("the server still counts clients that are gone".into());
    }
    Ok(())
}

/// A frozen block of the table, starting at row `first`.
fn rows(first: u32) -> shmrc::Result<FrozenBuf> {
    let mut block = ShmBufMut::new((ROWS * COLUMNS) as usize * size_of::<f32>())?;
    for (i, value) in block.cast_mut::<f32>()?.iter_mut().enumerate() {
        let i = i as u32;
        *value = cell(first + i / COLUMNS, i % COLUMNS);
    }
    Ok(block.freeze()?)
}

/// A client: `CALLS` lookups, each answer checked; the impatient one gives up on a slow
/// call first; the victim keeps calling until it is killed.
fn run_client(name: &str, client: u32) -> Result<(), Box<dyn std::error::Error>> {
    let mut server = Client::<Lookup, Rows>::connect(name)?;
    if client == IMPATIENT {
        let slow = Lookup {
            client,
            first: 999,
            slow: true,
        };
        match server.call_timeout(slow, Duration::from_millis(20)) {
            Err(shmrc::Error::Timeout { .. }) => {
                println!("client {client}: gave up on a slow call; its answer will be skipped")
            }
            other => {
                return Err(
                    format!("client {client}: the slow call did not time out: {other:?}").into(),
                );
            }
        }
    }
    let calls = if client == VICTIM { u32::MAX } else { CALLS };
    for call in 0..calls {
        let first = client * 100 + call * ROWS;
        let block = server.call(Lookup {
            client,
            first,
            slow: false,
        })??;
        let values = block.cast::<f32>()?;
        // The late answer (rows from 999) would fail this check.
        for (i, value) in values.iter().enumerate() {
            let i = i as u32;
            if *value != cell(first + i / COLUMNS, i % COLUMNS) {
                return Err(format!("client {client}: call {call} got another call's rows").into());
            }
        }
        if client == VICTIM {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}
