//! [`FrozenArray`] (feature `ndarray`): an n-dimensional view — element type, offset,
//! shape and strides — of a [`FrozenBuf`] storage, the storage/tensor split of torch.
//! One storage, many arrays: each array is a few numbers next to a cheap clone of the
//! storage, and in a `shmrc::channel` message the numbers travel with the storage's
//! handle. [`ShmBufMut::array_mut`] gives the writable counterpart before freezing.
//!
//! Every array is checked when it is made and when it is received: all its elements
//! lie inside the storage and are aligned for `T` (a bad one is [`Error::BadView`]).

use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, ShapeBuilder};

use super::buf_mut::ShmBufMut;
use super::frozen::FrozenBuf;
use crate::error::{Error, Result};

/// An n-dimensional, read-only array of `T` over a [`FrozenBuf`]: the storage, an
/// offset, a shape and strides (in elements). [`FrozenArray::view`] gives an
/// `ndarray::ArrayViewD<T>`, zero-copy and without `unsafe`.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{FrozenArray, ShmBufMut};
///
/// let mut storage = ShmBufMut::new(6 * 4)?;
/// storage.cast_mut::<f32>()?.copy_from_slice(&[0., 1., 2., 3., 4., 5.]);
/// let storage = storage.freeze()?;
///
/// let matrix = FrozenArray::<f32>::new(storage.clone(), &[2, 3])?;
/// assert_eq!(matrix.view()?[[1, 2]], 5.0);
/// // The same storage seen transposed: shape [3, 2], strides [1, 3].
/// let transposed = FrozenArray::<f32>::with_strides(storage, 0, &[3, 2], &[1, 3])?;
/// assert_eq!(transposed.view()?, matrix.view()?.t());
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct FrozenArray<T> {
    // The channel's encoding (`channel/array.rs`) reads and writes these.
    pub(crate) storage: FrozenBuf,
    pub(crate) offset: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    element: PhantomData<fn() -> T>,
}

impl<T> Clone for FrozenArray<T> {
    fn clone(&self) -> FrozenArray<T> {
        FrozenArray {
            storage: self.storage.clone(),
            offset: self.offset,
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            element: PhantomData,
        }
    }
}

impl<T> fmt::Debug for FrozenArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenArray")
            .field("element", &std::any::type_name::<T>())
            .field("offset", &self.offset)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("storage", &self.storage)
            .finish()
    }
}

/// Row-major (C order) strides of `shape`, in elements.
fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

fn bad<T>(offset: usize, size: usize, why: &'static str) -> Error {
    Error::BadView {
        type_name: std::any::type_name::<T>(),
        offset: offset.saturating_mul(size_of::<T>()),
        len: 0,
        size,
        why,
    }
}

impl<T: Pod> FrozenArray<T> {
    /// A row-major array of `shape` over the storage from its first element. The
    /// storage may hold more than the array needs; fewer is [`Error::BadView`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{FrozenArray, ShmBuf};
    ///
    /// let storage = ShmBuf::new(4 * 8)?.freeze()?;
    /// assert_eq!(FrozenArray::<f32>::new(storage.clone(), &[2, 4])?.view()?.shape(), [2, 4]);
    /// assert!(FrozenArray::<f32>::new(storage, &[3, 4]).is_err()); // 12 floats do not fit in 8
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(storage: FrozenBuf, shape: &[usize]) -> Result<FrozenArray<T>> {
        FrozenArray::with_strides(storage, 0, shape, &row_major(shape))
    }

