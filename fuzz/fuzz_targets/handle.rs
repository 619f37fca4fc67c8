#![no_main]
//! Fuzz target `handle`: see `shmrc_testkit::attacks::handle` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/handle/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_testkit::attacks::handle(data);
});
