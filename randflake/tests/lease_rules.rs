//! The edges of the lease arithmetic (`randflake::lease`) that the unit tests beside it and the
//! simulations do not reach.

use randflake::{Lease, Terms, HIGH_WATER_LEAD, MAX_SECOND};

const T: u64 = 1_800_000_000;
const RANGE: Terms = Terms { length: 600, high_water_lead: Some(HIGH_WATER_LEAD) };

#[test]
fn a_lease_may_start_in_the_last_second_an_id_can_carry() {
    let last = RANGE.new_lease(0, 9, MAX_SECOND, None);
    assert_eq!(
        last,
        Some(Lease { first_node: 0, last_node: 9, start: MAX_SECOND, end: MAX_SECOND, used_through: MAX_SECOND })
    );
}

#[test]
fn the_high_water_mark_is_written_once_more_than_half_its_lead_is_used() {
    let lease = RANGE.new_lease(0, 0, T, None).unwrap();
    assert_eq!(lease.used_through, T + HIGH_WATER_LEAD);
    assert_eq!(RANGE.renewal(&lease, T + HIGH_WATER_LEAD / 2), None, "half the lead is left");
    assert_eq!(RANGE.renewal(&lease, T + HIGH_WATER_LEAD / 2 + 1), Some((lease.end, T + HIGH_WATER_LEAD * 3 / 2 + 1)));
}
