//! The edges of the crate's decisions that the unit tests beside them and the simulations do not
//! reach, each module for one file of `randflake/src/`: found by mutation testing (`make mutants`,
//! docs/development.md), each test fails with a mutant of its file that survived before it.

/// Rules of application leases that need no table: the window's last second as the table stores
/// it, and the reasons randflake_pg's lease procedures give, word for word, in their errors.
mod app_lease {
    use randflake::decisions::app_lease::{check_holder, last_second, AppLeaseError, AppWindow, HOLDER_MAX_BYTES};
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
            format!(
                "the lease would end at second {}, past {MAX_SECOND}, the last second an ID can carry",
                MAX_SECOND + 1
            )
        );
        assert_eq!(
            reason(last_second(MAX_SECOND + 1, 1).unwrap_err()),
            format!("the clock reads {}, outside the seconds an ID can carry", MAX_SECOND + 1)
        );
        assert_eq!(
            reason(check_holder("").unwrap_err()),
            format!("a holder is 1 to {HOLDER_MAX_BYTES} bytes of text without invisible or line-breaking characters")
        );
    }
}

/// The generator's public edges that the unit tests beside it do not reach: a window's bounds as
/// a crate user reads them, and the reasons a refusal or a bad window gives, word for word.
mod generator {
    use randflake::{Generator, Refusal, Window, EPOCH_SECOND, MAX_SECOND};

    const T: u64 = 1_800_000_000;

    #[test]
    fn a_window_reads_back_its_first_and_last_second() {
        let window = Window::new(T, T + 599).unwrap();
        assert_eq!((window.first(), window.last()), (T, T + 599));
        assert_eq!((Window::ALL.first(), Window::ALL.last()), (EPOCH_SECOND, MAX_SECOND));
    }

    #[test]
    fn each_refusal_is_explained() {
        let mut generator = Generator::new(Window::new(T, T + 10).unwrap());
        let before = generator.next(T - 3, 1, 1).unwrap_err();
        assert_eq!(before.to_string(), format!("the clock reads {}, 3 s before the first usable second {T}", T - 3));
        let after = generator.next(T + 11, 1, 1).unwrap_err();
        assert_eq!(after.to_string(), format!("the clock reads {}, past the last usable second {}", T + 11, T + 10));
        generator.adopt(4, T + 5);
        assert_eq!(generator.next(T + 3, 1, 1), Err(Refusal::ClockBehind { now: T + 3, used: T + 5 }));
        assert_eq!(
            Refusal::ClockBehind { now: T + 3, used: T + 5 }.to_string(),
            format!("the clock reads {}, 2 s behind second {} which already has IDs", T + 3, T + 5)
        );
        let empty = Window::new(T, T - 1).unwrap_err();
        assert_eq!(
            empty.to_string(),
            format!("window {T}..={} is empty or outside {EPOCH_SECOND}..={MAX_SECOND}", T - 1)
        );
    }
}

/// The edges of the lease arithmetic (`randflake::decisions::lease`) that the unit tests beside it
/// and the simulations do not reach.
mod lease {
    use randflake::{Lease, Renewal, Terms, HIGH_WATER_LEAD, MAX_SECOND};

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
        assert_eq!(
            RANGE.renewal(&lease, T + HIGH_WATER_LEAD / 2 + 1),
            Some(Renewal { end: lease.end, used_through: T + HIGH_WATER_LEAD * 3 / 2 + 1 })
        );
    }
}

/// What a coordinator lets a write it did not make do to a fleet's lease table
/// (`randflake::decisions::table_rules`), at the edges the unit tests beside it do not reach, and
/// the reasons its trigger gives, word for word, when it refuses.
mod table_rules {
    use randflake::decisions::table_rules::{check, Refused, Row, Write, MAX_CLOCK_SKEW};

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
        assert_eq!(
            reason(Write::Update { old: &old, new: &back }),
            "moving the end or high-water mark of a lease back"
        );
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
}
