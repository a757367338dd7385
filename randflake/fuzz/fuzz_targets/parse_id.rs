//! The string parser on arbitrary bytes: it never panics, and whatever it accepts is the
//! canonical form of the value it returns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use randflake::codec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(id) = codec::decode(text) {
        assert_eq!(codec::encode(id).as_str(), text, "accepted a non-canonical string");
    }
});
