//! [`CreateOptions`]: how a buffer is created (strategy, holder slots, namespace), the
//! builder that [`ShmBuf::with_options`](super::ShmBuf::with_options) and a pool take.

use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::protocol::segment::DEFAULT_CAPACITY;
use crate::strategy::{Strategy, strategy_in_force};

/// How to create a buffer. `Default`: the process-wide strategy, 64 holder slots, the
/// namespace `shmrc`.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .capacity(8)
///     .namespace(Namespace::new("shmrc-doc-options")?);
/// let buf = ShmBuf::with_options(1024, &options)?;
/// assert_eq!(buf.strategy(), Strategy::FileSystem);
/// assert!(buf.name().unwrap().starts_with("shmrc-doc-options."));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CreateOptions {
    strategy: Option<Strategy>,
    /// Holder slots (see [`CreateOptions::capacity`]).
    pub(super) capacity: usize,
    /// Where file_system buffers are named (see [`CreateOptions::namespace`]).
    pub(super) namespace: Namespace,
}

impl Default for CreateOptions {
    fn default() -> CreateOptions {
        CreateOptions {
            strategy: None,
            capacity: DEFAULT_CAPACITY,
            namespace: Namespace::default(),
        }
    }
}

impl CreateOptions {
    /// The defaults: the process-wide strategy ([`crate::sharing_strategy`]), 64 holder
    /// slots, the namespace `shmrc`.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, ShmBuf};
    ///
    /// let buf = ShmBuf::with_options(16, &CreateOptions::new())?;
    /// assert_eq!(buf.strategy(), shmrc::sharing_strategy());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new() -> CreateOptions {
        CreateOptions::default()
    }

    /// Use `strategy` instead of the process-wide one.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::{CreateOptions, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    /// let buf = ShmBuf::with_options(16, &options)?;
    /// assert_eq!(buf.strategy(), Strategy::FileDescriptor);
    /// assert_eq!(buf.name(), None); // an anonymous memfd has no name
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn strategy(mut self, strategy: Strategy) -> CreateOptions {
        self.strategy = Some(strategy);
        self
    }

    /// Holder slots of a file_system buffer, or of a file_descriptor buffer from a
    /// [`crate::ShmPool`] (1 to 4096; a plain file_descriptor buffer has none): how many
    /// processes may hold it at once, in-flight handles included. A share beyond that is
    /// [`Error::HoldersFull`] while every slot's holder lives; a capacity out of range
    /// is [`Error::InvalidArgument`] at creation.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-capacity")?)
    ///     .capacity(2);
    /// let buf = ShmBuf::with_options(64, &options)?; // this process holds slot 1
    /// let handle = buf.share()?; // the handle in flight holds slot 2
    /// assert!(matches!(buf.share(), Err(Error::HoldersFull { capacity: 2, .. })));
    /// drop(handle); // an unattached handle gives its slot back
    /// let _again = buf.share()?;
    ///
    /// let too_many = CreateOptions::new().strategy(Strategy::FileSystem).capacity(5000);
    /// assert!(matches!(ShmBuf::with_options(64, &too_many), Err(Error::InvalidArgument(_))));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn capacity(mut self, capacity: usize) -> CreateOptions {
        self.capacity = capacity;
        self
    }

    /// Create file_system buffers in `namespace` (file_descriptor buffers have no name).
    /// A job that uses a namespace of its own can [`sweep()`](crate::sweep()) or
    /// [`inspect()`](crate::inspect()) just its segments.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let ns = Namespace::new("shmrc-doc-namespace")?;
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let listed = shmrc::inspect(&ns)?;
    /// assert_eq!(listed.segments.len(), 1);
    /// assert_eq!(Some(listed.segments[0].name.as_str()), buf.name());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn namespace(mut self, namespace: Namespace) -> CreateOptions {
        self.namespace = namespace;
        self
    }

    /// Whether a recyclable buffer ([`ShmBuf::create_recyclable`](super::ShmBuf::create_recyclable), a pool's) can be
    /// made with these options and `strategy`: it needs a holder slot.
    pub(crate) fn check_recyclable(&self, strategy: Strategy) -> Result<()> {
        if self.capacity == 0 {
            return Err(Error::InvalidArgument(format!(
                "a recycled {strategy} buffer needs at least one holder slot"
            )));
        }
        Ok(())
    }

    /// The strategy a create with these options uses now.
    pub(crate) fn resolved_strategy(&self) -> Result<Strategy> {
        match self.strategy {
            Some(strategy) => Ok(strategy),
            None => Ok(strategy_in_force()?),
        }
    }
}
