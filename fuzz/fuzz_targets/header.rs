#![no_main]
//! Fuzz target `header`: see `shmrc_testkit::attacks::header` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/header/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_testkit::attacks::header(data);
});
