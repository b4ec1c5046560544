//! Short collectives of a communicator whose ranks span hosts: inside each host through the
//! segment (to and from the host's leader, its lowest rank in the communicator), between the
//! leaders by messages, one per host instead of one per rank (MPICH's and Open MPI's
//! "hierarchical" or "two-level" collectives, with volley's collective slots inside the host).
//!
//! The communicator learns its hosts at its first such collective: every member says which host
//! it is on and which collective slot it claimed (an allgather), so every member draws the same
//! picture. If one host's ranks could not all claim a slot, or every rank is alone on its host,
//! nothing is set up and the communicator's collectives stay flat, at every member alike.
//!
//! Reductions fold each host's contributions at its leader (in rank order within the host),
//! then every leader folds the hosts' partial results in the order of their leaders, so every
//! rank ends with the same bits; the hosts are not contiguous in rank order, so only
//! commutative operations go this way (`volley::collectives::applies`). A reduce to one root
//! folds the root's own host at the root itself (not at its leader), and the other hosts'
//! leaders send their partial results straight to it. An allgather gathers each host's blocks
//! at its leader, the leaders trade their hosts' blocks, and each leader broadcasts the whole
//! result to its host through the segment, a slot's worth at a time.

use crate::algos::Red;
use crate::coll::{
    apply, exchange, gather_in_slots, reduce_in_slots, user_bytes, P, TAG_ALLGATHER, TAG_ALLREDUCE,
    TAG_BARRIER, TAG_BCAST, TAG_REDUCE,
};
use crate::err::{from_recv, R};
use crate::nbc::Seq;
use crate::scratch::Scratch;
use crate::state::CommCore;
use volley::{ShmGroup, SlotId};

/// A communicator's hosts.
pub struct Hier {
    /// This host's members meeting in its segment (None: this rank is alone on its host).
    node: Option<ShmGroup>,
    /// The communicator rank of each host's leader, in the order of the leaders' ranks.
    leaders: Vec<usize>,
    /// The host (index into `leaders`) of each communicator rank.
    host_of: Vec<usize>,
    /// This rank's place in its host's group (0: the leader).
    node_rank: usize,
}

/// Bytes each member says at setup: its host, then its slot.
const ENTRY: usize = 24;

impl Hier {
    /// Sets the hierarchy up (every member of `c`, at the same collective), or says there is
    /// none to use.
    pub fn setup(c: &CommCore) -> R<Option<Hier>> {
        let world = c.coll.world();
        let me_w = c.group[c.rank];
        let local_peers = c.group.iter().any(|&w| w != me_w && world.on_this_host(w));
        let mine = if local_peers {
            world.shm_claim()
        } else {
            SlotId::NONE
        };
        let mut entry = [0u8; ENTRY];
        entry[..8].copy_from_slice(&(world.node_id() as u64).to_le_bytes());
        entry[8..].copy_from_slice(&mine.to_bytes());
        let mut all = vec![0u8; ENTRY * c.size()];
        if let Err(e) = crate::coll::allgather_bytes(c, &entry, &mut all) {
            world.shm_unclaim(mine);
            return Err(e);
        }
        let node_of: Vec<u64> = all
            .chunks(ENTRY)
            .map(|e| u64::from_le_bytes(e[..8].try_into().expect("8 bytes")))
            .collect();
        let slots: Vec<SlotId> = all
            .chunks(ENTRY)
            .map(|e| SlotId::from_bytes(&e[8..]))
            .collect();
        // Hosts in the order of their lowest rank; that rank leads.
        let mut leaders: Vec<usize> = Vec::new();
        let mut host_of = vec![0usize; c.size()];
        for r in 0..c.size() {
            match leaders.iter().position(|&l| node_of[l] == node_of[r]) {
                Some(h) => host_of[r] = h,
                None => {
                    host_of[r] = leaders.len();
                    leaders.push(r);
                }
            }
        }
        let crowded = leaders.len() < c.size();
        // Every rank that shares a host claimed a slot, or the hierarchy is off everywhere.
        let claimed = (0..c.size()).all(|r| {
            let alone = host_of.iter().filter(|&&h| h == host_of[r]).count() == 1;
            alone || slots[r] != SlotId::NONE
        });
        let members: Vec<usize> = (0..c.size())
            .filter(|&r| host_of[r] == host_of[c.rank])
            .collect();
        let node_rank = members
            .iter()
            .position(|&r| r == c.rank)
            .expect("a member is on its own host");
        let node = if members.len() > 1 {
            let ids: Vec<SlotId> = members.iter().map(|&r| slots[r]).collect();
            world.shm_group(&ids, node_rank)
        } else {
            None
        };
        if !crowded || leaders.len() < 2 || !claimed {
            // Dropping the group gives its slot back.
            drop(node);
            return Ok(None);
        }
        Ok(Some(Hier {
            node,
            leaders,
            host_of,
            node_rank,
        }))
    }

