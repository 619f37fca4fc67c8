#![no_main]
//! (being written)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = data;
});
