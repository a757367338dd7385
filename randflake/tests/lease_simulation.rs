//! A server simulated over thousands of erratic clock readings and crashes: leases taken and
//! renewed by [`Terms`], IDs issued by [`Generator`]s inside the published lease, and everything
//! but the durable lease row lost at each crash. No (second, node, sequence) may repeat.

use std::collections::{HashMap, HashSet};

use randflake::{Generator, Lease, Refusal, Step, Terms, Window};

const T: u64 = 1_800_000_000;
const NODES: u32 = 3;

/// xorshift64*, fixed seed: a failure names a reproducible case.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

/// What a crash wipes: the published lease, the backends' generators, the shared node table.
#[derive(Default)]
struct Memory {
    published: Option<Lease>,
    generators: Vec<Option<Generator>>,
    used_through: HashMap<u32, u64>,
    held: HashSet<u32>,
}

fn run(seed: u64, terms: Terms) -> usize {
    let mut random = Random(seed);
    let mut durable: Option<Lease> = None;
    let mut memory = Memory::default();
    let mut issued = HashSet::new();
    let mut now = T;
    for _ in 0..5_000 {
        now = match random.below(100) {
            0 => now - random.below(70).min(now - T),
            1 => T + random.below(4_000),
            2..=40 => now + 1,
            _ => now,
        };
        if random.below(500) == 0 {
            memory = Memory::default();
        }
        keeper_tick(&mut durable, &mut memory, &terms, now);
        let backend = random.below(4) as usize;
        issue(&mut memory, backend, now, &mut issued);
    }
    issued.len()
}

fn keeper_tick(durable: &mut Option<Lease>, memory: &mut Memory, terms: &Terms, now: u64) {
    match memory.published {
        None => {
            // Resume after our own row's high-water mark, as the keeper does after a restart.
            let latest = durable.map(|row| row.used_through);
            let lease = terms.new_lease(0, NODES - 1, now, latest).expect("inside the ID range");
            *durable = Some(lease);
            memory.published = Some(lease);
            memory.generators.clear();
            memory.held.clear();
        }
        Some(published) => {
            if let Some((end, used_through)) = terms.renewal(&published, now) {
                let row = durable.as_mut().expect("a published lease is stored");
                if row.end >= now {
                    *row = Lease { end, used_through, ..published };
                    memory.published = Some(*row);
                } else {
                    memory.published = None;
                }
            }
        }
    }
}

fn issue(memory: &mut Memory, backend: usize, now: u64, issued: &mut HashSet<(u64, u32, u32)>) {
    let Some(lease) = memory.published else { return };
    if memory.generators.len() <= backend {
        memory.generators.resize_with(backend + 1, || None);
    }
    let generator = memory.generators[backend].get_or_insert_with(|| {
        Generator::new(Window::new(lease.start, lease.issuable_through()).expect("valid lease"))
    });
    generator.set_last_second(lease.issuable_through()).expect("the end only grows");
    for _ in 0..4 {
        match generator.next(now, 8, 64) {
            Ok(Step::Issued { first, count, .. }) => {
                memory.used_through.insert(first.node_id, first.timestamp);
                for sequence in first.sequence..first.sequence + count {
                    assert!(
                        issued.insert((first.timestamp, first.node_id, sequence)),
                        "repeated second {} node {} sequence {sequence}",
                        first.timestamp,
                        first.node_id
                    );
                }
            }
            Ok(Step::NeedNode { release }) => {
                if let Some(node) = release {
                    memory.held.remove(&node);
                }
                let free = (0..NODES).find(|node| {
                    !memory.held.contains(node) && memory.used_through.get(node).copied().unwrap_or(0) < now
                });
                let Some(node) = free else { return };
                memory.held.insert(node);
                generator.adopt(node, memory.used_through.get(&node).copied().unwrap_or(0));
            }
            Ok(Step::WaitUntil { .. }) | Err(Refusal::BeforeWindow { .. } | Refusal::AfterWindow { .. }) => return,
            Err(Refusal::ClockBehind { .. }) => return,
        }
    }
}

#[test]
fn crashes_and_clock_steps_never_repeat_an_id_in_range_mode() {
    for seed in 1..=8 {
        let issued = run(seed, Terms { length: 60, high_water_lead: Some(10) });
        assert!(issued > 20_000, "seed {seed} issued only {issued} IDs");
    }
}

#[test]
fn crashes_and_clock_steps_never_repeat_an_id_with_leases_held_to_their_end() {
    for seed in 21..=28 {
        let issued = run(seed, Terms { length: 30, high_water_lead: None });
        assert!(issued > 20_000, "seed {seed} issued only {issued} IDs");
    }
}
