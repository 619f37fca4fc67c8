//! shmrc's pooled hand-off, the best path before publish/subscribe: the publisher
//! loans a buffer from a file_descriptor `ShmPool`, makes it a read-only `Sample`,
//! and sends one handle per subscriber over `shmrc::transport` (the memfd travels by
//! `SCM_RIGHTS`); each subscriber attaches it (maps it), checks it, drops it (unmaps,
//! vacates its holder slot) and acknowledges with one byte on the same socket. It has
//! no polling receive. Recovery: a subscriber that holds samples is SIGKILLed, and
//! the publisher's next loans recycle the segments it held (no call, no manager).

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, PoolLimits, Sample, ShmPool, Strategy, transport};

use crate::error::{Error, Result};
use crate::peer::{HOLDING, Peer, READY, control_socket, wait_for_close};
use crate::rounds::{RoundTrip, STOP, read_stamp, stamp};

fn pool(limits: PoolLimits) -> Result<ShmPool> {
    set_manager_mode(ManagerMode::Off);
    Ok(ShmPool::new(
        CreateOptions::new().strategy(Strategy::FileDescriptor),
        limits,
    )?)
}

/// The publisher side.
pub struct PoolHandOff {
    pool: ShmPool,
    size: usize,
    peers: Vec<Peer>,
}

impl PoolHandOff {
    /// A pool and `subscribers` peers of `program`.
    pub fn start(program: &Path, size: usize, subscribers: usize) -> Result<PoolHandOff> {
        let pool = pool(PoolLimits::default())?;
        let mut peers = Vec::with_capacity(subscribers);
        for index in 0..subscribers {
            peers.push(Peer::spawn(
                program,
                &["shmrc-pool".into(), index.to_string()],
            )?);
        }
        for peer in &mut peers {
            peer.expect(READY)?;
        }
        Ok(PoolHandOff { pool, size, peers })
    }

    /// The subscriber processes' ids.
    pub fn subscriber_pids(&self) -> Vec<u32> {
        self.peers.iter().map(Peer::pid).collect()
    }

    /// Tells the peers to exit and waits for them.
    pub fn stop(self) -> Result<()> {
        for peer in &self.peers {
            transport::send(&peer.control, &STOP.to_le_bytes(), Vec::new())?;
        }
        for peer in self.peers {
            peer.finish()?;
        }
        Ok(())
    }
}

impl RoundTrip for PoolHandOff {
    fn round(&mut self, first: u64, batch: usize) -> Result<()> {
        for seq in first..first + batch as u64 {
            let mut loan = self.pool.loan::<u8>(self.size)?;
            stamp(&mut loan, seq);
            let sample = loan.into_sample();
            for peer in &self.peers {
                transport::send(&peer.control, &seq.to_le_bytes(), vec![sample.share()?])?;
            }
        }
        for peer in &mut self.peers {
            let mut acks = vec![0u8; batch];
            peer.control.read_exact(&mut acks).map_err(|e| {
                Error::Peer(format!(
                    "pool peer {}: no acknowledgement ({e})",
                    peer.pid()
                ))
            })?;
        }
        Ok(())
    }
}

fn receive(control: &std::os::unix::net::UnixStream) -> Result<Option<(u64, Sample<u8>)>> {
    let mut message = transport::recv(control)?;
    let seq = u64::from_le_bytes(
        message
            .payload
            .as_slice()
            .try_into()
            .map_err(|_| Error::Peer("a message without a sequence number".into()))?,
    );
    if seq == STOP {
        return Ok(None);
    }
    if message.handles.len() != 1 {
        return Err(Error::Peer(format!(
            "sample {seq} came with {} handles",
            message.handles.len()
        )));
    }
    let sample = Sample::<u8>::attach(message.handles.remove(0))?;
    let stamped = read_stamp(&sample)?;
    if stamped != seq {
        return Err(Error::Peer(format!("sample {seq} carries {stamped}")));
    }
    Ok(Some((seq, sample)))
}

/// The subscriber side: attach, check, drop, acknowledge, until told to stop.
pub fn serve() -> Result<()> {
    set_manager_mode(ManagerMode::Off);
    let mut control = control_socket()?;
    control.write_all(&[READY])?;
    while let Some((seq, sample)) = receive(&control)? {
        drop(sample);
        control.write_all(&[seq as u8])?;
    }
    Ok(())
}

/// The subscriber of a recovery trial: attaches `count` samples, says so, and holds
/// them until it is killed.
pub fn serve_holding(count: usize) -> Result<()> {
    set_manager_mode(ManagerMode::Off);
    let mut control = control_socket()?;
    control.write_all(&[READY])?;
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        match receive(&control)? {
            Some((_, sample)) => held.push(sample),
            None => return Ok(()),
        }
    }
    control.write_all(&[HOLDING])?;
    wait_for_close(&mut control);
    drop(held);
    Ok(())
}

/// One recovery trial: a subscriber holds `count` samples of `size` bytes and is
/// SIGKILLed; the time from the kill until the publisher holds `count` loans made of
/// the recycled segments (no new one), or `None` past `deadline`.
pub fn recovery_trial(
    program: &Path,
    size: usize,
    count: usize,
    deadline: Duration,
) -> Result<Option<Duration>> {
    // No idle segment kept: a loan that had to create a fresh segment gives it straight
    // back when dropped, so only the subscriber's segments can be recycled.
    let pool = pool(PoolLimits {
        max_idle_buffers: 0,
        ..PoolLimits::default()
    })?;
    let mut peer = Peer::spawn(program, &["shmrc-pool-hold".into(), count.to_string()])?;
    peer.expect(READY)?;
    for seq in 0..count as u64 {
        let mut loan = pool.loan::<u8>(size)?;
        stamp(&mut loan, seq);
        let sample = loan.into_sample();
        transport::send(&peer.control, &seq.to_le_bytes(), vec![sample.share()?])?;
    }
    peer.expect(HOLDING)?;
    let lent = pool.stats().lent;
    if lent != count {
        return Err(Error::Peer(format!(
            "{lent} segments lent, expected {count}"
        )));
    }
    let start = Instant::now();
    peer.kill()?;
    let mut back = Vec::with_capacity(count);
    while back.len() < count {
        if start.elapsed() > deadline {
            return Ok(None);
        }
        let created = pool.stats().created;
        let loan = pool.loan::<u8>(size)?;
        if pool.stats().created > created {
            drop(loan); // a fresh segment: the held ones are not back yet
            pool.trim()?;
        } else {
            back.push(loan);
        }
    }
    Ok(Some(start.elapsed()))
}
