#![no_main]
//! Fuzz target `manager_wire`: any bytes, as a request and as a reply of the manager's
//! wire format (`shmrc::checkers::manager::wire`). The decoders must never panic, and whatever
//! they accept must be the one encoding of what they decoded (no two byte strings mean
//! the same frame, so nothing slips past a check by a second spelling). Seeds:
//! `fuzz/seeds/manager_wire/`.
use shmrc::checkers::manager::wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wire::frame_len(data, wire::MAX_REQUEST_PAYLOAD);
    if let Ok(request) = wire::decode_request(data) {
        assert_eq!(wire::encode_request(&request), data, "{request:?}");
    }
    if let Ok(reply) = wire::decode_reply(data) {
        assert_eq!(wire::encode_reply(&reply), data, "{reply:?}");
    }
});
