//! Rules of application leases that need no table: the window's last second as the table stores
//! it, and the reasons randflake_pg's lease procedures give, word for word, in their errors.

use randflake::app_lease::{check_holder, last_second, AppLeaseError, AppWindow, HOLDER_MAX_BYTES};
use randflake::MAX_SECOND;

const T: u64 = 1_800_000_000;

#[test]
fn a_window_is_stored_by_its_last_second_the_one_before_its_end() {
    let window = AppWindow { node: 7, start: T, end_exclusive: T + 60 };
    assert_eq!(window.last(), T + 59);
    assert_eq!(AppWindow { end_exclusive: T + 1, ..window }.last(), T, "a window of one second");
}

#[test]
fn each_refused_argument_is_explained_in_the_error() {
    let reason = |error: AppLeaseError| error.to_string();
    assert_eq!(reason(last_second(T, 0).unwrap_err()), "a lease must last at least 1 second, not 0");
    assert_eq!(
        reason(last_second(MAX_SECOND, 2).unwrap_err()),
        format!("the lease would end at second {}, past {MAX_SECOND}, the last second an ID can carry", MAX_SECOND + 1)
    );
    assert_eq!(
        reason(last_second(MAX_SECOND + 1, 1).unwrap_err()),
        format!("the clock reads {}, outside the seconds an ID can carry", MAX_SECOND + 1)
    );
    assert_eq!(
        reason(check_holder("").unwrap_err()),
        format!(
            "a holder is 1 to {HOLDER_MAX_BYTES} bytes of text without control, format or line-breaking characters"
        )
    );
}
