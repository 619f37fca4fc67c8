//! The one error type of shmrc: each cause a caller may need to tell apart is its own
//! variant, carrying the segment it concerns and the numbers that explain it.
//!
//! Nothing in shmrc panics on bad input (a hostile header, a forged handle, a truncated
//! file): every such case ends here, and the operation that failed has changed nothing
//! the caller could lose.

use std::io;

use crate::strategy::Strategy;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a shmrc operation failed.
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

    /// The segment exists but its creator has not published the header yet, or died
    /// before it did. A handle never points at such a segment; a sweep removes it once
    /// its creator is dead.
    #[error("segment {segment} is half-created: its creator has not published the header")]
    HalfCreated {
        /// The segment.
        segment: String,
    },

    /// The segment's file is shorter than its header says it must be.
    #[error("segment {segment} is truncated: it has {have} bytes, its layout needs {need}")]
    Truncated {
        /// The segment.
        segment: String,
        /// Bytes the layout needs.
        need: u64,
        /// Bytes the file has.
        have: u64,
    },

    /// The first word of the segment is not shmrc's magic: it is not a shmrc segment.
    #[error("segment {segment} is not a shmrc segment (magic {found:#018x})")]
    BadMagic {
        /// The segment.
        segment: String,
        /// The word found where the magic belongs.
        found: u64,
    },

    /// The segment (or handle) was written by a shmrc with another layout version.
    #[error("{segment} has layout version {found}; this build reads version {supported}")]
    WrongVersion {
        /// The segment or handle.
        segment: String,
        /// The version found.
        found: u64,
        /// The version this build reads and writes.
        supported: u64,
    },

    /// The segment belongs to another user (file owner or recorded uid differ).
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
    /// processes than here; attaching would make liveness checks lie.
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

    /// A header field is inconsistent (checksum, capacity, offsets) or a handle does not
    /// match the segment it names.
    #[error("segment {segment} is corrupted: {what}")]
    Corrupted {
        /// The segment.
        segment: String,
        /// Which check failed.
        what: String,
    },

    /// The shared-memory file system (`/dev/shm`) or memory is full: creation failed
    /// before any byte was handed out (no SIGBUS later).
    #[error("no space for a {len}-byte segment: /dev/shm or memory is full ({source})")]
    NoSpace {
        /// The size asked for, header included.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The process (or system) hit its open-file limit, or file descriptors passed over
    /// a socket were dropped by the kernel for that reason.
    #[error(
        "too many open files in {call} (RLIMIT_NOFILE soft limit {limit}): release buffers, \
         raise the limit, or switch to the file_system strategy"
    )]
    TooManyFds {
        /// The call that hit the limit.
        call: &'static str,
        /// The soft limit in force.
        limit: u64,
    },

    /// Every holder slot of the segment is held by a live process (capacity is fixed at
    /// creation; create with a larger capacity).
    #[error("all {capacity} holder slots of {segment} are held by live processes")]
    HoldersFull {
        /// The segment.
        segment: String,
        /// Its slot capacity.
        capacity: u32,
    },

    /// A name that is not inside this user's shmrc namespace: shmrc never opens,
    /// unlinks or trusts it.
    #[error("{name:?} is outside the namespace {namespace}")]
    OutsideNamespace {
        /// The name.
        name: String,
        /// The namespace (prefix and uid) it was checked against.
        namespace: String,
    },

    /// A namespace prefix that shmrc cannot use.
    #[error("invalid namespace prefix {prefix:?}: {why}")]
    BadNamespace {
        /// The prefix.
        prefix: String,
        /// What is wrong with it.
        why: &'static str,
    },

    /// Bytes that do not decode as a share handle or transport frame.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why it was refused.
        why: String,
    },

    /// A read or write outside the buffer.
    #[error("{len} bytes at offset {offset} are out of bounds for a {size}-byte buffer")]
    OutOfBounds {
        /// Start of the access.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's length.
        size: usize,
    },

    /// A size or capacity that shmrc refuses (zero, too large).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A strategy name that is not one of [`crate::all_sharing_strategies`].
    #[error(transparent)]
    UnknownStrategy(#[from] crate::strategy::UnknownStrategy),

    /// An operation that needs a different strategy (e.g. turning a file_descriptor
    /// handle into bytes: its fd must travel over a socket).
    #[error("{op} is not possible with the {strategy} strategy")]
    WrongStrategy {
        /// The operation.
        op: &'static str,
        /// The strategy of the buffer or handle.
        strategy: Strategy,
    },

    /// This process does not hold the buffer: it inherited it across `fork` (the
    /// reference belongs to the parent). Call `ShmBuf::reattach` to hold it here.
    #[error("this process does not hold {segment} (inherited across fork?): reattach it first")]
    NotHolder {
        /// The segment.
        segment: String,
    },

    /// The peer closed the socket.
    #[error("the peer closed the connection")]
    Disconnected,

    /// A system call failed for a reason without a variant of its own.
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
    /// production path produces or handles it.
    #[doc(hidden)]
    #[error("the simulated process was killed")]
    Killed,

    // --- The manager daemon (issue 4, `crate::manager`). ---
    /// The manager's runtime directory cannot be trusted (another user's, open to
    /// group or others, a symlink, not a directory) or created.
    #[error("manager runtime directory {path}: {why}")]
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

    /// No manager answers at the socket (mode `Connect`, or `shmrc status`).
    #[error("no shmrc manager is running at {socket} ({source})")]
    NoManager {
        /// The socket tried.
        socket: std::path::PathBuf,
        /// Why connecting failed.
        #[source]
        source: io::Error,
    },

    /// A manager was started (from this program's own image, or the program named by
    /// `SHMRC_MANAGER_PROGRAM`) but none came up; the reason names its log.
    #[error("starting the shmrc manager with {program} failed: {why}")]
    ManagerStart {
        /// The program run.
        program: std::path::PathBuf,
        /// What happened.
        why: String,
    },

    /// The manager refused this process's request.
    #[error("the shmrc manager refused: {reason}")]
    ManagerRefused {
        /// The manager's reason.
        reason: String,
    },

    // --- CUDA (feature `cuda`, `crate::cuda`). ---
    #[cfg(feature = "cuda")]
    /// No CUDA driver could be used (no `libcuda.so.1`, a missing entry point, no
    /// device, or `cuInit` failed). Every device call returns this on a machine without
    /// a GPU; nothing else is wrong.
    #[error("CUDA is unavailable: {reason}")]
    CudaUnavailable {
        /// Why the driver could not be used.
        reason: String,
    },

    #[cfg(feature = "cuda")]
    /// A CUDA driver call returned an error code.
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
    /// allocation (another kind of segment, another layout version, or damaged).
    #[error("{segment} does not describe a device allocation: {what}")]
    CudaBadIdentity {
        /// The keep-alive segment.
        segment: String,
        /// What is wrong with it.
        what: String,
    },

    #[cfg(feature = "cuda")]
    /// The device allocator does not implement an optional operation (EMM's
    /// `get_memory_info` may be unsupported).
    #[error("the device allocator does not support {op}")]
    CudaUnsupported {
        /// The operation.
        op: &'static str,
    },
}

impl Error {
    /// An [`Error::Os`] for `call` from an `errno`-style error.
    pub fn os(call: &'static str, source: impl Into<io::Error>) -> Error {
        Error::Os {
            call,
            source: source.into(),
        }
    }

    /// Whether this error is [`Error::Gone`].
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }
}
