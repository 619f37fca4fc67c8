//! What the soak sees of `/dev/shm`: the names of its namespace, and when each was
//! deleted (an inotify watch read by a thread of its own, so that the time is the
//! deletion's, not the moment the soak got round to looking).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use shmrc::{Error, Result};

/// Where the kernel keeps named shared memory.
pub const SHM_DIR: &str = "/dev/shm";

/// The names in `/dev/shm` that start with `start`, sorted.
pub fn names(start: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(SHM_DIR)
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with(start))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Deletions of names that start with a prefix, with their times.
pub struct DeletionWatch {
    deleted: Arc<Mutex<HashMap<String, Instant>>>,
    /// Dropped to end the thread.
    done: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DeletionWatch {
    /// Watches `/dev/shm` for deletions of names that start with `start`.
    pub fn new(start: &str) -> Result<DeletionWatch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| Error::os("inotify_init", std::io::Error::from(e)))?;
        inotify
            .add_watch(SHM_DIR, AddWatchFlags::IN_DELETE)
            .map_err(|e| Error::os("inotify_add_watch /dev/shm", std::io::Error::from(e)))?;
        let deleted = Arc::new(Mutex::new(HashMap::new()));
        let (done, ended) = mpsc::channel();
        let thread = {
            let (deleted, start) = (deleted.clone(), start.to_owned());
            std::thread::spawn(move || record(&inotify, &start, &deleted, &ended))
        };
        Ok(DeletionWatch {
            deleted,
            done: Some(done),
            thread: Some(thread),
        })
    }

    /// When `name` was deleted, if it was.
    pub fn deleted_at(&self, name: &str) -> Option<Instant> {
        self.deleted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .copied()
    }
}

impl Drop for DeletionWatch {
    fn drop(&mut self) {
        self.done.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn record(
    inotify: &Inotify,
    start: &str,
    deleted: &Mutex<HashMap<String, Instant>>,
    ended: &mpsc::Receiver<()>,
) {
    while let Err(TryRecvError::Empty) = ended.try_recv() {
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(50u16)).unwrap_or(0) == 0 {
            continue;
        }
        let now = Instant::now();
        for event in inotify.read_events().unwrap_or_default() {
            let Some(name) = event.name.as_deref().and_then(OsStr::to_str) else {
                continue;
            };
            if name.starts_with(start) {
                deleted
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(name.to_owned(), now);
            }
        }
    }
}
