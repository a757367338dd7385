//! The generator under an arbitrary sequence of clock readings, node hand-backs and budgets:
//! it never panics and never issues the same (second, node, sequence) twice.
#![no_main]

use std::collections::{HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use randflake::{Generator, Step, Window, EPOCH_SECOND};

const NODES: u32 = 4;

fuzz_target!(|steps: Vec<(u8, u8, u8)>| {
    let start = EPOCH_SECOND + 1_000;
    let mut generator = Generator::new(Window::new(start, start + 200).unwrap());
    let mut used_through: HashMap<u32, u64> = HashMap::new();
    let mut held: Option<u32> = None;
    let mut issued = HashSet::new();
    let mut now = start;
    for (clock, budget, run) in steps {
        // Mostly forward, sometimes far back or far ahead, outside the window too.
        now = match clock % 8 {
            0 => now.saturating_sub(u64::from(clock)),
            1 => now + u64::from(clock),
            2 | 3 => now + 1,
            _ => now,
        }
        .max(EPOCH_SECOND - 10);
        match generator.next(now, u32::from(budget % 4) + 1, u32::from(run % 16) + 1) {
            Ok(Step::Issued { first, count, opened_second }) => {
                if opened_second {
                    used_through.insert(first.node_id, first.timestamp);
                }
                for sequence in first.sequence..first.sequence + count {
                    assert!(issued.insert((first.timestamp, first.node_id, sequence)), "repeated ID");
                }
            }
            Ok(Step::NeedNode { release }) => {
                if release.is_some() {
                    held = None;
                }
                let free =
                    (0..NODES).find(|node| Some(*node) != held && used_through.get(node).copied().unwrap_or(0) < now);
                if let Some(node) = free {
                    generator.adopt(node, used_through.get(&node).copied().unwrap_or(0));
                    held = Some(node);
                }
            }
            Ok(Step::WaitUntil { .. }) | Err(_) => {}
        }
    }
});
