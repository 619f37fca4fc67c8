//! [`Watched`]: the production OS. It is the real kernel with one policy on top:
//! before this process creates or attaches a file_system segment of a namespace, the
//! user's manager is told (as the [`ManagerMode`](super::ManagerMode) says): that it
//! creates there, or which segment it attaches, so that its death gets just those swept
//! within milliseconds. The kernel backend itself
//! knows nothing of the manager.

use super::client;
use crate::error::Result;
use crate::namespace::Namespace;
use crate::os::posix::PosixOs;
use crate::os::{Layer, Os};

/// The real kernel, with the user's manager watching each file_system use. This is
/// [`crate::DefaultOs`]: what [`crate::ShmBuf`] and the rest run on when no OS is named,
/// so user code has no need to name it.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{ShmBuf, manager::Watched};
///
/// let buf: ShmBuf<Watched> = ShmBuf::new(64)?; // the same type as `ShmBuf`
/// assert_eq!(buf.len(), 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct Watched(PosixOs);

impl Layer for Watched {
    type Inner = PosixOs;

    fn inner(&self) -> &PosixOs {
        &self.0
    }

    fn on_named_use(&self, namespace: &str, segment: Option<&str>) -> Result<()> {
        self.0.before_named_use(namespace, segment)?;
        client::watch(&Namespace::new(namespace)?, segment)
    }
}
