//! Typed views and frozen buffers (src/buf/view.rs, src/buf/frozen.rs, src/buf/buf_mut.rs):
//! exclusive writes before sharing, a freeze the kernel enforces, read-only `&[T]` for
//! every holder, and each refusal an `Error` that hands the buffer back.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::net::UnixStream;

use shmrc::{CreateOptions, Error, FrozenBuf, ShmBuf, ShmBufMut, Strategy, transport};
use shmrc_testkit::names::TestNamespace;

fn fs_options(t: &TestNamespace) -> CreateOptions {
    CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone())
}

/// Sends `handle` over a socket pair and gives back what arrived (a fresh memfd).
fn round_trip(handle: shmrc::ShareHandle) -> shmrc::ShareHandle {
    let (a, b) = UnixStream::pair().unwrap();
    transport::send(&a, b"", vec![handle]).unwrap();
    transport::recv(&b).unwrap().handles.remove(0)
}

#[test]
fn an_exclusive_buffer_written_as_floats_is_read_back_frozen_as_floats() {
    let _t = TestNamespace::new("views-floats");
    let mut buf = ShmBufMut::new(1024 * 4).unwrap();
    for (i, x) in buf.cast_mut::<f32>().unwrap().iter_mut().enumerate() {
        *x = i as f32 * 0.5;
    }
    let frozen = buf.freeze().unwrap();
    let received = FrozenBuf::attach(round_trip(frozen.share().unwrap())).unwrap();
    let floats = received.cast::<f32>().unwrap();
    assert_eq!(floats.len(), 1024);
    assert_eq!(floats[1023], 511.5);
    assert_eq!(received.items::<f32>(10, 2).unwrap(), [5.0, 5.5]);
    assert_eq!(
        received.as_ptr() as usize % 64,
        0,
        "data starts 64-byte aligned"
    );
    assert_eq!(&received[..], &frozen[..]);
}

#[test]
fn the_kernel_refuses_a_writable_mapping_of_a_frozen_buffer() {
    let _t = TestNamespace::new("views-sealed");
    let buf = ShmBuf::new(64).unwrap();
    let early = buf.share().unwrap(); // a handle made before the freeze
    let frozen = buf.freeze().unwrap();
    // Attaching the memfd as a writable ShmBuf needs a writable mapping: refused.
    match ShmBuf::attach(round_trip(frozen.share().unwrap())) {
        Err(Error::Os { call: "mmap", .. }) => {}
        other => panic!("a writable attach of a sealed memfd must fail, got {other:?}"),
    }
    // The handle from before the freeze sees the frozen buffer.
    let late = FrozenBuf::attach(early).unwrap();
    assert_eq!(late.len(), 64);
}

#[test]
fn an_unfrozen_handle_is_not_frozen_and_its_reference_is_given_back() {
    let t = TestNamespace::new("views-notfrozen");
    let writable = ShmBuf::new(64).unwrap();
    assert!(matches!(
        FrozenBuf::attach(round_trip(writable.share().unwrap())),
        Err(Error::NotFrozen { .. })
    ));
    let named = ShmBuf::with_options(64, &fs_options(&t)).unwrap();
    let handle = named.share().unwrap();
    assert_eq!(named.census().unwrap().in_flight, 1);
    assert!(matches!(
        FrozenBuf::attach(handle),
        Err(Error::NotFrozen { .. })
    ));
    assert_eq!(
        named.census().unwrap().in_flight,
        0,
        "the refused handle gave its in-flight slot back"
    );
    drop(named);
    assert!(t.names().is_empty());
}

#[test]
fn a_file_system_buffer_cannot_be_frozen_and_comes_back_unchanged() {
    let t = TestNamespace::new("views-fs-freeze");
    let buf = ShmBuf::with_options(16, &fs_options(&t)).unwrap();
    buf.write_at(0, b"kept").unwrap();
    let failed = buf.freeze().unwrap_err();
    assert!(matches!(failed.error(), Error::CannotFreeze { .. }));
    let back = failed.into_buf().unwrap();
    back.write_at(4, b" ok").unwrap();
    let mut out = [0u8; 4];
    back.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"kept");
    drop(back);

    let mut exclusive = ShmBufMut::with_options(8, &fs_options(&t)).unwrap();
    exclusive.copy_from_slice(b"12345678");
    let back = exclusive.freeze().unwrap_err().into_buf().unwrap();
    back.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"1234");
    drop(back);
    assert!(t.names().is_empty());
}

#[test]
fn a_buffer_with_another_clone_cannot_be_frozen_until_the_clone_goes() {
    let _t = TestNamespace::new("views-clone");
    let buf = ShmBuf::new(32).unwrap();
    buf.write_at(0, b"x").unwrap();
    let clone = buf.clone();
    let failed = buf.freeze().unwrap_err();
    assert!(failed.to_string().contains("another clone"), "{failed}");
    let buf = failed.into_buf().unwrap();
    drop(clone);
    let frozen = buf.freeze().unwrap();
    assert_eq!(frozen[0], b'x');
}

#[test]
fn views_that_do_not_fit_are_bad_views_naming_why() {
    let _t = TestNamespace::new("views-bad");
    let mut buf = ShmBufMut::new(10).unwrap();
    let why = |e: Error| match e {
        Error::BadView { why, .. } => why,
        other => panic!("expected BadView, got {other:?}"),
    };
    assert_eq!(
        why(buf.cast_mut::<u32>().unwrap_err()),
        "its length is not a multiple of the type's size"
    );
    assert_eq!(
        why(buf.items_mut::<u16>(4, 2).unwrap_err()),
        "the range is outside the buffer"
    );
    assert_eq!(
        why(buf.items_mut::<u16>(usize::MAX, 2).unwrap_err()),
        "the offset overflows"
    );
    buf.items_mut::<u16>(4, 1).unwrap()[0] = 0xffff;
    let frozen = buf.freeze().unwrap();
    assert_eq!(frozen.items::<u16>(4, 1).unwrap(), [0xffff]);
    assert!(frozen.items::<u16>(0, 6).is_err());
    assert!(frozen.cast::<u64>().is_err());
    // Misaligned: a view of the bytes from offset 1 cannot be u16s.
    let shared = ShmBuf::new(8).unwrap();
    let mut out = [0u16; 5];
    assert!(matches!(
        shared.read_items(0, &mut out),
        Err(Error::BadView { .. })
    ));
    assert!(matches!(
        shared.write_items(3, &[1u16, 2]),
        Err(Error::BadView { .. })
    ));
}
