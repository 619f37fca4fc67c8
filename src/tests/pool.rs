//! The pool (`pool`) with buffers lent to other simulated processes: a live
//! borrower's and a dead one's buffers take turns for the recycle attempt.

use crate::buf::{CreateOptions, ShmBuf};
use crate::namespace::Namespace;
use crate::os::sim::SimKernel;
use crate::pool::{PoolLimits, ShmPool};
use crate::strategy::Strategy;
use crate::tests::util::pass_over_sim_stream;

#[test]
fn lent_buffers_take_turns_for_the_recycle_attempt() {
    let kernel = SimKernel::new(1);
    let (os, consumer) = (kernel.spawn(1000), kernel.spawn(1000));
    let options = CreateOptions::new()
        .strategy(Strategy::FileDescriptor)
        .namespace(Namespace::new("shmrc-pool-unit").unwrap());
    let pool = ShmPool::with_os(os.clone(), options, PoolLimits::default()).unwrap();
    let (a, b) = (pool.get(64).unwrap(), pool.get(64).unwrap());
    // `a` is held by a live consumer, `b` by one that dies: both lent.
    let (share_a, share_b) = (a.share().unwrap(), b.share().unwrap());
    let held_a = ShmBuf::attach(pass_over_sim_stream(&kernel, &os, &consumer, share_a));
    let dying = kernel.spawn(1000);
    let held_b = ShmBuf::attach(pass_over_sim_stream(&kernel, &os, &dying, share_b));
    let (held_a, held_b) = (held_a.unwrap(), held_b.unwrap());
    let (key_a, key_b) = (a.key(), b.key());
    drop((a, b));
    kernel.kill(dying.pid());
    // The first try is `a` (live: rolled back, a new buffer); the next is `b`.
    let first = pool.get(64).unwrap();
    assert!(first.key() != key_a && first.key() != key_b, "a new one");
    assert_eq!((pool.stats().created, pool.stats().recycled), (3, 0));
    let second = pool.get(64).unwrap();
    assert_eq!(
        second.key(),
        key_b,
        "the dead consumer's buffer, in its turn"
    );
    assert_eq!(second.generation(), 1);
    drop((held_a, held_b));
}
