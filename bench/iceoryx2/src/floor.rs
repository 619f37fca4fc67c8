//! The wake-up floor: the same round trip with no memory shared, one byte each way
//! over a blocking Unix socket (the control socket) per subscriber. What any
//! contender that sleeps until woken pays at least; a contender's own cost is its
//! round trip minus this one, measured in the same run.

use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::peer::{Peer, READY, control_socket};
use crate::rounds::RoundTrip;

/// The publisher side: one byte to every subscriber, one back from each.
pub struct Floor {
    peers: Vec<Peer>,
}

impl Floor {
    /// Starts `subscribers` floor peers of `program`.
    pub fn start(program: &Path, subscribers: usize) -> Result<Floor> {
        let mut peers = Vec::with_capacity(subscribers);
        for index in 0..subscribers {
            peers.push(Peer::spawn(program, &["floor".into(), index.to_string()])?);
        }
        for peer in &mut peers {
            peer.expect(READY)?;
        }
        Ok(Floor { peers })
    }

    /// Closes the sockets and waits for the peers to exit.
    pub fn stop(self) -> Result<()> {
        for peer in self.peers {
            peer.control.shutdown(std::net::Shutdown::Write)?;
            peer.finish()?;
        }
        Ok(())
    }
}

impl RoundTrip for Floor {
    fn round(&mut self, first: u64, batch: usize) -> Result<()> {
        let bytes: Vec<u8> = (first..first + batch as u64).map(|s| s as u8).collect();
        for peer in &mut self.peers {
            peer.tell(&bytes)?;
        }
        for peer in &mut self.peers {
            let mut back = vec![0u8; batch];
            peer.control
                .read_exact(&mut back)
                .map_err(|e| Error::Peer(format!("floor peer {}: {e}", peer.pid())))?;
            if back != bytes {
                return Err(Error::Peer(format!(
                    "floor peer {} answered {back:?}",
                    peer.pid()
                )));
            }
        }
        Ok(())
    }
}

/// The subscriber side: echoes every byte until the publisher closes the socket.
pub fn serve() -> Result<()> {
    let mut control = control_socket()?;
    control.write_all(&[READY])?;
    let mut byte = [0u8];
    loop {
        match control.read(&mut byte)? {
            0 => return Ok(()),
            _ => control.write_all(&byte)?,
        }
    }
}
