//! Support for the fuzz targets: the simulated worlds they attack and the checks they
//! make ([`attacks`]). The `refcount` target lives apart: it runs the model-based
//! harness of `tests/model_harness` against `shmrc-model`'s oracle.
pub mod attacks;
