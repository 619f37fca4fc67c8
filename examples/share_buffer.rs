//! Two processes sharing one buffer: the parent creates a file_system buffer, hands it
//! to a child over a shmrc channel, the child writes into it, and the parent reads what
//! the child wrote: the same memory, no copy through the socket. When both let go, the
//! segment is unlinked.
//!
//! `cargo run --example share_buffer --features channel`

use std::process::Command;
use std::time::Duration;

use shmrc::channel;
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This example checks by itself that nothing is left; a real job leaves the
    // manager on (it reclaims what a killed process held).
    set_manager_mode(ManagerMode::Off);
    if std::env::args().nth(1).as_deref() == Some("child") {
        return child();
    }
    let ns = Namespace::new(format!("shmrc-example-share-{}", std::process::id()))?;
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());
    let buf = ShmBuf::with_options(1 << 20, &options)?;
    buf.write_items(0, &[1u64, 2, 3])?;

    let mut command = Command::new(std::env::current_exe()?);
    command.arg("child").env("SHMRC_MANAGER", "off");
    let (mut child, to_child, from_child) = channel::spawn::<ShmBuf, String>(&mut command)?;
    to_child.send(&buf)?;
    let note = from_child.recv_timeout(Duration::from_secs(30))?;

    let mut seen = [0u64; 4];
    buf.read_items(0, &mut seen)?;
    println!("the child says {note:?}; the buffer now holds {seen:?}");
    assert_eq!(seen, [1, 2, 3, 6]);
    drop((to_child, from_child));
    assert!(child.wait()?.success());

    let name = buf.name().map(str::to_owned);
    drop(buf); // the last holder: the segment is unlinked
    assert!(shmrc::inspect(&ns)?.segments.is_empty());
    println!(
        "{} unlinked: nothing left in /dev/shm",
        name.unwrap_or_default()
    );
    Ok(())
}

/// The child: adds the first three numbers and writes the sum after them.
fn child() -> Result<(), Box<dyn std::error::Error>> {
    let (to_parent, from_parent) = channel::from_parent::<String, ShmBuf>()?;
    let buf = from_parent.recv()?;
    let mut numbers = [0u64; 3];
    buf.read_items(0, &mut numbers)?;
    buf.write_items(3, &[numbers.iter().sum::<u64>()])?;
    to_parent.send(&format!("wrote the sum into {}", buf.name().unwrap_or("?")))?;
    // Hold the buffer until the parent is done with the channel.
    let _ = from_parent.recv();
    Ok(())
}
