//! What a coordinator lets a write it did not make do to a fleet's lease table
//! (`randflake::table_rules`), at the edges the unit tests beside it do not reach, and the
//! reasons its trigger gives, word for word, when it refuses.

use randflake::table_rules::{check, Refused, Row, Write, MAX_CLOCK_SKEW};

const T: u64 = 1_800_000_000;

fn lease(end: u64, used_through: u64) -> Row {
    Row { first_node: 0, last_node: 1023, holder: "7300/1".into(), start: T, end, used_through }
}

#[test]
fn an_update_may_move_either_value_forward_alone_and_neither_back() {
    let old = lease(T + 600, T + 300);
    let update = |new: &Row| check(Write::Update { old: &old, new }, T);
    assert_eq!(update(&lease(T + 600, T + 310)), Ok(()), "the high-water mark alone");
    assert_eq!(update(&lease(T + 900, T + 300)), Ok(()), "the end alone");
    assert_eq!(update(&lease(T + 599, T + 310)), Err(Refused::MovesBack), "the end back");
    assert_eq!(update(&lease(T + 900, T + 299)), Err(Refused::MovesBack), "the high-water mark back");
}

#[test]
fn each_refusal_is_explained_in_the_error() {
    let reason = |write| check(write, T).unwrap_err().to_string();
    let live = lease(T - 30, T - 30);
    assert_eq!(
        reason(Write::Delete(&live)),
        format!(
            "deleting the lease of nodes 0..1023 from second {T}, whose seconds may be in use until {}",
            T - 30 + MAX_CLOCK_SKEW
        )
    );
    assert_eq!(reason(Write::Truncate), "TRUNCATE");
    let old = lease(T + 600, T + 600);
    let back = lease(T + 500, T + 500);
    assert_eq!(reason(Write::Update { old: &old, new: &back }), "moving the end or high-water mark of a lease back");
    let stolen = Row { holder: "7301/1".into(), ..old.clone() };
    assert_eq!(reason(Write::Update { old: &old, new: &stolen }), "changing the nodes, holder or start of a lease");
    let early = Row { start: T - MAX_CLOCK_SKEW - 1, ..old.clone() };
    assert_eq!(
        reason(Write::Insert(&early)),
        format!(
            "inserting a lease that starts at second {}, before second {}",
            T - MAX_CLOCK_SKEW - 1,
            T - MAX_CLOCK_SKEW
        )
    );
}
