//! Where the user's manager lives: the runtime directory (created `0700`, refused when
//! it is a symlink, another user's, or open to group or others) and the paths in it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::environment;
use crate::error::{Error, Result};
use crate::os::Os;
use crate::os::posix::PosixOs;

/// Environment variable that names the runtime directory (tests use it to isolate a
/// manager).
///
/// ```
/// use shmrc::manager::RUNTIME_DIR_ENV;
///
/// assert_eq!(RUNTIME_DIR_ENV, "SHMRC_RUNTIME_DIR");
/// // A job that wants a manager of its own runs its workers with the variable set:
/// let mut worker = std::process::Command::new("python3");
/// worker.arg("worker.py").env(RUNTIME_DIR_ENV, "/run/job-42/shmrc");
/// assert!(worker.get_envs().any(|(name, _)| name == RUNTIME_DIR_ENV));
/// ```
pub const RUNTIME_DIR_ENV: &str = "SHMRC_RUNTIME_DIR";
/// The desktop's per-user runtime directory; the manager's is `shmrc` in it when
/// [`RUNTIME_DIR_ENV`] is not set.
const XDG_RUNTIME_DIR_ENV: &str = "XDG_RUNTIME_DIR";
/// The socket clients connect to ([`RuntimeDir::socket`]).
///
/// ```
/// use shmrc::manager::{RuntimeDir, SOCKET_FILE};
/// let socket = RuntimeDir::at("/run/user/1000/shmrc").socket()?;
/// assert_eq!(socket.file_name().unwrap(), SOCKET_FILE);
/// # Ok::<(), shmrc::Error>(())
/// ```
///
/// The wire version is in the name: managers of shmrc builds that speak different wire
/// versions live side by side, each serving the programs it can talk to, instead of
/// the first one started refusing every other version's clients.
pub const SOCKET_FILE: &str = "manager-v2.sock";
/// The file whose `flock` makes one manager per directory ([`RuntimeDir::lock`]).
///
/// ```
/// use shmrc::manager::{LOCK_FILE, RuntimeDir};
/// let lock = RuntimeDir::at("/run/user/1000/shmrc").lock();
/// assert_eq!(lock.file_name().unwrap(), LOCK_FILE);
/// ```
///
/// Versioned like [`SOCKET_FILE`]: one manager per directory and wire version.
pub const LOCK_FILE: &str = "manager-v2.lock";
/// The file whose `flock` a client holds while it starts a manager, so that of many
/// clients finding none at once one starts it and the others wait for it.
///
/// ```
/// assert_eq!(shmrc::manager::START_LOCK_FILE, "start-v2.lock");
/// ```
pub const START_LOCK_FILE: &str = "start-v2.lock";
/// Where a detached manager's log goes ([`RuntimeDir::log`]).
///
/// ```
/// use shmrc::manager::{LOG_FILE, RuntimeDir};
/// let log = RuntimeDir::at("/run/user/1000/shmrc").log();
/// assert_eq!(log.file_name().unwrap(), LOG_FILE);
/// ```
pub const LOG_FILE: &str = "manager.log";
/// Bytes of `sun_path`, the terminating NUL included.
const SUN_PATH_LEN: usize = 108;

/// The manager's runtime directory and the files in it: its socket, its lock and
/// its log. Everything in it is private to the user (mode `0700`).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::RuntimeDir;
///
/// let uid = nix::unistd::geteuid().as_raw();
/// let runtime = RuntimeDir::for_user(uid)?;
/// println!("the manager's log: {}", runtime.log().display());
/// assert!(runtime.socket()?.starts_with(runtime.path()));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeDir {
    dir: PathBuf,
}