    /// An array with explicit `offset`, `shape` and `strides` (all in elements, strides
    /// non-negative): a slice, a transpose, a broadcast (stride 0) of the storage.
    /// Elements outside the storage, or a shape and strides of different ranks, are
    /// [`Error::BadView`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{FrozenArray, ShmBuf};
    ///
    /// let storage = ShmBuf::new(10 * 8)?;
    /// storage.write_items(0, &(0..10u64).collect::<Vec<_>>())?;
    /// let storage = storage.freeze()?;
    /// // Every other element from the second: [1, 3, 5, 7].
    /// let odd = FrozenArray::<u64>::with_strides(storage.clone(), 1, &[4], &[2])?;
    /// assert_eq!(odd.view()?.iter().copied().collect::<Vec<_>>(), [1, 3, 5, 7]);
    /// assert!(FrozenArray::<u64>::with_strides(storage, 1, &[6], &[2]).is_err()); // element 11 of 10
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn with_strides(
        storage: FrozenBuf,
        offset: usize,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<FrozenArray<T>> {
        let array = FrozenArray {
            storage,
            offset,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            element: PhantomData,
        };
        array.view()?;
        Ok(array)
    }

    /// The array as an `ndarray` view: zero-copy, read-only, no `unsafe`.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{FrozenArray, ShmBufMut};
    ///
    /// let mut storage = ShmBufMut::new(4 * 4)?;
    /// storage.cast_mut::<i32>()?.copy_from_slice(&[1, 2, 3, 4]);
    /// let a = FrozenArray::<i32>::new(storage.freeze()?, &[2, 2])?;
    /// assert_eq!(a.view()?.sum(), 10);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn view(&self) -> Result<ArrayViewD<'_, T>> {
        let items: &[T] = self.storage.cast_prefix()?;
        let size = self.storage.len();
        if self.shape.len() != self.strides.len() {
            return Err(bad::<T>(
                self.offset,
                size,
                "the shape and strides differ in rank",
            ));
        }
        let rest = items
            .get(self.offset..)
            .ok_or_else(|| bad::<T>(self.offset, size, "the offset is outside the buffer"))?;
        // ndarray reads a stride above isize::MAX as negative: refuse those, and check
        // the farthest element here with checked arithmetic.
        let mut last = 0usize;
        for (&dim, &stride) in self.shape.iter().zip(&self.strides) {
            if stride > isize::MAX as usize {
                return Err(bad::<T>(
                    self.offset,
                    size,
                    "the shape and strides reach outside the buffer",
                ));
            }
            if dim == 0 {
                last = 0;
                break;
            }
            last = (dim - 1)
                .checked_mul(stride)
                .and_then(|reach| last.checked_add(reach))
                .ok_or_else(|| {
                    bad::<T>(
                        self.offset,
                        size,
                        "the shape and strides reach outside the buffer",
                    )
                })?;
        }
        let empty = self.shape.contains(&0);
        if !empty && last >= rest.len() {
            return Err(bad::<T>(
                self.offset,
                size,
                "the shape and strides reach outside the buffer",
            ));
        }
        let shape = IxDyn(&self.shape).strides(IxDyn(&self.strides));
        ArrayViewD::from_shape(shape, rest).map_err(|_| {
            bad::<T>(
                self.offset,
                size,
                "the shape and strides reach outside the buffer",
            )
        })
    }

    /// The storage under the array.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let storage = shmrc::ShmBuf::new(64)?.freeze()?;
    /// let a = shmrc::FrozenArray::<u8>::new(storage, &[8, 8])?;
    /// assert_eq!(a.storage().len(), 64);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn storage(&self) -> &FrozenBuf {
        &self.storage
    }
}

impl ShmBufMut {
    /// The buffer as a writable row-major `ndarray` view of `shape` (before freezing:
    /// see [`FrozenArray`]). A shape larger than the buffer is [`Error::BadView`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let mut buf = shmrc::ShmBufMut::new(2 * 3 * 4)?;
    /// buf.array_mut::<f32>(&[2, 3])?.fill(1.5);
    /// let a = shmrc::FrozenArray::<f32>::new(buf.freeze()?, &[2, 3])?;
    /// assert_eq!(a.view()?.sum(), 9.0);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn array_mut<T: Pod>(&mut self, shape: &[usize]) -> Result<ArrayViewMutD<'_, T>> {
        let size = self.len();
        let whole = size / size_of::<T>().max(1);
        let items: &mut [T] = self.items_mut(0, whole)?;
        let needed = shape.iter().try_fold(1usize, |n, d| n.checked_mul(*d));
        match needed {
            Some(n) if n <= items.len() => ArrayViewMutD::from_shape(IxDyn(shape), &mut items[..n])
                .map_err(|_| bad::<T>(0, size, "the shape does not fit the buffer")),
            _ => Err(bad::<T>(0, size, "the shape does not fit the buffer")),
        }
    }
}