    fn leader(&self) -> bool {
        self.node_rank == 0
    }

    /// This rank's host, as an index into `leaders`.
    fn host(&self, c: &CommCore) -> usize {
        self.host_of[c.rank]
    }

    /// Returns once every member has called it.
    pub fn barrier(&self, c: &CommCore, s: Seq) -> R {
        if let Some(g) = &self.node {
            g.barrier().map_err(|e| from_recv(&e))?;
        }
        if self.leader() {
            // Dissemination among the leaders.
            let (n, me) = (self.leaders.len(), self.host(c));
            let tag = s.tag(TAG_BARRIER);
            let mut k = 1;
            while k < n {
                let to = self.leaders[(me + k) % n];
                let from = self.leaders[(me + n - k) % n];
                exchange(c, &[(to, tag, &[])], &mut [(from, tag, &mut [])])?;
                k *= 2;
            }
        }
        if let Some(g) = &self.node {
            // The leader lets its host go.
            g.bcast(0, &mut []).map_err(|e| from_recv(&e))?;
        }
        Ok(())
    }

    /// `buf` of communicator rank `root` to every member.
    pub fn bcast(&self, c: &CommCore, s: Seq, root: usize, buf: &mut [u8]) -> R {
        let root_host = self.host_of[root];
        let tag = s.tag(TAG_BCAST);
        if self.host(c) == root_host {
            // The root's host: straight from the root, its leader included.
            if let Some(g) = &self.node {
                let from = (0..=root).filter(|&r| self.host_of[r] == root_host).count() - 1;
                g.bcast(from, buf).map_err(|e| from_recv(&e))?;
            }
            if self.leader() {
                let sends: Vec<(usize, u32, &[u8])> = self
                    .leaders
                    .iter()
                    .filter(|&&l| self.host_of[l] != root_host)
                    .map(|&l| (l, tag, &*buf))
                    .collect();
                exchange(c, &sends, &mut [])?;
            }
        } else {
            if self.leader() {
                let from = self.leaders[root_host];
                exchange(c, &[], &mut [(from, tag, &mut *buf)])?;
            }
            if let Some(g) = &self.node {
                g.bcast(0, buf).map_err(|e| from_recv(&e))?;
            }
        }
        Ok(())
    }

