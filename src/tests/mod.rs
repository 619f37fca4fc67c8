//! The crate's cross-module unit tests (quinn-proto keeps its own the same way): those
//! that need rooms above the one they test (the pool and the transport, to hand a buffer
//! to another simulated process), and the simulated kernel's, which run the holder
//! protocol on it. A room's own unit tests stay beside its code.

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod map_cache;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod pool;
mod sim;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod util;
