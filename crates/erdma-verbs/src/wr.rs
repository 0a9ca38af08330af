//! Bookkeeping of the posting fast path, kept apart from the verbs so that it runs without a device
//! (and under Miri): the in-flight table (a slab indexed by `wr_id`) and the scratch chains that
//! posting links into one `ibv_post_send` / `ibv_post_recv` list. Both keep their storage between
//! posts, so a post or poll in steady state allocates nothing.

use std::ptr;

use rdma_sys as sys;

/// Bits of a `wr_id` that hold the slab index; the bits above hold the slot's generation.
const INDEX_BITS: u32 = 32;

#[derive(Debug)]
struct Slot<T> {
    /// Bumped every time the slot is vacated, so that a stale `wr_id` (a completion of a destroyed
    /// QP still sitting in the CQ, whose slot was reused since) never matches.
    generation: u32,
    value: Option<T>,
}

/// Work requests in flight, by `wr_id`: a slab whose ids encode (generation, index). Insert and
/// take are O(1) and reuse freed slots, so the table allocates only when it grows past its
/// high-water mark (never in steady state).
#[derive(Debug)]
pub(crate) struct WrTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> WrTable<T> {
    /// An empty table with room for `reserve` entries before it first grows.
    pub(crate) fn with_capacity(reserve: usize) -> WrTable<T> {
        WrTable {
            slots: Vec::with_capacity(reserve),
            free: Vec::with_capacity(reserve),
            len: 0,
        }
    }

    /// Entries in flight.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value` and returns its `wr_id`, or `None` once 2^32 entries are in flight.
    pub(crate) fn insert(&mut self, value: T) -> Option<u64> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        self.len += 1;
        Some((u64::from(slot.generation) << INDEX_BITS) | u64::from(index))
    }

    /// Removes and returns the entry of `wr_id`; `None` for an id that is not in flight (never
    /// issued, already taken, or its QP destroyed and the slot reused).
    pub(crate) fn take(&mut self, wr_id: u64) -> Option<T> {
        let index = (wr_id & ((1 << INDEX_BITS) - 1)) as usize;
        let generation = (wr_id >> INDEX_BITS) as u32;
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let v = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        // `free` never holds more indices than `slots` has entries, so once both reached their
        // high-water mark this push does not allocate.
        self.free.push(index as u32);
        self.len -= 1;
        Some(v)
    }

    /// Keeps only the entries for which `keep` is true (dropping the others).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.value.as_ref().is_some_and(|v| !keep(v)) {
                slot.value = None;
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(i as u32);
                self.len -= 1;
            }
        }
    }
}

/// The raw work-request types a [`Chain`] links: `ibv_send_wr` and `ibv_recv_wr`.
pub(crate) trait RawWr {
    /// A zeroed WR (an empty request: no SGEs, no successor).
    fn empty() -> Self;
    /// Number of SGEs this WR uses (set by the builder before linking).
    fn sges(&self) -> usize;
    fn set_sges(&mut self, n: usize);
    fn wr_id(&self) -> u64;
    fn set_wr_id(&mut self, id: u64);
    /// # Safety
    /// `this` points to a live WR of a chain; `next` and `sg_list` are null or point into that
    /// chain's storage, which outlives every use of the pointers.
    unsafe fn link(this: *mut Self, next: *mut Self, sg_list: *mut sys::ibv_sge);
}

/// Implements [`RawWr`] for the two C WR types, which name these fields alike.
macro_rules! raw_wr {
    ($($t:ty),*) => {$(
        impl RawWr for $t {
            fn empty() -> Self {
                // SAFETY: plain C struct of integers, pointers and unions of those; all-zero is
                // valid and is the "no SGEs, no next, no flags" request.
                unsafe { std::mem::zeroed() }
            }
            fn sges(&self) -> usize {
                self.num_sge.max(0) as usize
            }
            fn set_sges(&mut self, n: usize) {
                self.num_sge = libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
            }
            fn wr_id(&self) -> u64 {
                self.wr_id
            }
            fn set_wr_id(&mut self, id: u64) {
                self.wr_id = id;
            }
            unsafe fn link(this: *mut Self, next: *mut Self, sg_list: *mut sys::ibv_sge) {
                // SAFETY: `this` is valid for writes (the caller's contract); the fields are
                // written through the raw pointer, so no reference to the chain is created that
                // would invalidate the other pointers into it.
                unsafe {
                    (*this).next = next;
                    (*this).sg_list = sg_list;
                }
            }
        }
    )*};
}

