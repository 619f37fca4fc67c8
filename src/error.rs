//! The one error type of shmrc: each cause a caller may need to tell apart is its own
//! variant, carrying the segment it concerns and the numbers that explain it.
//!
//! Nothing in shmrc panics on bad input (a hostile header, a forged handle, a truncated
//! file): every such case ends here, and the operation that failed has changed nothing
//! the caller could lose.

use std::io;

use crate::strategy::Strategy;

/// `Result` with [`Error`]: what every fallible shmrc call returns.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// fn scratch(len: usize) -> shmrc::Result<shmrc::ShmBuf> {
///     let buf = shmrc::ShmBuf::new(len)?;
///     buf.write_at(0, b"ready")?;
///     Ok(buf)
/// }
/// assert_eq!(scratch(64)?.len(), 64);
/// assert!(scratch(2).is_err()); // "ready" does not fit
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a shmrc operation failed.
///
/// Each cause a caller may need to tell apart is its own variant, carrying the segment
/// it concerns and the numbers that explain it; each variant's doc says when it
/// happens and what the caller can do. Nothing in shmrc panics on bad input (a hostile
/// header, a forged handle, a truncated file): every such case ends here, and the
/// operation that failed has changed nothing the caller could lose.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Error, ShareHandle, ShmBuf};
///
/// fn open(bytes: &[u8]) -> shmrc::Result<Option<ShmBuf>> {
///     match ShmBuf::attach(ShareHandle::from_bytes(bytes)?) {
///         Ok(buf) => Ok(Some(buf)),
///         // The producer's buffer was released meanwhile: skip this item.
///         Err(Error::Gone { .. }) => Ok(None),
///         Err(e) => Err(e),
///     }
/// }
/// let err = open(b"garbage").unwrap_err();
/// assert!(matches!(err, Error::Malformed { .. }));
/// assert!(err.to_string().starts_with("malformed share handle"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The segment no longer exists: its name was unlinked, or a finalizer has already
    /// committed to destroying it (every holder slot is a tombstone). Nothing to retry;
    /// the sender must share a live buffer again.
    #[error("segment {segment} is gone: it was unlinked, or its last holder released it")]
    Gone {
        /// The segment's name (file_system) or description (file_descriptor).
        segment: String,
    },

    /// The handle describes an earlier use of a segment that its creator has recycled
    /// since (a [`ShmPool`](crate::ShmPool) reuses segments nobody holds any more):
    /// the data the handle pointed at is gone, and the segment now holds another use's.
    /// Nothing was read and no slot is kept; the sender must share its buffer again.
    #[error(
        "segment {segment} was recycled: the handle is of generation {handle}, the segment is now in generation {segment_generation}"
    )]
    Stale {
        /// The segment's name.
        segment: String,
        /// The generation (use) the handle describes.
        handle: u64,
        /// The segment's generation now.
        segment_generation: u64,
    },

    /// The segment exists but its creator has not published the header yet, or died
    /// before it did. A handle made by [`ShmBuf::share`](crate::ShmBuf::share) never
    /// points at such a segment, so the name did not come from one: nothing to retry.
    /// A sweep removes the segment once its creator is dead.
    #[error("segment {segment} is half-created: its creator has not published the header")]
    HalfCreated {
        /// The segment.
        segment: String,
    },

    /// A descriptor received as a memfd (in a file_descriptor handle, or inherited) is
    /// not shared memory: a pipe, a socket, a device, a directory or a file on a disk.
    /// It did not come from [`ShmBuf::share`](crate::ShmBuf::share); nothing was mapped.
    #[error(
        "the descriptor given as {segment} is {what}, not shared memory (a memfd or a file in /dev/shm): it did not come from a shmrc handle"
    )]
    NotSharedMemory {
        /// What the descriptor was given as ("received memfd").
        segment: String,
        /// What it is ("a pipe").
        what: &'static str,
    },

    /// The segment's file is shorter than its header says it must be: something other
    /// than shmrc truncated it (another process of this user can). The segment cannot
    /// be used; share a fresh buffer. A sweep leaves it in place and reports it; remove
    /// it by hand once you know who damaged it.
    #[error("segment {segment} is truncated: it has {have} bytes, its layout needs {need}")]
    Truncated {
        /// The segment.
        segment: String,
        /// Bytes the layout needs.
        need: u64,
        /// Bytes the file has.
        have: u64,
    },

    /// The first word of the segment is not shmrc's magic: it is not a shmrc segment,
    /// although its name is in a shmrc namespace (someone else wrote it). shmrc never
    /// uses it; a sweep leaves it in place and reports it. Find out who created it
    /// before removing it by hand.
    #[error("segment {segment} is not a shmrc segment (magic {found:#018x})")]
    BadMagic {
        /// The segment.
        segment: String,
        /// The word found where the magic belongs.
        found: u64,
    },

    /// The segment, handle or transport frame was written by a shmrc with another
    /// layout version. Run the same shmrc version in every process that shares
    /// buffers; a sweep leaves such segments in place for the version that wrote them.
    #[error("{segment} has layout version {found}; this build reads version {supported}")]
    WrongVersion {
        /// The segment or handle.
        segment: String,
        /// The version found.
        found: u64,
        /// The version this build reads and writes.
        supported: u64,
    },

    /// The segment belongs to another user (file owner or recorded uid differ). shmrc
    /// shares only between processes of one user: run producer and consumer as the
    /// same user. A sweep leaves the segment in place.
    #[error("segment {segment} belongs to uid {owner}, not to this user (uid {me})")]
    OtherUser {
        /// The segment.
        segment: String,
        /// Its owner.
        owner: u32,
        /// The calling process's effective uid.
        me: u32,
    },

    /// The segment was created in another pid namespace, where holder tokens name other
    /// processes than here; attaching would make liveness checks lie. Run the processes
    /// that share file_system buffers in one pid namespace (e.g. one container), or use
    /// [`Strategy::FileDescriptor`], whose memfd needs no liveness checks. A sweep here
    /// leaves the segment to a sweep in its own pid namespace.
    #[error(
        "segment {segment} was created in pid namespace {theirs}, this process is in {ours}: \
         holder liveness cannot be checked across pid namespaces"
    )]
    OtherPidNamespace {
        /// The segment.
        segment: String,
        /// The creator's pid namespace id.
        theirs: u64,
        /// Ours.
        ours: u64,
    },

    /// This process cannot hold a slot: its time namespace shifts the start times it
    /// reads from `/proc` by an amount it cannot tell to the clock tick, so other
    /// processes could not judge its token, nor it theirs (a live holder could be taken
    /// for dead). `why` names the cause: a boottime offset that is not a whole number
    /// of clock ticks (set it in whole seconds, as `unshare --boottime` does), or a
    /// process that left for its children's time namespace without `exec`. Use
    /// [`Strategy::FileDescriptor`] without a pool (no slots), or run the process in a
    /// time namespace whose offset is whole ticks.
    #[error(
        "this process cannot hold shmrc segments: {why}; holder liveness cannot be checked \
         across its time namespace"
    )]
    TimeNamespace {
        /// The cause.
        why: String,
    },

    /// A header field is inconsistent (checksum, capacity, offsets) or a handle does not
    /// match the segment it names (the name was reused, or the handle was forged). The
    /// segment is not used; share a fresh buffer. A sweep leaves a corrupted segment in
    /// place and reports it.
    #[error("segment {segment} is corrupted: {what}")]
    Corrupted {
        /// The segment.
        segment: String,
        /// Which check failed.
        what: String,
    },

    /// The shared-memory file system (`/dev/shm`) or memory is full: creation failed
    /// before any byte was handed out (no SIGBUS later), and nothing is left behind.
    /// Release buffers (or [`sweep()`](crate::sweep()) dead ones), create a smaller
    /// one, or give `/dev/shm` more room (`mount -o remount,size=...`, or
    /// `--shm-size` for a container).
    #[error("no space for a {len}-byte segment: /dev/shm or memory is full ({source})")]
    NoSpace {
        /// The size asked for, header included.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The process (or system) hit its open-file limit, or file descriptors passed over
    /// a socket were dropped by the kernel for that reason (a connection that lost
    /// descriptors is out of step: close it). Release buffers, raise `RLIMIT_NOFILE`
    /// ([`raise_fd_limit`](crate::raise_fd_limit) up to the hard limit, `ulimit -n`
    /// beyond it; shmrc never raises it by itself), or switch to [`Strategy::FileSystem`], which keeps no descriptor
    /// open per buffer. shmrc's own share of the descriptors is counted: the process
    /// descriptors it kept to judge other processes' liveness quickly (at most 64, and at
    /// most 1/16 of the limit) are closed when the limit is hit, and their number is
    /// `liveness_fds`.
    #[error(
        "too many open files in {call} (RLIMIT_NOFILE soft limit {limit}{}): release \
         buffers, raise the limit (shmrc::raise_fd_limit), or switch to the file_system strategy",
        if *liveness_fds > 0 {
            format!("; {liveness_fds} were shmrc's liveness descriptors, closed now")
        } else {
            String::new()
        }
    )]
    TooManyFds {
        /// The call that hit the limit.
        call: &'static str,
        /// The soft limit in force.
        limit: u64,
        /// How many of the open descriptors were shmrc's liveness descriptors (closed
        /// since, leaving that many free).
        liveness_fds: u32,
    },

    /// Every holder slot of the segment is held by a live process or a handle in flight.
    /// The capacity is fixed at creation: attach it in fewer processes at once, attach
    /// or drop the handles in flight, or create it with a larger
    /// [`CreateOptions::capacity`](crate::CreateOptions::capacity).
    #[error("all {capacity} holder slots of {segment} are held by live processes")]
    HoldersFull {
        /// The segment.
        segment: String,
        /// Its slot capacity.
        capacity: u32,
    },

    /// A name that is not inside this user's shmrc namespaces: shmrc never opens,
    /// unlinks or trusts it. A handle naming it was forged, or comes from another user:
    /// share only between processes of one user, from handles made by
    /// [`ShmBuf::share`](crate::ShmBuf::share).
    #[error("{name:?} is outside the namespace {namespace}")]
    OutsideNamespace {
        /// The name.
        name: String,
        /// The namespace (prefix and uid) it was checked against.
        namespace: String,
    },

    /// A namespace prefix that shmrc cannot use; `why` says which rule it breaks. Use
    /// a prefix that starts with `shmrc`, of at most 48 ASCII letters, digits, `-` and
    /// `_` (see [`Namespace::new`](crate::Namespace::new)).
    #[error("invalid namespace prefix {prefix:?}: {why}")]
    BadNamespace {
        /// The prefix.
        prefix: String,
        /// What is wrong with it.
        why: &'static str,
    },

    /// Bytes that do not decode as a share handle or transport frame, a manager frame
    /// or reply; nothing was opened. Pass only bytes made by
    /// [`ShareHandle::into_bytes`](crate::ShareHandle::into_bytes) or
    /// [`transport::send`](crate::transport::send) of the same shmrc version; a
    /// connection that delivered them is out of step: close it.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why it was refused.
        why: String,
    },

    /// A read or write outside the buffer; nothing was copied. Keep `offset + len`
    /// within [`ShmBuf::len`](crate::ShmBuf::len).
    #[error("{len} bytes at offset {offset} are out of bounds for a {size}-byte buffer")]
    OutOfBounds {
        /// Start of the access.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's length.
        size: usize,
    },

    /// A size, capacity or setting that shmrc refuses (zero, too large, an unreadable
    /// environment variable, an already attached handle); the message says which and
    /// the accepted range. Fix the value: retrying the same call fails the same way.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A strategy name that is not one of [`crate::all_sharing_strategies`]: use
    /// `file_descriptor` or `file_system`.
    #[error(transparent)]
    UnknownStrategy(#[from] crate::strategy::UnknownStrategy),

    /// An operation that needs a different strategy (e.g. turning a file_descriptor
    /// handle into bytes: its fd must travel over a socket). Send it with
    /// [`transport::send`](crate::transport::send) instead, or create the buffer with
    /// [`Strategy::FileSystem`].
    #[error("{op} is not possible with the {strategy} strategy")]
    WrongStrategy {
        /// The operation.
        op: &'static str,
        /// The strategy of the buffer or handle.
        strategy: Strategy,
    },

    /// This process does not hold the buffer: it inherited it across `fork` (the
    /// reference belongs to the parent). Call `ShmBuf::reattach` to hold it here. A
    /// [`Publisher`](crate::pubsub::Publisher) inherited across `fork` gives this too
    /// (naming its service): the service is the parent's.
    #[error("this process does not hold {segment} (inherited across fork?): reattach it first")]
    NotHolder {
        /// The segment.
        segment: String,
    },

    /// A buffer could not be frozen ([`ShmBuf::freeze`](crate::ShmBuf::freeze),
    /// [`ShmBufMut::freeze`](crate::ShmBufMut::freeze)): it is a file_system buffer
    /// (named segments cannot be sealed), another clone of it lives in this process,
    /// this process does not hold it, or another process still maps it writable.
    /// `why` says which. The buffer is handed back unchanged in the
    /// [`FreezeError`](crate::FreezeError) (freeze before sharing, or drop the clones).
    #[error("cannot freeze {segment}: {why}")]
    CannotFreeze {
        /// The segment.
        segment: String,
        /// What stands in the way.
        why: String,
    },

    /// A handle given to [`FrozenBuf::attach`](crate::FrozenBuf::attach) is not of a
    /// frozen buffer: a file_system handle, or a memfd that is not sealed against
    /// writes. Attach it as a [`ShmBuf`](crate::ShmBuf) instead (with the usual
    /// `unsafe` contract for zero-copy reads), or have the sender freeze it first.
    #[error("{segment} is not frozen (sealed against writes): {why}")]
    NotFrozen {
        /// The segment.
        segment: String,
        /// Why it does not qualify.
        why: &'static str,
    },

    /// A typed view that does not fit the bytes: the range is outside the buffer, its
    /// start is not aligned for `T`, or its length is not a multiple of `T`'s size.
    /// Nothing was read or written; pick a range that fits (buffers' data starts
    /// 64-byte aligned, so offsets that are multiples of `align_of::<T>()` are).
    #[error(
        "cannot view {len} bytes at offset {offset} of a {size}-byte buffer as [{type_name}]: {why}"
    )]
    BadView {
        /// The element type.
        type_name: &'static str,
        /// Start of the range in bytes.
        offset: usize,
        /// Length of the range in bytes.
        len: usize,
        /// The buffer's length in bytes.
        size: usize,
        /// What does not fit.
        why: &'static str,
    },

    /// No message began within the time given to
    /// `channel::Receiver::recv_timeout` (or none was
    /// waiting, for `try_recv`). Nothing was read: the channel is in step, call again.
    #[error("no message within {after:?}")]
    Timeout {
        /// How long the call waited.
        after: std::time::Duration,
    },

    /// A channel message that serde could not encode or decode: a type that postcard
    /// cannot carry (it is not self-describing: `#[serde(flatten)]`, untagged enums and
    /// `deserialize_any` are out), a `ShmBuf` serialized outside a channel, or bytes
    /// that are not a `T` (the two ends disagree on the type). A failed send sent
    /// nothing; after a failed receive the message is dropped (its buffers released)
    /// and the channel stays in step.
    #[error("cannot {during} a channel message: {why}")]
    Codec {
        /// `"encode"` or `"decode"`.
        during: &'static str,
        /// What serde or postcard said.
        why: String,
    },

    /// A channel to another process could not be set up: the child exited before it
    /// connected, nobody connected in time, or the variable naming the server
    /// (`SHMRC_CHANNEL`) is missing in a process that was not started by
    /// `channel::spawn`. `why` says which.
    #[error("cannot set up the channel: {why}")]
    Bootstrap {
        /// What went wrong.
        why: String,
    },

    /// The peer closed the socket (between messages, for
    /// [`transport::recv`](crate::transport::recv)), or the manager closed its
    /// connection. For a transport: the sender is done or gone, stop receiving from
    /// it. For the manager: the next file_system create or attach connects again.
    #[error("the peer closed the connection")]
    Disconnected,

    /// A system call failed for a reason without a variant of its own; `source` is the
    /// OS error (e.g. `EACCES` for `/dev/shm` permissions, `ENOMEM` for a mapping).
    /// Nothing was changed that the caller could lose; whether a retry helps depends on
    /// the error.
    #[error("{call} failed: {source}")]
    Os {
        /// The call that failed.
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The simulated process making the call was killed. Only the simulated kernel the
    /// checkers use returns it (a SIGKILLed real process makes no further call); no
    /// production path produces or handles it, so the variant exists only in the builds
    /// that carry that kernel (the checkers' seam, loom, shuttle, the unit tests), never
    /// in a user's (`Error` is `#[non_exhaustive]`: a variant more is no breaking change).
    #[cfg(any(feature = "checkers", shmrc_loom, shmrc_shuttle, test))]
    #[error("the simulated process was killed")]
    Killed,

    // --- The manager daemon (issue 4, `crate::manager`). ---
    /// The manager's runtime directory cannot be trusted (another user's, open to
    /// group or others, a symlink, not a directory) or created; `why` says which. Fix
    /// it (`chmod 700`, remove the symlink) or point `SHMRC_RUNTIME_DIR` at a private
    /// directory of this user; or turn the manager off
    /// ([`manager::ManagerMode::Off`](crate::manager::ManagerMode::Off)).
    #[error(
        "manager runtime directory {path}: {why} (fix it, or set SHMRC_RUNTIME_DIR to a \
         private directory of this user)"
    )]
    UnsafeRuntimeDir {
        /// The directory.
        path: std::path::PathBuf,
        /// What is wrong with it.
        why: String,
    },

    /// The manager's socket path does not fit a Unix socket address (`sun_path`).
    #[error(
        "manager socket path {path} is {len} bytes, a Unix socket path holds at most {max}: \
         set SHMRC_RUNTIME_DIR to a shorter directory"
    )]
    SocketPathTooLong {
        /// The path.
        path: std::path::PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The most that fits.
        max: usize,
    },

    /// No manager answers at the socket (mode
    /// [`Connect`](crate::manager::ManagerMode::Connect), or
    /// [`manager::status`](crate::manager::status)). Start one (`shmrc manager`), or
    /// use mode [`Auto`](crate::manager::ManagerMode::Auto), which starts one itself.
    #[error("no shmrc manager is running at {socket} ({source})")]
    NoManager {
        /// The socket tried.
        socket: std::path::PathBuf,
        /// Why connecting failed.
        #[source]
        source: io::Error,
    },

    /// A manager was started (from this program's own image, or the program named by
    /// `SHMRC_MANAGER_PROGRAM`) but none came up; the reason names its log. Read the
    /// log (`manager.log` in the runtime directory), fix `SHMRC_MANAGER_PROGRAM`, or
    /// run without a manager ([`manager::ManagerMode::Off`](crate::manager::ManagerMode::Off),
    /// sweeping yourself).
    #[error("starting the shmrc manager with {program} failed: {why}")]
    ManagerStart {
        /// The program run.
        program: std::path::PathBuf,
        /// What happened.
        why: String,
    },

    /// The manager refused this process's request (it names more namespaces than a
    /// client may, the manager has too many connections, or the process could not be
    /// verified); `reason` says which, and the manager's log has it too. The process is
    /// not watched: use fewer namespaces, or run without a manager
    /// ([`manager::ManagerMode::Off`](crate::manager::ManagerMode::Off)) and sweep.
    #[error("the shmrc manager refused: {reason}")]
    ManagerRefused {
        /// The manager's reason.
        reason: String,
    },

    /// The manager did not answer a request that this file_system create or attach
    /// needed (its Hello, or a Watch) within `waited`: it is stopped (`SIGSTOP`, a
    /// debugger, a frozen cgroup) or overloaded. Nothing was taken. Continue it (`kill
    /// -CONT <pid>`), kill it (the next create starts a new one), or run without a
    /// manager ([`manager::ManagerMode::Off`](crate::manager::ManagerMode::Off)) and
    /// sweep. Threads of this process that waited for the same answer get the same
    /// error; a create or attach that needed no answer went ahead meanwhile.
    #[error(
        "the shmrc manager{} at {} did not answer within {waited:?}: it is stopped or \
         overloaded; continue it (kill -CONT), kill it (the next create starts another), or \
         run with SHMRC_MANAGER=off and sweep",
        match pid { Some(pid) => format!(" (pid {pid})"), None => String::new() },
        socket.display()
    )]
    ManagerTimeout {
        /// The manager's pid, where the socket's peer credentials gave it.
        pid: Option<u32>,
        /// The socket it was asked on.
        socket: std::path::PathBuf,
        /// How long this process waited.
        waited: std::time::Duration,
    },

    // --- CUDA (feature `cuda`, `crate::cuda`). ---
    #[cfg(feature = "cuda")]
    /// No CUDA driver could be used (no `libcuda.so.1`, a missing entry point, no
    /// device, or `cuInit` failed). Every device call returns this on a machine without
    /// a GPU; nothing else is wrong: fall back to host buffers ([`ShmBuf`](crate::ShmBuf)),
    /// or to `CudaDevice::fake` (feature `cuda-fake`) in tests.
    #[error("CUDA is unavailable: {reason}")]
    CudaUnavailable {
        /// Why the driver could not be used.
        reason: String,
    },

    #[cfg(feature = "cuda")]
    /// A CUDA driver call returned an error code; `name` is the driver's name for it.
    /// `CUDA_ERROR_OUT_OF_MEMORY`: drop buffers and `CudaDevice::collect` what other
    /// processes released; other codes are the driver's to explain (its documentation
    /// of `call`).
    #[error("{call} failed with CUDA error {code} ({name})")]
    Cuda {
        /// The driver entry point.
        call: &'static str,
        /// The `CUresult` it returned.
        code: i32,
        /// The driver's name for the code (`CUDA_ERROR_...`), or `"unknown"`.
        name: String,
    },

    #[cfg(feature = "cuda")]
    /// A device handle was attached in the process that exported it: CUDA refuses to
    /// open an IPC handle there, so shmrc refuses first. Use the producer's own buffer.
    #[error("device buffer {segment} was exported by this process: attach it in another process")]
    CudaOwnExport {
        /// The keep-alive segment of the buffer.
        segment: String,
    },

    #[cfg(feature = "cuda")]
    /// The data part of a device buffer's keep-alive segment does not describe a device
    /// allocation (another kind of segment, another layout version, or damaged), or
    /// describes one beyond the mapped allocation. The handle did not come from a
    /// `DeviceBuf::share` of the same shmrc version: nothing was opened; share again.
    #[error("{segment} does not describe a device allocation: {what}")]
    CudaBadIdentity {
        /// The keep-alive segment.
        segment: String,
        /// What is wrong with it.
        what: String,
    },

    #[cfg(feature = "cuda")]
    /// The device allocator does not implement an optional operation (EMM's
    /// `get_memory_info` may be unsupported). Ask the driver instead
    /// (`CudaDevice::driver().memory_info()`), or do without.
    #[error("the device allocator does not support {op}")]
    CudaUnsupported {
        /// The operation.
        op: &'static str,
    },
}