impl RuntimeDir {
    /// The directory for this user: `$SHMRC_RUNTIME_DIR` if set, else
    /// `$XDG_RUNTIME_DIR/shmrc`, else `/tmp/shmrc-<uid>`. Nothing is checked or created
    /// yet. Either variable set to a relative path is an [`Error::InvalidArgument`] that
    /// names it (a client and the manager it starts, in other working directories,
    /// would read it as two directories). A program that runs with privileges its
    /// caller lacks (setuid, setgid, file capabilities) reads neither: its directory is
    /// `/tmp/shmrc-<uid>`.
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    ///
    /// let runtime = RuntimeDir::for_user(1000)?;
    /// if std::env::var_os("SHMRC_RUNTIME_DIR").is_none() && std::env::var_os("XDG_RUNTIME_DIR").is_none() {
    ///     assert_eq!(runtime.path(), std::path::Path::new("/tmp/shmrc-1000"));
    /// }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn for_user(uid: u32) -> Result<RuntimeDir> {
        let dir = if let Some(dir) = environment::absolute_path(RUNTIME_DIR_ENV)? {
            dir
        } else if let Some(xdg) = environment::absolute_path(XDG_RUNTIME_DIR_ENV)? {
            xdg.join("shmrc")
        } else {
            PathBuf::from(format!("/tmp/shmrc-{uid}"))
        };
        Ok(RuntimeDir { dir })
    }

    /// The runtime directory of this process's user (its effective uid), as
    /// [`RuntimeDir::for_user`] finds it, made `0700` if missing and checked (a real
    /// directory of this user's that no one else can enter: else
    /// [`Error::UnsafeRuntimeDir`]): what the CLI and the Python package
    /// serve and query the manager in.
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    ///
    /// let runtime = RuntimeDir::of_this_user()?;
    /// assert!(runtime.path().is_dir());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn of_this_user() -> Result<RuntimeDir> {
        let uid = PosixOs.uid();
        let runtime = RuntimeDir::for_user(uid)?;
        runtime.ensure(uid)?;
        Ok(runtime)
    }

    /// A runtime directory at `dir` (nothing is checked or created yet).
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    /// let runtime = RuntimeDir::at("/run/shmrc-test");
    /// assert_eq!(runtime.path(), std::path::Path::new("/run/shmrc-test"));
    /// ```
    pub fn at(dir: impl Into<PathBuf>) -> RuntimeDir {
        RuntimeDir { dir: dir.into() }
    }

    /// The directory.
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    /// let runtime = RuntimeDir::at("/tmp/shmrc-1000");
    /// assert_eq!(runtime.path().file_name().unwrap(), "shmrc-1000");
    /// ```
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The socket's path, checked to fit `sun_path` (107 bytes):
    /// [`Error::SocketPathTooLong`] when it does not.
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    ///
    /// let socket = RuntimeDir::at("/tmp/shmrc-1000").socket()?;
    /// assert_eq!(socket, std::path::Path::new("/tmp/shmrc-1000/manager-v2.sock"));
    /// let deep = RuntimeDir::at(format!("/tmp/{}", "d".repeat(120)));
    /// assert!(matches!(deep.socket(), Err(shmrc::Error::SocketPathTooLong { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn socket(&self) -> Result<PathBuf> {
        let path = self.dir.join(SOCKET_FILE);
        let len = path.as_os_str().len();
        if len >= SUN_PATH_LEN {
            return Err(Error::SocketPathTooLong {
                path,
                len,
                max: SUN_PATH_LEN - 1,
            });
        }
        Ok(path)
    }

    /// The lock file's path: a process holding its `flock` is the manager.
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    /// let lock = RuntimeDir::at("/tmp/shmrc-1000").lock();
    /// assert_eq!(lock, std::path::Path::new("/tmp/shmrc-1000/manager-v2.lock"));
    /// ```
    pub fn lock(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// The log file's path: where a detached manager writes one line per event (its
    /// start, each client, each sweep, each refusal).
    ///
    /// ```
    /// use shmrc::manager::RuntimeDir;
    /// let log = RuntimeDir::at("/tmp/shmrc-1000").log();
    /// assert_eq!(log, std::path::Path::new("/tmp/shmrc-1000/manager.log"));
    /// ```
    pub fn log(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// Opens (creating, mode 0600) the start lock ([`START_LOCK_FILE`]) for writing,
    /// refusing a symlink.
    pub(crate) fn open_start_lock(&self) -> Result<File> {
        open_private(&self.dir.join(START_LOCK_FILE), false)
            .map_err(|e| Error::os("open manager start lock", e))
    }

    /// Opens (creating, mode 0600) the lock file for writing, refusing a symlink.
    pub(crate) fn open_lock(&self) -> Result<File> {
        open_private(&self.lock(), false).map_err(|e| Error::os("open manager lock", e))
    }

    /// Opens (creating, mode 0600) the log file for appending, refusing a symlink.
    pub(crate) fn open_log(&self) -> Result<File> {
        open_private(&self.log(), true).map_err(|e| Error::os("open manager log", e))
    }

    /// Creates the directory (mode `0700`) if it is missing, then [`RuntimeDir::check`]s it.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use std::os::unix::fs::PermissionsExt;
    /// use shmrc::manager::RuntimeDir;
    ///
    /// let uid = nix::unistd::geteuid().as_raw();
    /// let parent = tempfile::tempdir().unwrap();
    /// let runtime = RuntimeDir::at(parent.path().join("shmrc"));
    /// runtime.ensure(uid)?;
    /// let mode = std::fs::metadata(runtime.path()).unwrap().permissions().mode();
    /// assert_eq!(mode & 0o777, 0o700);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn ensure(&self, uid: u32) -> Result<()> {
        match DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(self.unsafe_dir(format!("cannot create it: {e}"))),
        }
        self.check(uid)
    }

    /// Checks that the directory is a real directory (not a symlink) owned by `uid` with
    /// no permission for group or others; else [`Error::UnsafeRuntimeDir`] says what is
    /// wrong with it.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use std::os::unix::fs::PermissionsExt;
    /// use shmrc::manager::RuntimeDir;
    ///
    /// let uid = nix::unistd::geteuid().as_raw();
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    /// let err = RuntimeDir::at(dir.path()).check(uid).unwrap_err();
    /// assert!(matches!(err, shmrc::Error::UnsafeRuntimeDir { .. }));
    /// std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    /// RuntimeDir::at(dir.path()).check(uid)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn check(&self, uid: u32) -> Result<()> {
        let meta = fs::symlink_metadata(&self.dir)
            .map_err(|e| self.unsafe_dir(format!("cannot stat it: {e}")))?;
        if meta.file_type().is_symlink() {
            return Err(self.unsafe_dir("it is a symlink".into()));
        }
        if !meta.is_dir() {
            return Err(self.unsafe_dir("it is not a directory".into()));
        }
        if meta.uid() != uid {
            return Err(self.unsafe_dir(format!("it belongs to uid {}, not {uid}", meta.uid())));
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(self.unsafe_dir(format!(
                "its mode is {mode:03o}: group or others may use it (want 700)"
            )));
        }
        Ok(())
    }

    fn unsafe_dir(&self, why: String) -> Error {
        Error::UnsafeRuntimeDir {
            path: self.dir.clone(),
            why,
        }
    }
}

