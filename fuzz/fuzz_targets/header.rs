#![no_main]
//! Fuzz target `header`: see `shmrc_fuzz::attacks::header` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/header/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_fuzz::attacks::header(data);
});
