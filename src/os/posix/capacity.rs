//! Whether memory can back a new segment, asked before it is reserved: a reservation
//! the kernel cannot back is not always `ENOSPC`. Pages of `/dev/shm` and of a memfd
//! are memory charged to the creator's memory cgroup, and `posix_fallocate` past the
//! cgroup's limit (or past the machine's memory, with no swap) gets the process — or a
//! bystander — killed by the OOM killer instead of failing. So a length is refused as
//! [`Error::NoSpace`] before anything is reserved when it exceeds any of:
//! - the free space of the file system holding the file (`fstatvfs`: `/dev/shm`'s size;
//!   a memfd's internal file system reports none and is skipped);
//! - the machine's available memory and free swap (`MemAvailable` + `SwapFree` in
//!   `/proc/meminfo`);
//! - the headroom of this process's memory cgroup and of each of its ancestors: the
//!   limit less what is charged, plus the file cache the kernel may reclaim (v2
//!   `memory.max`, `memory.current`, `memory.stat`; v1 `memory.limit_in_bytes`,
//!   `memory.usage_in_bytes`, `memory.stat`).
//!
//! Only lengths of [`CHECKED_FROM`] bytes and more are checked: a few `/proc` and
//! cgroup reads cost more than a small create, and a small reservation in a cgroup at
//! its limit fails like any other allocation of the process would. What cannot be read
//! (no `/proc`, no cgroup file system, a file removed meanwhile) limits nothing. The
//! answer can be stale by the time the bytes are reserved (another process allocates
//! meanwhile): it catches the request that could never fit, not a race.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::PosixFile;

/// The smallest length checked (16 MiB).
pub(super) const CHECKED_FROM: u64 = 16 << 20;

/// [`Error::NoSpace`] if `len` bytes cannot be backed (see the module's docs).
pub(super) fn check_fits(file: &PosixFile, len: u64) -> Result<()> {
    if len < CHECKED_FROM {
        return Ok(());
    }
    let refuse = |why: String| Error::NoSpace {
        len,
        source: std::io::Error::new(std::io::ErrorKind::StorageFull, why),
    };
    if let Ok(fs) = nix::sys::statvfs::fstatvfs(&file.0) {
        let unit = fs.fragment_size().max(1);
        if fs.blocks() > 0 {
            let free = fs.blocks_available().saturating_mul(unit);
            if len > free {
                return Err(refuse(format!(
                    "its file system has {free} bytes free (statvfs)"
                )));
            }
        }
    }
    if let Some(available) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| available_memory(&text))
    {
        if len > available {
            return Err(refuse(format!(
                "the machine has {available} bytes of memory available (MemAvailable + \
                 SwapFree)"
            )));
        }
    }
    if let Some(limit) = cgroup_headroom() {
        if len > limit.headroom {
            return Err(refuse(format!(
                "the memory cgroup {} allows {} more bytes (limit {}, charged {}, of which \
                 {} reclaimable file cache)",
                limit.dir.display(),
                limit.headroom,
                limit.limit,
                limit.charged,
                limit.reclaimable
            )));
        }
    }
    Ok(())
}

/// `MemAvailable` + `SwapFree`, in bytes, from a `/proc/meminfo` text.
fn available_memory(meminfo: &str) -> Option<u64> {
    let kib = |name: &str| {
        meminfo.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    let available = kib("MemAvailable")?;
    Some((available + kib("SwapFree").unwrap_or(0)).saturating_mul(1024))
}

/// The tightest memory limit over this process's cgroup and its ancestors.
#[derive(Debug, PartialEq, Eq)]
struct Limit {
    dir: PathBuf,
    limit: u64,
    charged: u64,
    reclaimable: u64,
    headroom: u64,
}

/// The smallest headroom of this process's memory cgroup and its ancestors, if any of
/// them has a limit that can be read.
fn cgroup_headroom() -> Option<Limit> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (dir, version) = memory_cgroup_dir(&cgroups, &mountinfo)?;
    let mut tightest: Option<Limit> = None;
    let mut at: &Path = &dir;
    loop {
        if let Some(limit) = limit_at(at, version) {
            if tightest
                .as_ref()
                .is_none_or(|t| limit.headroom < t.headroom)
            {
                tightest = Some(limit);
            }
        }
        match at.parent() {
            Some(parent) if parent.join(version.limit_file()).exists() => at = parent,
            _ => break,
        }
    }
    tightest
}

/// The two cgroup hierarchies' names for a limit and a charge.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl Version {
    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }

    fn charged_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        }
    }

    /// Names in `memory.stat` of the file cache the kernel can reclaim (shared memory
    /// is on the anonymous lists, so not among them).
    fn reclaimable_stats(self) -> [&'static str; 2] {
        match self {
            Version::V1 => ["total_inactive_file", "total_active_file"],
            Version::V2 => ["inactive_file", "active_file"],
        }
    }
}

/// A limit at or above this is none (v1 reports "no limit" as about `i64::MAX`).
const NO_LIMIT: u64 = 1 << 62;