/// Opens `path` for writing (appending or not), creating it with mode 0600; a symlink
/// is refused (`O_NOFOLLOW`).
fn open_private(path: &Path, append: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod versioned_names {
    use super::{LOCK_FILE, SOCKET_FILE};
    use crate::manager::wire::VERSION;

    #[test]
    fn the_socket_and_lock_names_carry_the_wire_version() {
        assert_eq!(SOCKET_FILE, format!("manager-v{VERSION}.sock"));
        assert_eq!(LOCK_FILE, format!("manager-v{VERSION}.lock"));
        assert_eq!(super::START_LOCK_FILE, format!("start-v{VERSION}.lock"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn uid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn a_missing_dir_is_created_private() {
        let parent = tempfile::tempdir().unwrap();
        let rt = RuntimeDir::at(parent.path().join("shmrc"));
        rt.ensure(uid()).unwrap();
        let mode = fs::metadata(rt.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn an_open_dir_a_symlink_or_another_users_dir_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let open = parent.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        let why = RuntimeDir::at(&open).ensure(uid()).unwrap_err().to_string();
        assert!(why.contains("755"), "{why}");

        let link = parent.path().join("link");
        std::os::unix::fs::symlink(parent.path(), &link).unwrap();
        let why = RuntimeDir::at(&link).check(uid()).unwrap_err().to_string();
        assert!(why.contains("symlink"), "{why}");

        let why = RuntimeDir::at(parent.path())
            .check(uid().wrapping_add(1))
            .unwrap_err()
            .to_string();
        assert!(why.contains("belongs to uid"), "{why}");

        let file = parent.path().join("file");
        fs::write(&file, b"").unwrap();
        assert!(matches!(
            RuntimeDir::at(&file).check(uid()),
            Err(Error::UnsafeRuntimeDir { .. })
        ));
    }

    #[test]
    fn a_socket_path_longer_than_sun_path_is_refused_by_name() {
        let rt = RuntimeDir::at(format!("/tmp/{}", "d".repeat(120)));
        match rt.socket() {
            Err(Error::SocketPathTooLong { path, len, max }) => {
                assert!(path.ends_with(SOCKET_FILE));
                assert!(len > max);
            }
            other => panic!("{other:?}"),
        }
        assert!(RuntimeDir::at("/tmp/x").socket().is_ok());
    }
}
