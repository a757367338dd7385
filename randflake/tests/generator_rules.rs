//! The generator's public edges that the unit tests beside it do not reach: a window's bounds as
//! a crate user reads them, and the reasons a refusal or a bad window gives, word for word.

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
    assert_eq!(empty.to_string(), format!("window {T}..={} is empty or outside {EPOCH_SECOND}..={MAX_SECOND}", T - 1));
}