fn limit_at(dir: &Path, version: Version) -> Option<Limit> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let limit = read(version.limit_file())?;
    let limit = match limit.trim() {
        "max" => return None,
        value => value.parse::<u64>().ok().filter(|l| *l < NO_LIMIT)?,
    };
    let charged = read(version.charged_file())?.trim().parse::<u64>().ok()?;
    let stat = read("memory.stat").unwrap_or_default();
    let reclaimable = version
        .reclaimable_stats()
        .iter()
        .filter_map(|name| stat_value(&stat, name))
        .sum::<u64>();
    let headroom = limit.saturating_sub(charged).saturating_add(reclaimable);
    Some(Limit {
        dir: dir.to_owned(),
        limit,
        charged,
        reclaimable,
        headroom,
    })
}

fn stat_value(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// The directory of this process's memory cgroup, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: the v1 hierarchy with the `memory` controller if there is
/// one, else the v2 hierarchy.
fn memory_cgroup_dir(cgroups: &str, mountinfo: &str) -> Option<(PathBuf, Version)> {
    let path_of = |line: &str| line.splitn(3, ':').nth(2).map(str::to_owned);
    let v1 = cgroups
        .lines()
        .find(|line| {
            line.split(':')
                .nth(1)
                .is_some_and(|controllers| controllers.split(',').any(|c| c == "memory"))
        })
        .and_then(path_of);
    if let Some(path) = v1 {
        let (root, mount) = mount_of(mountinfo, |fstype, options| {
            fstype == "cgroup" && options.split(',').any(|o| o == "memory")
        })?;
        return Some((join_under(&mount, &root, &path)?, Version::V1));
    }
    let path = cgroups
        .lines()
        .find(|line| line.starts_with("0::"))
        .and_then(path_of)?;
    let (root, mount) = mount_of(mountinfo, |fstype, _| fstype == "cgroup2")?;
    Some((join_under(&mount, &root, &path)?, Version::V2))
}

/// The (root within the hierarchy, mount point) of the first mount whose file system
/// type and super options `wanted` accepts.
fn mount_of(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (mine, theirs) = line.split_once(" - ")?;
        let mut fields = mine.split(' ');
        let root = fields.nth(3)?;
        let mount = fields.next()?;
        let mut rest = theirs.split(' ');
        let fstype = rest.next()?;
        let options = rest.nth(1).unwrap_or("");
        wanted(fstype, options).then(|| (root.to_owned(), mount.to_owned()))
    })
}

/// `path` (a cgroup path from `/proc/self/cgroup`) under `mount`, where the mount shows
/// the hierarchy from `root`; `None` if the cgroup lies outside what is mounted.
fn join_under(mount: &str, root: &str, path: &str) -> Option<PathBuf> {
    let relative = if root == "/" {
        path
    } else {
        path.strip_prefix(root)?
    };
    Some(Path::new(mount).join(relative.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_available_adds_free_swap() {
        let meminfo = "MemTotal: 100 kB\nMemAvailable:   20 kB\nSwapFree: 5 kB\n";
        assert_eq!(available_memory(meminfo), Some(25 * 1024));
        assert_eq!(available_memory("MemAvailable: 7 kB\n"), Some(7 * 1024));
        assert_eq!(available_memory("MemTotal: 7 kB\n"), None);
    }

    const MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
36 31 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_v1_memory_hierarchy_wins_and_v2_is_found_without_it() {
        let v1 = "4:memory:/jobs/a\n0::/\n";
        assert_eq!(
            memory_cgroup_dir(v1, MOUNTS),
            Some((PathBuf::from("/sys/fs/cgroup/memory/jobs/a"), Version::V1))
        );
        let v2 = "0::/user.slice/job\n";
        assert_eq!(
            memory_cgroup_dir(v2, MOUNTS),
            Some((
                PathBuf::from("/sys/fs/cgroup/unified/user.slice/job"),
                Version::V2
            ))
        );
        // A mount that shows the hierarchy from a cgroup (a container's view).
        let inner = "44 31 0:37 /jobs /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            memory_cgroup_dir("0::/jobs/b\n", inner),
            Some((PathBuf::from("/sys/fs/cgroup/b"), Version::V2))
        );
        assert_eq!(memory_cgroup_dir("0::/elsewhere\n", inner), None);
        assert_eq!(memory_cgroup_dir("", MOUNTS), None);
    }

    #[test]
    fn a_limit_counts_reclaimable_file_cache_as_room() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("memory.max", "1000\n");
        write("memory.current", "900\n");
        write(
            "memory.stat",
            "anon 500\nfile 400\nactive_file 100\ninactive_file 150\n",
        );
        let limit = limit_at(dir.path(), Version::V2).unwrap();
        assert_eq!(
            (limit.charged, limit.reclaimable, limit.headroom),
            (900, 250, 350)
        );
        write("memory.max", "max\n");
        assert_eq!(limit_at(dir.path(), Version::V2), None, "no limit");
        write("memory.limit_in_bytes", "9223372036854771712\n");
        write("memory.usage_in_bytes", "5\n");
        assert_eq!(limit_at(dir.path(), Version::V1), None, "v1's no limit");
    }

    #[test]
    fn a_small_length_is_not_checked() {
        let file = super::super::shm::memfd_create("shmrc-capacity-test").unwrap();
        assert!(check_fits(&file, CHECKED_FROM - 1).is_ok());
        // Far beyond any machine: refused, naming why.
        let refused = check_fits(&file, 1 << 60).unwrap_err().to_string();
        assert!(refused.contains("memory"), "{refused}");
    }
}
