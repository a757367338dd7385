//! The `serde` feature: an [`Id`] travels as its canonical string and is read back only from
//! one (`cargo test -p randflake --features serde`).
#![cfg(feature = "serde")]

use randflake::Id;
use serde_json::{json, Value};

fn vectors() -> Vec<Value> {
    let text = include_str!("data/reference_vectors.json");
    let parsed: Value = serde_json::from_str(text).expect("vector file is JSON");
    parsed["randflake"].as_array().expect("randflake vectors").clone()
}

#[test]
fn every_published_vector_serializes_as_its_string_and_back() {
    let cases = vectors();
    assert_eq!(cases.len(), 18);
    for case in cases {
        let id = Id(case["encrypted_id"].as_str().unwrap().parse().unwrap());
        let encoded = case["encoded_id"].as_str().unwrap();
        assert_eq!(serde_json::to_value(id).unwrap(), json!(encoded));
        assert_eq!(serde_json::from_value::<Id>(json!(encoded)).unwrap(), id);
    }
}

#[test]
fn ids_inside_structures_round_trip_without_losing_bits() {
    // Values a 53-bit JSON number could not hold, both signs, and the extremes.
    let ids = vec![Id(4594531474933654033), Id(-1), Id(0), Id(i64::MIN), Id(i64::MAX), Id(9007199254740993)];
    let text = serde_json::to_string(&ids).unwrap();
    assert_eq!(text, r#"["3vgoe12ccb8gh","fvvvvvvvvvvvv","0","8000000000000","7vvvvvvvvvvvv","80000000001"]"#);
    assert_eq!(serde_json::from_str::<Vec<Id>>(&text).unwrap(), ids);
}

#[test]
fn anything_but_the_canonical_string_is_refused() {
    for (value, why) in [
        (json!(4594531474933654033i64), "invalid type"),
        (json!(null), "invalid type"),
        (json!("3VGOE12CCB8GH"), "upper-case"),
        (json!("0v"), "leading zero"),
        (json!(""), "empty"),
        (json!("g000000000000"), "64 bits"),
        (json!("3vgoe12ccb8g "), "not a base32hex digit"),
    ] {
        let error = serde_json::from_value::<Id>(value.clone()).unwrap_err().to_string();
        assert!(error.contains(why), "{value}: {error}");
    }
}
