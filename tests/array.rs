//! `FrozenArray` (feature `ndarray`): shaped views of frozen storage, checked when made
//! and when received; one storage under many arrays.
#![cfg(all(feature = "ndarray", not(any(shmrc_loom, shmrc_shuttle))))]

use shmrc::{Error, FrozenArray, FrozenBuf, ShmBufMut};
use shmrc_testkit::names::TestNamespace;

fn storage(values: &[f32]) -> FrozenBuf {
    let mut buf = ShmBufMut::new(values.len() * 4).unwrap();
    buf.cast_mut::<f32>().unwrap().copy_from_slice(values);
    buf.freeze().unwrap()
}

fn why(e: Error) -> &'static str {
    match e {
        Error::BadView { why, .. } => why,
        other => panic!("expected BadView, got {other:?}"),
    }
}

#[test]
fn one_storage_under_a_matrix_its_transpose_a_row_and_a_broadcast() {
    let _t = TestNamespace::new("array-views");
    let s = storage(&(0..12).map(|x| x as f32).collect::<Vec<_>>());
    let m = FrozenArray::<f32>::new(s.clone(), &[3, 4]).unwrap();
    let t = FrozenArray::<f32>::with_strides(s.clone(), 0, &[4, 3], &[1, 4]).unwrap();
    let row = FrozenArray::<f32>::with_strides(s.clone(), 4, &[4], &[1]).unwrap();
    let broadcast = FrozenArray::<f32>::with_strides(s, 2, &[5, 2], &[0, 1]).unwrap();
    assert_eq!(m.view().unwrap(), t.view().unwrap().t());
    assert_eq!(
        row.view().unwrap().iter().copied().collect::<Vec<_>>(),
        [4.0, 5.0, 6.0, 7.0]
    );
    assert_eq!(broadcast.view().unwrap().sum(), 5.0 * (2.0 + 3.0));
    assert_eq!(m.storage().as_ptr(), row.storage().as_ptr(), "one storage");
}

#[test]
fn arrays_that_reach_outside_their_storage_are_bad_views() {
    let _t = TestNamespace::new("array-bad");
    let s = storage(&[0.0; 6]);
    assert_eq!(
        why(FrozenArray::<f32>::new(s.clone(), &[2, 4]).unwrap_err()),
        "the shape and strides reach outside the buffer"
    );
    assert_eq!(
        why(FrozenArray::<f32>::with_strides(s.clone(), 7, &[1], &[1]).unwrap_err()),
        "the offset is outside the buffer"
    );
    assert_eq!(
        why(FrozenArray::<f32>::with_strides(s.clone(), 0, &[2, 3], &[3]).unwrap_err()),
        "the shape and strides differ in rank"
    );
    assert_eq!(
        why(FrozenArray::<f32>::with_strides(s, 0, &[2, 2], &[usize::MAX, 1]).unwrap_err()),
        "the shape and strides reach outside the buffer"
    );
    let mut buf = ShmBufMut::new(16).unwrap();
    assert!(buf.array_mut::<f32>(&[2, 2]).is_ok());
    assert_eq!(
        why(buf.array_mut::<f32>(&[3, 2]).unwrap_err()),
        "the shape does not fit the buffer"
    );
    assert!(buf.array_mut::<f32>(&[usize::MAX, 2]).is_err());
}

#[cfg(feature = "channel")]
mod over_a_channel {
    use super::*;
    use serde::{Deserialize, Serialize};
    use shmrc::channel::{self, Receiver, Sender};
    use std::os::unix::net::UnixStream;

    #[test]
    fn an_array_travels_with_its_storage_and_is_checked_on_arrival() {
        let _t = TestNamespace::new("array-channel");
        let (tx, rx) = channel::channel::<Vec<FrozenArray<f32>>>().unwrap();
        let s = storage(&[1.0, 2.0, 3.0, 4.0]);
        let m = FrozenArray::<f32>::new(s.clone(), &[2, 2]).unwrap();
        let t = FrozenArray::<f32>::with_strides(s, 0, &[2, 2], &[1, 2]).unwrap();
        tx.send(&vec![m, t]).unwrap();
        let got = rx.recv().unwrap();
        assert_eq!(got[0].view().unwrap(), got[1].view().unwrap().t());
        assert_eq!(got[0].view().unwrap()[[1, 0]], 3.0);

        /// The wire layout of a FrozenArray, to forge a hostile one.
        #[derive(Serialize, Deserialize)]
        struct Forged {
            storage: FrozenBuf,
            offset: usize,
            shape: Vec<usize>,
            strides: Vec<usize>,
        }
        let (a, b) = UnixStream::pair().unwrap();
        let forger = Sender::<Forged>::from_stream(a);
        let victim = Receiver::<FrozenArray<f32>>::from_stream(b);
        forger
            .send(&Forged {
                storage: storage(&[0.0; 4]),
                offset: 0,
                shape: vec![100],
                strides: vec![1],
            })
            .unwrap();
        match victim.recv() {
            Err(e) => assert_eq!(why(e), "the shape and strides reach outside the buffer"),
            Ok(a) => panic!("a forged array must be refused, got {a:?}"),
        }
    }
}