impl Error {
    /// An [`Error::Os`] for `call` from an `errno`-style error (an [`std::io::Error`] or
    /// anything that converts into one, such as a `nix` errno).
    ///
    /// ```
    /// let err = shmrc::Error::os("shm_open", std::io::Error::from_raw_os_error(13));
    /// assert!(matches!(err, shmrc::Error::Os { call: "shm_open", .. }));
    /// assert!(err.to_string().starts_with("shm_open failed"));
    /// ```
    pub fn os(call: &'static str, source: impl Into<io::Error>) -> Error {
        Error::Os {
            call,
            source: source.into(),
        }
    }

    /// Whether this error is [`Error::Gone`]: the buffer a handle named was released
    /// before it was attached.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-is-gone")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// // The receiver gives the in-flight reference back without attaching, then the
    /// // producer releases its own: the segment is unlinked.
    /// drop(ShareHandle::from_bytes(&bytes)?);
    /// drop(buf);
    /// let late = ShmBuf::attach(ShareHandle::from_bytes(&bytes)?);
    /// assert!(late.unwrap_err().is_gone());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }
}

/// A variable of the environment set to something shmrc cannot use is an invalid
/// argument, its message naming the variable.
impl From<crate::environment::BadVariable> for Error {
    fn from(bad: crate::environment::BadVariable) -> Error {
        Error::InvalidArgument(bad.why)
    }
}