raw_wr!(sys::ibv_send_wr, sys::ibv_recv_wr);

/// Scratch storage for one post: the WRs and, in one array, their SGEs (WR `i`'s SGEs follow WR
/// `i - 1`'s). Cleared after each post; its capacity stays, so posting allocates only when a batch
/// is larger than every earlier one.
pub(crate) struct Chain<W> {
    wrs: Vec<W>,
    sges: Vec<sys::ibv_sge>,
}

// SAFETY: between posts the chain holds no pointers (`clear` empties it and `link` is only called
// right before the post, whose pointers die with it); the raw pointers inside the WR types are what
// makes them !Send, and none of them is dereferenced outside `&mut self` methods.
unsafe impl<W> Send for Chain<W> {}

impl<W> std::fmt::Debug for Chain<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("wrs", &self.wrs.len())
            .field("sges", &self.sges.len())
            .finish()
    }
}

impl<W: RawWr> Chain<W> {
    pub(crate) fn new() -> Chain<W> {
        Chain {
            wrs: Vec::new(),
            sges: Vec::new(),
        }
    }

    /// Appends a WR with `sges` (its `num_sge` is set here) and returns it for the caller to fill
    /// in the opcode, flags and ids.
    pub(crate) fn push(&mut self, sges: impl IntoIterator<Item = sys::ibv_sge>) -> &mut W {
        let before = self.sges.len();
        self.sges.extend(sges);
        let n = self.sges.len() - before;
        let mut wr = W::empty();
        wr.set_sges(n);
        self.wrs.push(wr);
        let last = self.wrs.len() - 1;
        &mut self.wrs[last]
    }

