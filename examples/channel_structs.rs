//! A channel of structs that carry buffers: a request with a named (file_system)
//! buffer, an anonymous (file_descriptor) one and a frozen one goes to a child; the
//! reply carries a buffer the child made. Both sides use their buffers like any other
//! field.
//!
//! `cargo run --example channel_structs --features channel`

use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel;
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, FrozenBuf, Namespace, ShmBuf, ShmBufMut, Strategy};

#[derive(Serialize, Deserialize, Debug)]
struct Request {
    name: String,
    /// Read-only input, sealed: the child reads it as `&[u32]`.
    weights: FrozenBuf,
    /// Where the child writes its output (any strategy travels).
    output: ShmBuf,
    scratch: Option<ShmBuf>,
}

#[derive(Serialize, Deserialize, Debug)]
struct Reply {
    total: u64,
    /// A buffer the child created for us.
    report: ShmBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    set_manager_mode(ManagerMode::Off); // this example checks its namespace is left empty
    let ns = Namespace::new(format!("shmrc-example-structs-{}", std::process::id()))?;
    if std::env::args().nth(1).as_deref() == Some("child") {
        return child();
    }
    let mut weights = ShmBufMut::new(16 * 4)?;
    weights
        .cast_mut::<u32>()?
        .iter_mut()
        .enumerate()
        .for_each(|(i, w)| *w = i as u32);
    let request = Request {
        name: "sum-of-weights".into(),
        weights: weights.freeze()?,
        output: ShmBuf::with_options(
            8,
            &CreateOptions::new()
                .strategy(Strategy::FileSystem)
                .namespace(ns.clone()),
        )?,
        scratch: Some(ShmBuf::with_options(
            4096,
            &CreateOptions::new().strategy(Strategy::FileDescriptor),
        )?),
    };
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("child")
        .env("SHMRC_MANAGER", "off")
        .env("EXAMPLE_NAMESPACE", ns.prefix());
    let (mut child, to_child, from_child) = channel::spawn::<Request, Reply>(&mut command)?;
    to_child.send(&request)?;
    let reply = from_child.recv_timeout(Duration::from_secs(30))?;

    let mut out = [0u64; 1];
    request.output.read_items(0, &mut out)?;
    let mut report = vec![0u8; reply.report.len()];
    reply.report.read_at(0, &mut report)?;
    println!(
        "reply total {} (output buffer says {}), report {:?}",
        reply.total,
        out[0],
        String::from_utf8_lossy(&report).trim_end_matches('\0')
    );
    assert_eq!((reply.total, out[0]), (120, 120));
    drop((to_child, from_child));
    assert!(child.wait()?.success());
    drop((request, reply));
    assert!(shmrc::inspect(&ns)?.segments.is_empty());
    println!("nothing left in /dev/shm");
    Ok(())
}

fn child() -> Result<(), Box<dyn std::error::Error>> {
    let ns = Namespace::new(std::env::var("EXAMPLE_NAMESPACE")?)?;
    let (to_parent, requests) = channel::from_parent::<Reply, Request>()?;
    let request = requests.recv()?;
    let total: u64 = request
        .weights
        .cast::<u32>()?
        .iter()
        .map(|&w| u64::from(w))
        .sum();
    request.output.write_items(0, &[total])?;
    let report = ShmBuf::with_options(
        64,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns),
    )?;
    report.write_at(0, format!("{}: {total}", request.name).as_bytes())?;
    to_parent.send(&Reply { total, report })?;
    let _ = requests.recv(); // until the parent closes the channel
    Ok(())
}
