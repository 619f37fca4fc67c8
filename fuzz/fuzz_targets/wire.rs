#![no_main]
//! Fuzz target `wire`: see `shmrc_testkit::attacks::wire` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/wire/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_testkit::attacks::wire(data);
});
