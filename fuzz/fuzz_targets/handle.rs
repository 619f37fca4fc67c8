#![no_main]
//! Fuzz target `handle`: see `shmrc_fuzz::attacks::handle` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/handle/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_fuzz::attacks::handle(data);
});
