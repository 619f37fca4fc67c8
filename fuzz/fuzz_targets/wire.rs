#![no_main]
//! Fuzz target `wire`: see `shmrc_fuzz::attacks::wire` for what the bytes are and what
//! is checked. Seeds: `fuzz/seeds/wire/`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shmrc_fuzz::attacks::wire(data);
});
