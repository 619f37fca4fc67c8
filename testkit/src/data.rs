//! Test data and its checks: a recognisable [`pattern`], the checksum the CLI's worker
//! computes ([`fnv1a`]), handles as text for child processes ([`hex`], [`unhex`]), and
//! one number out of a JSON document ([`field`]).

/// FNV-1a 64, as the worker computes it.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A recognisable pattern for buffer `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Lowercase hex of `bytes` (handles travel as text to child processes).
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The bytes of `text` made by [`hex`]; panics on anything else.
pub fn unhex(text: &str) -> Vec<u8> {
    hex::decode(text.trim()).unwrap_or_else(|e| panic!("not hex ({e}): {text:?}"))
}

/// The unsigned number at top-level key `name` of the JSON object `json`; panics
/// naming what is missing.
pub fn field(json: &str, name: &str) -> u64 {
    let value: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    value
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        .as_u64()
        .unwrap_or_else(|| panic!("{name} is not a number in {json}"))
}
