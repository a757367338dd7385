//! The server-wide node table: which process holds each node, and the last second in which
//! each node issued IDs.
//!
//! A backend touches the table only when it takes or gives up a node, and once per second to
//! record the second it is issuing in; each of those is a single atomic operation on the
//! node's own slot. No lock is shared on the path that issues IDs.

use core::sync::atomic::Ordering;

use super::{Atomic, Atomics, StdAtomics};
use crate::decisions::refill::NoNode;

/// A slot's holder while no process holds its node. Process ids are never 0.
const NO_HOLDER: i32 = 0;

/// One node's slot.
#[derive(Default)]
pub struct NodeSlot<A: Atomics = StdAtomics> {
    /// Process id of the node's holder, or `NO_HOLDER`.
    holder: A::I32,
    /// Last Unix second in which the node may have issued an ID. Written by the holder before
    /// it hands out the first ID of a second; read by the next holder, which must start later.
    used_through: A::U32,
}

/// What the table keeps beside its slots.
#[derive(Default)]
pub struct Header<A: Atomics = StdAtomics> {
    /// Where the next search for a free node begins, so that concurrent searches spread out.
    search_start: A::U32,
    /// The latest second any node has issued IDs in: the server's own clock floor.
    latest_used: A::U32,
}

impl<A: Atomics> Header<A> {
    /// The latest second in which any process of the server has issued IDs. Read it before the
    /// clock: a second recorded since was read from the clock after this, so only a clock
    /// stepped back can read earlier than the value returned. A method of the header alone, for
    /// the fast path of `randflake_next()`, which reads nothing else of the table.
    #[inline]
    pub fn latest_used(&self) -> u64 {
        u64::from(self.latest_used.load(Ordering::Acquire))
    }
}

/// The table: its header and the slots of nodes `0..slots.len()`, wherever they are placed.
pub struct NodeTable<'a, A: Atomics = StdAtomics> {
    header: &'a Header<A>,
    slots: &'a [NodeSlot<A>],
}

impl<'a, A: Atomics> NodeTable<'a, A> {
    /// The table made of `header` and `slots`.
    #[inline]
    pub fn new(header: &'a Header<A>, slots: &'a [NodeSlot<A>]) -> Self {
        Self { header, slots }
    }

    /// How many nodes of `first..=last` running processes hold.
    pub fn held_count(&self, first: u32, last: u32) -> u32 {
        let slots = &self.slots[first as usize..=last as usize];
        slots.iter().filter(|slot| slot.holder.load(Ordering::Relaxed) != NO_HOLDER).count() as u32
    }

    /// Takes a free node of `first..=last` whose last used second is before `now`, for the
    /// process `holder` (its id, never 0). Returns the node and that second.
    pub fn acquire(&self, first: u32, last: u32, now: u64, holder: i32) -> Result<(u32, u64), NoNode> {
        let count = last - first + 1;
        let start = self.header.search_start.fetch_add(1, Ordering::Relaxed) % count;
        let mut saw_free = false;
        for offset in 0..count {
            let node = first + (start + offset) % count;
            let slot = &self.slots[node as usize];
            if slot.holder.load(Ordering::Relaxed) != NO_HOLDER {
                continue;
            }
            saw_free = true;
            if u64::from(slot.used_through.load(Ordering::Relaxed)) >= now {
                continue;
            }
            // Acquire: reading the free slot that the previous holder's release wrote makes
            // everything it did with the node, the seconds it recorded among them, visible here.
            if slot.holder.compare_exchange(NO_HOLDER, holder, Ordering::Acquire, Ordering::Relaxed).is_err() {
                continue;
            }
            // Read again now that the node is ours: the previous holder may have used it since.
            let used_through = u64::from(slot.used_through.load(Ordering::Acquire));
            if used_through < now {
                return Ok((node, used_through));
            }
            slot.holder.store(NO_HOLDER, Ordering::Release);
        }
        Err(if saw_free { NoNode::AllUsedThisSecond } else { NoNode::AllHeld })
    }

    /// Records that `node`, held by the caller, issues IDs in `second`. Must happen before the
    /// first such ID leaves the caller.
    pub fn record_used(&self, node: u32, second: u64) {
        let second = u32::try_from(second).expect("seconds past 2106 are refused before this");
        self.slots[node as usize].used_through.store(second, Ordering::Release);
        self.header.latest_used.fetch_max(second, Ordering::AcqRel);
    }

    /// Gives `node`, held by the caller, back.
    pub fn release(&self, node: u32) {
        self.slots[node as usize].holder.store(NO_HOLDER, Ordering::Release);
    }

    /// Releases every node of `first..=last` that the process `holder` still holds. A scan
    /// needs no state that an error could have left inconsistent, so it is what a process runs
    /// on its way out.
    pub fn release_all_held(&self, first: u32, last: u32, holder: i32) {
        for slot in self.slots.get(first as usize..=last as usize).unwrap_or_default() {
            if slot.holder.load(Ordering::Relaxed) == holder {
                slot.holder.store(NO_HOLDER, Ordering::Release);
            }
        }
    }
}
