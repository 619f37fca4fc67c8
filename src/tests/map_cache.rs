//! The map cache (`buf::map_cache`) with pooled memfds handed between processes. A memfd
//! is the same segment only if the descriptor that arrives is the cached file: a handle
//! that pairs one pooled memfd's description with another's descriptor must not take the
//! first one's cached mapping.

use crate::buf::map_cache::stats;
use crate::buf::{CreateOptions, ShmBuf};
use crate::error::Error;
use crate::handle::ShareHandle;
use crate::os::sim::SimKernel;
use crate::pool::{PoolLimits, ShmPool};
use crate::strategy::Strategy;
use crate::tests::util::pass_over_sim_stream;

#[test]
fn another_memfd_under_a_cached_key_is_a_miss_and_drops_the_entry() {
    let kernel = SimKernel::new(1);
    let (producer, consumer) = (kernel.spawn(1000), kernel.spawn(1000));
    let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let pool = ShmPool::with_os(producer.clone(), options, PoolLimits::default()).unwrap();
    let (a, b) = (pool.get(64).unwrap(), pool.get(64).unwrap());
    drop(
        ShmBuf::attach(pass_over_sim_stream(
            &kernel,
            &producer,
            &consumer,
            a.share().unwrap(),
        ))
        .unwrap(),
    );
    assert_eq!(stats(&consumer).entries, 1);
    // `a`'s description (key, share key, in-flight slot) with `b`'s memfd.
    let of_a = pass_over_sim_stream(&kernel, &producer, &consumer, a.share().unwrap());
    let mut of_b = pass_over_sim_stream(&kernel, &producer, &consumer, b.share().unwrap());
    let forged = ShareHandle {
        os: consumer.clone(),
        meta: of_a.meta,
        target: of_b.take_target(),
    };
    let refused = ShmBuf::attach(forged);
    assert!(
        matches!(refused, Err(Error::Malformed { .. })),
        "{refused:?}"
    );
    let s = stats(&consumer);
    assert_eq!((s.hits, s.entries), (0, 0), "{s:?}: not taken, and dropped");
    // `a`'s own handle still attaches `a` (afresh).
    let attached = ShmBuf::attach(of_a).unwrap();
    assert_eq!(attached.key(), a.key());
    assert_eq!(stats(&consumer).misses, 3);
}