    /// Allreduce of `mine` into `out` (the same length; `out` may hold `mine` already, for
    /// MPI_IN_PLACE: `mine` is read before `out` is written) under commutative `op`.
    pub fn allreduce(&self, c: &CommCore, s: Seq, red: Red, n: usize, mine: P, out: P) -> R {
        let len = n * red.t.size;
        if len == 0 {
            return Ok(());
        }
        let user = |p: P| {
            // SAFETY: MPI's rule for the program's buffers (or the caller's packed copies);
            // each slice lives for one step, and `mine` is read before `out` is written.
            unsafe { user_bytes(p, len) }
        };
        // 1. The host's contributions folded at its leader, into `out`.
        match &self.node {
            Some(g) => reduce_in_slots(g, Some(0), red, n, mine, out)?,
            None => {
                if mine.get() != out.get() {
                    user(out).copy_from_slice(user(mine));
                }
            }
        }
        // 2. The leaders trade their hosts' results and fold them in the leaders' order, the
        // same on every leader (so that all get the same bits): t0 op (t1 op (... op t(h-1))).
        // Ours is sent from `out`, which nothing writes until every send is done; the others'
        // land in scratch slots (kept between calls, never zeroed), so that at most one copy
        // of the vector is made (there were a copy out, a fresh zeroed vector for all hosts and
        // two copies back, and two allocations, per call).
        if self.leader() {
            let tag = s.tag(TAG_ALLREDUCE);
            let h = self.leaders.len();
            let me = self.host(c);
            // Leader k's slot (k != me).
            let slot = |k: usize| if k < me { k } else { k - 1 };
            let mut theirs = Scratch::new(len * (h - 1));
            {
                let mine: &[u8] = user(out);
                let sends: Vec<(usize, u32, &[u8])> = (0..h)
                    .filter(|&k| k != me)
                    .map(|k| (self.leaders[k], tag, mine))
                    .collect();
                let mut recvs: Vec<(usize, u32, &mut [u8])> = theirs
                    .chunks_mut(len)
                    .enumerate()
                    .map(|(i, b)| {
                        let k = if i < me { i } else { i + 1 };
                        (self.leaders[k], tag, b)
                    })
                    .collect();
                exchange(c, &sends, &mut recvs)?;
            }
            let o = user(out);
            if me == h - 1 {
                // Ours is the innermost: fold the others into it in place.
                for k in (0..h - 1).rev() {
                    let i = slot(k) * len;
                    apply(red.op, red.t, red.th, n, &theirs[i..i + len], o)?;
                }
            } else {
                // The fold runs in the last leader's slot (the last one); ours joins at its turn.
                let (srcs, acc) = theirs.split_at_mut(slot(h - 1) * len);
                for k in (0..h - 1).rev() {
                    let src: &[u8] = if k == me {
                        o
                    } else {
                        &srcs[slot(k) * len..(slot(k) + 1) * len]
                    };
                    apply(red.op, red.t, red.th, n, src, acc)?;
                }
                o.copy_from_slice(acc);
            }
        }
        // 3. The result from each leader to its host.
        if let Some(g) = &self.node {
            g.bcast(0, user(out)).map_err(|e| from_recv(&e))?;
        }
        Ok(())
    }

