//! What the cross-module tests share: handing a buffer to another simulated process.

use crate::handle::ShareHandle;
use crate::os::sim::{SimKernel, SimOs};
use crate::transport::{recv_with, send_with};

/// `handle`, sent by `from` to `to` over a simulated Unix stream and received there:
/// how a test hands a buffer to another simulated process.
pub(crate) fn pass_over_sim_stream(
    kernel: &SimKernel,
    from: &SimOs,
    to: &SimOs,
    handle: ShareHandle<SimOs>,
) -> ShareHandle<SimOs> {
    let (tx, rx) = kernel.stream_pair(from, to);
    send_with(from, &tx, b"", vec![handle]).unwrap();
    recv_with(to, &rx).unwrap().handles.pop().unwrap()
}