    pub(crate) fn get(&self, i: usize) -> Option<&W> {
        self.wrs.get(i)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut W> {
        self.wrs.get_mut(i)
    }

    /// Links every WR to its successor and to its SGEs, and returns the head (null for an empty
    /// chain). Pointers are derived from one base pointer per array and written through raw
    /// pointers, so none invalidates another (the `&mut raw[i + 1]` of a loop would, under Stacked
    /// Borrows, each time it re-borrowed the array). Valid until the chain is next modified.
    pub(crate) fn link(&mut self) -> *mut W {
        let n = self.wrs.len();
        let wrs = self.wrs.as_mut_ptr();
        let sges = self.sges.as_mut_ptr();
        let mut offset = 0usize;
        for i in 0..n {
            // SAFETY: i < n = wrs.len(), so `wrs.add(i)` is in bounds; `wrs.add(i + 1)` is used
            // only when i + 1 < n. `offset + count ≤ sges.len()` because `push` appended exactly
            // `count` SGEs for each WR, in order. Both arrays live in `self` and do not move until
            // the next `&mut self` call.
            unsafe {
                let this = wrs.add(i);
                let count = (*this).sges();
                let next = if i + 1 < n {
                    wrs.add(i + 1)
                } else {
                    ptr::null_mut()
                };
                let sg = if count > 0 {
                    sges.add(offset)
                } else {
                    ptr::null_mut()
                };
                W::link(this, next, sg);
                offset += count;
            }
        }
        if n == 0 { ptr::null_mut() } else { wrs }
    }

    /// Index of `bad` in the chain whose head [`Chain::link`] returned (the driver's "first WR not
    /// posted"), or `None` for a pointer outside it.
    pub(crate) fn index_of(&self, bad: *const W) -> Option<usize> {
        let base = self.wrs.as_ptr() as usize;
        let at = (bad as usize).checked_sub(base)?;
        let i = at / size_of::<W>();
        (at % size_of::<W>() == 0 && i < self.wrs.len()).then_some(i)
    }

    /// Empties the chain, keeping its capacity.
    pub(crate) fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counting_alloc::allocations;

    fn sge(addr: u64, length: u32) -> sys::ibv_sge {
        sys::ibv_sge {
            addr,
            length,
            lkey: 7,
        }
    }

    #[test]
    fn ids_are_reused_and_stale_ids_never_match() {
        let mut t = WrTable::with_capacity(2);
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(t.take(a), Some("a"));
        assert_eq!(t.take(a), None, "taken twice");
        let c = t.insert("c").unwrap();
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff, "the freed slot is reused");
        assert_ne!(c, a, "with a new generation");
        assert_eq!(t.take(a), None, "a stale id does not take the new entry");
        assert_eq!(t.take(u64::MAX), None);
        assert_eq!(t.len(), 2);
        t.retain(|v| *v != "b");
        assert_eq!((t.len(), t.take(b)), (1, None));
        assert_eq!(t.take(c), Some("c"));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_chain_links_each_wr_to_the_next_and_to_its_own_sges() {
        let mut c: Chain<sys::ibv_send_wr> = Chain::new();
        c.push([sge(0x1000, 1), sge(0x2000, 2)]).wr_id = 10;
        c.push([]).wr_id = 11;
        c.push([sge(0x3000, 3)]).wr_id = 12;
        let head = c.link();
        let mut seen = Vec::new();
        let mut p = head;
        // SAFETY: the chain was just linked and is not modified while it is walked.
        unsafe {
            while !p.is_null() {
                let wr = &*p;
                let sges: Vec<(u64, u32)> = (0..wr.num_sge as usize)
                    .map(|i| {
                        let s = &*wr.sg_list.add(i);
                        (s.addr, s.length)
                    })
                    .collect();
                assert_eq!(wr.num_sge == 0, wr.sg_list.is_null());
                seen.push((wr.wr_id, sges));
                p = wr.next;
            }
        }
        assert_eq!(
            seen,
            [
                (10, vec![(0x1000, 1), (0x2000, 2)]),
                (11, vec![]),
                (12, vec![(0x3000, 3)])
            ]
        );
        // SAFETY: in-bounds offsets of the linked chain.
        let (second, past) = unsafe { (head.add(1), head.add(3)) };
        assert_eq!(c.index_of(head), Some(0));
        assert_eq!(c.index_of(second), Some(1));
        assert_eq!(c.index_of(past), None);
        assert_eq!(c.index_of(ptr::null()), None);
        c.clear();
        assert!(c.link().is_null(), "an empty chain has no head");
    }

    #[test]
    fn a_receive_chain_links_too() {
        let mut c: Chain<sys::ibv_recv_wr> = Chain::new();
        c.push(None);
        c.push(Some(sge(0x4000, 4)));
        let head = c.link();
        // SAFETY: `head` is the chain's first WR and its `next` the second, both owned by `c`, which
        // lives (unchanged) until the end of the test.
        unsafe {
            assert!((*head).sg_list.is_null() && (*head).num_sge == 0);
            let second = (*head).next;
            assert_eq!((*(*second).sg_list).addr, 0x4000);
            assert!((*second).next.is_null());
        }
    }

    #[test]
    fn steady_state_posting_bookkeeping_allocates_nothing() {
        let mut table = WrTable::with_capacity(4);
        let mut chain: Chain<sys::ibv_send_wr> = Chain::new();
        let mut round = |batch: usize| {
            for i in 0..batch {
                let id = table.insert(i).unwrap_or(0);
                chain.push([sge(i as u64, 64)]).wr_id = id;
            }
            let head = chain.link();
            assert!(!head.is_null());
            for i in 0..batch {
                let id = chain.get(i).map_or(0, |w| w.wr_id);
                assert_eq!(table.take(id), Some(i));
            }
            chain.clear();
        };
        // Warm-up: the table and the chain grow to the largest batch once.
        round(64);
        // Miri interprets every step: a few hundred posts there, 10,000 natively.
        let posts = if cfg!(miri) { 200 } else { 10_000 };
        let (n, ()) = allocations(|| {
            for b in (1..=64).cycle().take(posts) {
                round(b);
            }
        });
        assert_eq!(n, 0, "allocations in {posts} posts of 1..=64 WRs");
        // The check can fail: a fresh chain allocates on its first push.
        let (n, ()) = allocations(|| {
            Chain::<sys::ibv_send_wr>::new().push([sge(0, 1)]);
        });
        assert!(n > 0);
    }
}