    /// The members of host `h` (communicator ranks, in rank order: the order of its group).
    fn members(&self, h: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.host_of.len()).filter(move |&r| self.host_of[r] == h)
    }

    /// Reduce of `mine` into `out` at communicator rank `root` under commutative `op` (`out`
    /// is significant at the root only; there it may hold `mine` already, for MPI_IN_PLACE).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        c: &CommCore,
        s: Seq,
        red: Red,
        n: usize,
        root: usize,
        mine: P,
        out: P,
    ) -> R {
        let len = n * red.t.size;
        if len == 0 {
            return Ok(());
        }
        let user = |p: P| {
            // SAFETY: MPI's rule for the program's buffers (or the caller's packed copies);
            // each slice lives for one step, and `mine` is read before `out` is written.
            unsafe { user_bytes(p, len) }
        };
        let (me, root_host) = (self.host(c), self.host_of[root]);
        let tag = s.tag(TAG_REDUCE);
        // 1. Each host's contributions folded at the root (on its host) or at the leader.
        let rep = if me == root_host {
            self.members(root_host)
                .position(|r| r == root)
                .expect("the root is on its host")
        } else {
            0
        };
        let mut partial = if me != root_host && self.node_rank == rep {
            vec![0u8; len]
        } else {
            Vec::new()
        };
        // The root folds into `out`; a rank that does not fold never writes what it is given.
        let here = if partial.is_empty() {
            out
        } else {
            P::new(partial.as_mut_ptr())
        };
        match &self.node {
            Some(g) => reduce_in_slots(g, Some(rep), red, n, mine, here)?,
            None if c.rank == root => {
                if mine.get() != out.get() {
                    user(out).copy_from_slice(user(mine));
                }
            }
            None => partial.copy_from_slice(user(mine)),
        }
        // 2. The other hosts' leaders send their partial results to the root, which folds them
        // in (the operation commutes).
        if c.rank == root {
            let h = self.leaders.len();
            let mut theirs = vec![0u8; len * h];
            {
                let mut recvs: Vec<(usize, u32, &mut [u8])> = theirs
                    .chunks_mut(len)
                    .enumerate()
                    .filter(|&(k, _)| k != me)
                    .map(|(k, b)| (self.leaders[k], tag, b))
                    .collect();
                exchange(c, &[], &mut recvs)?;
            }
            let o = user(out);
            for k in (0..h).rev().filter(|&k| k != me) {
                apply(red.op, red.t, red.th, n, &theirs[k * len..(k + 1) * len], o)?;
            }
        } else if !partial.is_empty() {
            exchange(c, &[(root, tag, &partial[..])], &mut [])?;
        }
        Ok(())
    }

    /// Allgather of every member's `len` bytes at `mine` into `out` (a block per communicator
    /// rank, in rank order; `mine` may lie inside `out`, for MPI_IN_PLACE: it is read before
    /// `out` is written here).
    pub fn allgather(&self, c: &CommCore, s: Seq, mine: P, len: usize, out: P) -> R {
        let k = self.host_of.len();
        if len == 0 {
            return Ok(());
        }
        let me = self.host(c);
        // 1. The host's blocks gathered at its leader (in its members' order).
        let mut host_blocks = Vec::new();
        if self.leader() {
            host_blocks = vec![0u8; len * self.members(me).count()];
        }
        match &self.node {
            Some(g) => gather_in_slots(g, Some(0), mine, len, P::new(host_blocks.as_mut_ptr()))?,
            None => {
                // SAFETY: MPI's rule for the program's buffer (or the caller's packed copy).
                host_blocks.copy_from_slice(unsafe { user_bytes(mine, len) });
            }
        }
        // SAFETY: MPI's rule for the program's receive buffer (or the caller's packed copy),
        // a block per rank; this rank's own block was read above.
        let all = unsafe { user_bytes(out, len * k) };
        // 2. The leaders trade their hosts' blocks and lay every block in its rank's place.
        if self.leader() {
            let h = self.leaders.len();
            let tag = s.tag(TAG_ALLGATHER);
            let mut theirs: Vec<Vec<u8>> = (0..h)
                .map(|x| {
                    if x == me {
                        Vec::new()
                    } else {
                        vec![0u8; len * self.members(x).count()]
                    }
                })
                .collect();
            {
                let sends: Vec<(usize, u32, &[u8])> = (0..h)
                    .filter(|&x| x != me)
                    .map(|x| (self.leaders[x], tag, &host_blocks[..]))
                    .collect();
                let mut recvs: Vec<(usize, u32, &mut [u8])> = theirs
                    .iter_mut()
                    .enumerate()
                    .filter(|&(x, _)| x != me)
                    .map(|(x, b)| (self.leaders[x], tag, &mut b[..]))
                    .collect();
                exchange(c, &sends, &mut recvs)?;
            }
            theirs[me] = host_blocks;
            for (x, blocks) in theirs.iter().enumerate() {
                for (j, r) in self.members(x).enumerate() {
                    all[r * len..(r + 1) * len].copy_from_slice(&blocks[j * len..(j + 1) * len]);
                }
            }
        }
        // 3. The whole result from each leader to its host, a slot's worth at a time.
        if let Some(g) = &self.node {
            for piece in all.chunks_mut(volley::SHM_COLL_BYTES) {
                g.bcast(0, piece).map_err(|e| from_recv(&e))?;
            }
        }
        Ok(())
    }
}
